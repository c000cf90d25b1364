"""The pure preemption core: the fewest lower-priority pods on the right GPU, lowest priority
first, budgets and quotas respected; and the budget counting kube-scheduler does."""
import itertools

import pytest

from hami_common.pod_devices import ContainerDevice
from hami_control.placement import Reservation
from hami_control.placement.pdb import PdbSpec, parse_pdb, violations
from hami_control.placement.preempt import Candidate, QuotaRule, choose
from hami_control.placement.quota import Amount
from tests.unit._placement_fixtures import gpu, request, view_of

A100 = "NVIDIA-A100"


def _node(*mems, type_=A100):
    view = view_of({"n": [gpu(f"G{i}", mem=m, type_=type_, index=i)
                          for i, m in enumerate(mems)]})
    return view


def _hold(view, key, prio, *slices, labels=None, cores=10):
    """A pod holding (gpu, MiB) slices, reserved in the view; its Candidate."""
    devices = tuple((ContainerDevice(uuid=g, usedmem=m, usedcores=cores),) for g, m in slices)
    r = Reservation(key, "n", devices)
    view.reserve(r)
    return Candidate(key, prio, r, labels or {})


def _keys(plan):
    return [c.key for c in plan.victims]


def test_evicts_the_one_pod_on_the_gpu_that_frees_enough_not_the_pods_elsewhere():
    v = _node(40000, 40000)
    cands = [_hold(v, "t/a", 0, ("G0", 20000)), _hold(v, "t/b", 0, ("G0", 20000)),
             _hold(v, "t/c", 0, ("G1", 30000))]
    _hold(v, "t/d", 1000, ("G1", 8000))                # as high as the preemptor: stays
    plan = choose(v.node("n"), request(mem=30000, cores=10), cands)
    assert plan.ok and _keys(plan) == ["t/c"] and plan.exhaustive
    assert [d.uuid for ctr in plan.devices for d in ctr] == ["G1"]
    assert "evicting t/c (priority 0) frees G1" in plan.reason


def test_fewest_victims_then_lowest_priorities():
    v = _node(40000, 40000)
    cands = [_hold(v, "t/a", 5, ("G0", 30000)),        # one pod of priority 5 ...
             _hold(v, "t/b", 1, ("G1", 15000)), _hold(v, "t/c", 1, ("G1", 15000))]
    assert _keys(choose(v.node("n"), request(mem=28000), cands)) == ["t/a"]
    v2 = _node(40000, 40000)
    cands = [_hold(v2, "t/a", 5, ("G0", 30000)), _hold(v2, "t/b", 3, ("G1", 30000))]
    assert _keys(choose(v2.node("n"), request(mem=25000), cands)) == ["t/b"]


def test_greedy_would_take_two_but_one_larger_pod_is_enough():
    v = _node(40000)
    cands = [_hold(v, "t/s1", 0, ("G0", 5000)), _hold(v, "t/s2", 0, ("G0", 5000)),
             _hold(v, "t/big", 1, ("G0", 28000))]
    plan = choose(v.node("n"), request(mem=12000), cands)
    assert _keys(plan) == ["t/big"] and plan.exhaustive


def test_no_plan_when_even_every_lower_pod_gone_is_not_enough():
    v = _node(16000, type_="NVIDIA-T4")
    cands = [_hold(v, "t/a", 0, ("G0", 4000))]
    _hold(v, "t/high", 9999, ("G0", 10000))
    plan = choose(v.node("n"), request(mem=8000), cands)
    assert not plan.ok and "even with every lower-priority pod gone" in plan.reason
    assert not choose(v.node("n"), request(mem=1000, annotations={
        "nvidia.com/use-gputype": "A100"}), cands).ok


def test_a_two_gpu_pod_frees_two_gpus_with_the_fewest_victims():
    v = _node(40000, 40000, 40000)
    cands = [_hold(v, "t/wide", 0, ("G0", 30000), ("G1", 30000)),   # one pod on two GPUs
             _hold(v, "t/x", 0, ("G1", 1000)), _hold(v, "t/y", 0, ("G2", 30000))]
    plan = choose(v.node("n"), request(gpus=2, mem=20000), cands)
    assert _keys(plan) == ["t/wide"]


def test_budgets_are_spared_where_another_set_exists():
    v = _node(40000, 40000)
    protected = _hold(v, "t/p", 0, ("G0", 30000), labels={"app": "db"})
    others = [_hold(v, "t/q", 1, ("G1", 15000)), _hold(v, "t/r", 1, ("G1", 15000))]
    _hold(v, "t/high", 1000, ("G1", 8000))
    budgets = [PdbSpec("t", "db", {"app": "db"}, allowed=0)]
    plan = choose(v.node("n"), request(mem=28000), [protected, *others], budgets=budgets)
    assert _keys(plan) == ["t/q", "t/r"] and plan.pdb_violations == 0
    plan = choose(v.node("n"), request(mem=35000), [protected, *others], budgets=budgets)
    assert _keys(plan) == ["t/p"] and plan.pdb_violations == 1
    assert "violates 1 PodDisruptionBudget" in plan.reason


def test_forced_victims_go_and_only_what_the_gpu_still_needs_is_added():
    v = _node(40000, 40000)
    a = _hold(v, "t/a", 1, ("G0", 30000))
    b = _hold(v, "t/b", 0, ("G1", 30000))
    c = _hold(v, "t/c", 0, ("G1", 5000))
    plan = choose(v.node("n"), request(mem=20000), [a, c], forced=[b])
    assert _keys(plan) == ["t/b"]              # kube-scheduler's own victim frees G1 already
    plan = choose(v.node("n"), request(mem=38000), [a, c], forced=[b])
    assert _keys(plan) == ["t/b", "t/c"]


def test_over_quota_preempts_only_its_own_namespace_and_enough_to_fit_the_quota():
    v = _node(40000)
    other = _hold(v, "other/x", 0, ("G0", 20000))
    mine = _hold(v, "t/mine", 0, ("G0", 10000))
    rule = QuotaRule("t", {"limits.nvidia.com/gpumem": 25000}, Amount(1, 10000, 10))
    plan = choose(v.node("n"), request(mem=20000), [other, mine], quota=rule)
    assert _keys(plan) == ["t/mine"]            # over quota: its own pod goes, not other/x
    assert "may preempt only pods of namespace t" in plan.reason
    plan = choose(v.node("n"), request(mem=25000), [other, mine], quota=rule)
    assert not plan.ok                          # the GPU would also need other/x's slice
    assert "may preempt only pods of namespace t" in plan.reason
    rule = QuotaRule("t", {"limits.nvidia.com/gpumem": 60000}, Amount(1, 10000, 10))
    plan = choose(v.node("n"), request(mem=25000), [other, mine], quota=rule)
    assert _keys(plan) == ["other/x"]           # within quota: any namespace, by priority


def test_over_quota_within_the_namespace_frees_its_own_slice():
    v = _node(40000)
    mine = _hold(v, "t/mine", 0, ("G0", 30000))
    rule = QuotaRule("t", {"limits.nvidia.com/gpumem": 30000}, Amount(1, 30000, 10))
    plan = choose(v.node("n"), request(mem=20000), [mine], quota=rule)
    assert _keys(plan) == ["t/mine"]


@pytest.mark.parametrize("seed", range(30))
def test_matches_an_exhaustive_search_on_small_nodes(seed):
    import random
    rng = random.Random(seed)
    v = _node(16000, 16000)
    cands, i = [], 0
    for g in ("G0", "G1"):
        free = 16000
        while free > 2000:
            mem = rng.choice([1000, 2000, 4000, 6000])
            if mem > free:
                break
            cands.append(_hold(v, f"t/p{i}", rng.choice([0, 1, 2]), (g, mem), cores=5))
            free -= mem
            i += 1
    req = request(mem=rng.choice([6000, 9000, 12000]), cores=5)
    plan = choose(v.node("n"), req, cands)
    best = _brute_force(v, req, cands)
    assert (plan.ok, len(plan.victims or ())) == (best is not None, len(best or ()))
    if best is not None:
        assert max(c.priority for c in plan.victims) <= max(c.priority for c in best)


def _brute_force(view, req, cands):
    from hami_control.placement.fit import fit_pod
    from hami_control.placement.policy import Binpack
    from hami_control.placement.preempt import remove, scratch_node
    for size in range(len(cands) + 1):
        fitting = []
        for subset in itertools.combinations(cands, size):
            node = scratch_node(view.node("n"))
            remove(node, (c.reservation for c in subset))
            if fit_pod(node, req, Binpack())[0] is not None:
                fitting.append(subset)
        if fitting:
            return min(fitting, key=lambda s: max(c.priority for c in s))
    return None


def test_budget_violations_count_as_kube_scheduler_does():
    budgets = [PdbSpec("t", "b", {"app": "a"}, allowed=1, disrupted=frozenset({"gone"}))]

    class V:
        def __init__(self, key, labels):
            self.key, self.labels = key, labels
    pods = [V("t/one", {"app": "a"}), V("t/two", {"app": "a"}), V("t/gone", {"app": "a"}),
            V("t/none", {}), V("u/other", {"app": "a"})]
    assert violations(pods, budgets) == 1       # one allowed; 'gone' already counted; no labels
    spec = parse_pdb({"metadata": {"name": "b", "namespace": "t"},
                      "spec": {"selector": {"matchExpressions": [
                          {"key": "tier", "operator": "In", "values": ["gpu"]}]}},
                      "status": {"disruptionsAllowed": 0}})
    assert spec.selects("t", {"tier": "gpu"}) and not spec.selects("t", {"tier": "cpu"})
    empty = parse_pdb({"metadata": {"name": "e", "namespace": "t"}, "spec": {}})
    assert not empty.selects("t", {"x": "y"})
