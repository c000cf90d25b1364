"""Property: whatever the pods and policies, no GPU is ever overcommitted (memory, cores,
slots) and a card given exclusively is shared with nobody."""
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_common.errors import RequestError
from hami_common.request import parse_pod
from hami_control.placement import Engine, PlacementConfig, Reservation
from hami_control.placement.registry import PolicyRegistry

from _placement_fixtures import gpu, view_of

POLICIES = ["binpack", "spread", "fragaware", "random", "bestfit"]

devices = st.lists(st.tuples(st.integers(1, 4), st.sampled_from([4000, 16000]),
                             st.integers(0, 1), st.sampled_from(["NVIDIA-T4", "NVIDIA-A10"])),
                   min_size=1, max_size=4)
limits = st.fixed_dictionaries({"nvidia.com/gpu": st.integers(1, 3)}, optional={
    "nvidia.com/gpumem": st.integers(1, 9000),
    "nvidia.com/gpucores": st.sampled_from([0, 10, 30, 50, 100])})
container = st.builds(lambda name, lim: {"name": name, "resources": {"limits": lim}},
                      st.sampled_from(["a", "b", "c"]), limits)
pods = st.lists(st.tuples(st.lists(container, min_size=1, max_size=2),
                          st.lists(container, max_size=1),
                          st.sampled_from([{}, {"nvidia.com/use-gputype": "t4"},
                                           {"nvidia.com/numa-bind": "true"}]),
                          st.booleans()),
                min_size=1, max_size=12)


def exclusive_ok(view) -> bool:
    holders = {}
    for res in view.reservations():
        for uuid in res.device_usage():
            holders.setdefault(uuid, set()).add(res.pod)
    for res in view.reservations():
        for position, ctr in enumerate(res.devices):
            for d in ctr:
                if d.usedcores >= 100 and len(holders[d.uuid]) > 1:
                    return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(devices, min_size=1, max_size=3), pod_specs=pods,
       policy=st.sampled_from(POLICIES), seed=st.integers(0, 1000))
def test_no_device_is_ever_overcommitted(nodes, pod_specs, policy, seed):
    view = view_of({f"n{i}": [gpu(f"GPU-{i}-{j}", mem=mem, count=count, numa=numa, type_=t,
                                  index=j)
                              for j, (count, mem, numa, t) in enumerate(devs)]
                    for i, devs in enumerate(nodes)})
    rng = random.Random(seed)
    engine = Engine(PlacementConfig(node_policy=policy, gpu_policy=policy, explain=False),
                    registry=PolicyRegistry(rng=rng, allow_baselines=True), rng=rng)
    for i, (ctrs, inits, annotations, release) in enumerate(pod_specs):
        try:
            req = parse_pod({"metadata": {"name": f"p{i}", "annotations": annotations},
                             "spec": {"containers": ctrs, "initContainers": inits}})
        except RequestError:
            continue
        decision = engine.place(view, req)
        if decision.ok:
            for ctr, got in zip(req.containers, decision.devices):
                assert len(got) == ctr.nums and len({d.uuid for d in got}) == ctr.nums
            view.reserve(Reservation.of(req, decision))
        assert view.overcommitted() == []
        assert exclusive_ok(view)
        if release and view.reservations():
            view.release(rng.choice(view.reservations()).pod)
    for res in view.reservations():
        view.release(res.pod)
    assert all(d.used == d.usedmem == d.usedcores == 0 for n in view.nodes for d in n.devices)
