"""Namespace GPU quotas: reading ResourceQuota objects, counting what pods hold in the units of
the GPUs chosen, and refusing within the state's filter step (reservation counts at once)."""
import threading

import pytest

from hami_common.errors import HamiFormatError
from hami_common.pod_devices import ContainerDevice
from hami_control.placement import Reservation
from hami_control.placement.annotations import NodeRegistration
from hami_control.placement.quota import (REASON, Amount, QuotaSpec, effective_limits,
                                          parse_quota, pod_amount, refusal, request_floor,
                                          status_patch)
from hami_control.state import make_state
from tests.unit._placement_fixtures import gpu, pod_dict, request

GPU, MEM, CORES = "limits.nvidia.com/gpu", "limits.nvidia.com/gpumem", \
    "limits.nvidia.com/gpucores"


def _quota(hard, ns="t", name="q"):
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"hard": hard}}


@pytest.mark.parametrize("hard, limits", [
    ({MEM: "20000", GPU: "4", CORES: "250"}, {MEM: 20000, GPU: 4, CORES: 250}),
    ({MEM: "20k"}, {MEM: 20000}),                      # the API server's canonical spelling
    ({MEM: "2Gi"}, {MEM: 2048}),                       # a binary unit is bytes
    ({MEM: "2Gi", "requests.nvidia.com/gpu": "3", "cpu": "4"}, {MEM: 2048}),
], ids=["plain", "decimal-suffix", "binary-bytes", "other-keys-ignored"])
def test_parse_quota_reads_hamis_keys(hard, limits):
    assert parse_quota(_quota(hard)).limits == limits


def test_parse_quota_without_hamis_keys_and_with_bad_values():
    assert parse_quota(_quota({"requests.nvidia.com/gpu": "3"})) is None
    with pytest.raises(HamiFormatError, match="t/q.*limits.nvidia.com/gpumem"):
        parse_quota(_quota({MEM: "1.5"}))
    with pytest.raises(HamiFormatError, match="limits.nvidia.com/gpu"):
        parse_quota(_quota({GPU: "two"}))


def test_every_quota_of_a_namespace_holds():
    specs = [QuotaSpec("t", "a", {MEM: 100, GPU: 2}), QuotaSpec("t", "b", {MEM: 50})]
    assert effective_limits(specs) == {MEM: 50, GPU: 2}


def _ctr(*slices):
    return tuple(ContainerDevice(f"GPU-{i}", mem, cores) for i, (mem, cores) in enumerate(slices))


@pytest.mark.parametrize("devices, inits, held", [
    ((_ctr((1000, 10), (1000, 10)),), set(), (2, 2000, 20)),
    ((_ctr((1000, 10)), _ctr((3000, 30))), set(), (2, 4000, 40)),
    # an init container runs alone before the app containers: the larger counts
    ((_ctr((8000, 50)), _ctr((1000, 10))), {0}, (1, 8000, 50)),
    ((_ctr((500, 5)), _ctr((1000, 10), (1000, 10))), {0}, (2, 2000, 20)),
    # a sidecar (position 0, not init) runs beside the init container after it
    ((_ctr((1000, 10)), _ctr((4000, 40)), _ctr((2000, 20))), {1}, (2, 5000, 50)),
    ((_ctr(), _ctr()), set(), (0, 0, 0)),
], ids=["two-gpus", "two-containers", "init-larger", "app-larger", "sidecar-under-init",
        "none"])
def test_pod_amount_counts_like_kubernetes(devices, inits, held):
    assert pod_amount(devices, inits) == Amount(*held)


def test_request_floor_is_exact_without_percentages():
    assert request_floor(request(gpus=2, mem=3000, cores=20)) == (2, 6000, 40)
    assert request_floor(request(gpus=2, pct=50, cores=20)) == (2, 0, 40)


def test_refusal_names_the_numbers():
    limits = {MEM: 20000, GPU: 4}
    assert refusal("t", limits, Amount(1, 16000, 0), Amount(1, 4000, 30)) is None
    why = refusal("t", limits, Amount(1, 18000, 0), Amount(1, 4000, 30))
    assert why == f"{REASON}: namespace t {MEM}: used 18000 + asked 4000 > limit 20000 MiB"
    assert refusal("t", limits, Amount(9, 0, 0), Amount(0, 0, 0)) is None   # asks nothing


def _state(nodes):
    state = make_state()
    for name, devices in nodes.items():
        state.apply_node(name, NodeRegistration(name, tuple(devices)))
    return state


def _limit(state, **limits):
    state.apply_quota("t", "q", QuotaSpec("t", "q", {f"limits.nvidia.com/{k}": v
                                                      for k, v in limits.items()}))


def test_a_namespace_at_its_gpumem_quota_is_refused_with_numbers():
    state = _state({"n1": [gpu("A", mem=16000)]})
    _limit(state, gpumem=10000)
    assert state.decide(request(name="a", mem=6000), None).decision.ok
    refused = state.decide(request(name="b", mem=6000), None).decision
    assert not refused.ok
    assert refused.failed == {"n1": f"{REASON}: namespace t {MEM}: used 6000 + asked 6000 > "
                                     "limit 10000 MiB"}
    assert REASON in refused.message
    state.apply_pod("t/a", None, None, deleted=True)         # a pod finishes: quota frees
    assert state.decide(request(name="b", mem=6000), None).decision.ok


def test_a_percentage_counts_in_mib_of_the_chosen_gpu():
    state = _state({"big": [gpu("B", mem=80000)], "small": [gpu("S", mem=16000)]})
    _limit(state, gpumem=10000)
    # 50% is 40000 MiB on the big GPU, over the quota; 8000 MiB on the small one fits
    decision = state.decide(request(name="a", pct=50, cores=10), None).decision
    assert decision.node == "small" and decision.devices[0][0].usedmem == 8000
    assert state.view.namespace_used("t") == (1, 8000, 10)
    refused = state.decide(request(name="b", pct=50, cores=10), ["big"]).decision
    assert "used 8000 + asked 40000 > limit 10000" in refused.failed["big"]


def test_other_namespaces_and_pods_without_quota_keys_are_not_limited():
    state = _state({"n1": [gpu("A", mem=16000), gpu("B", mem=16000)]})
    _limit(state, gpu=1)
    other = pod_dict(name="o", mem=1000)
    other["metadata"]["namespace"] = "other"
    from hami_common.request import parse_pod
    assert state.decide(parse_pod(other), None).decision.ok
    assert state.decide(parse_pod({**other, "metadata": {"name": "o2", "namespace": "other"}}),
                        None).decision.ok
    assert state.decide(request(name="a", mem=1000), None).decision.ok
    assert not state.decide(request(name="b", mem=1000), None).decision.ok


def test_refiltering_a_pod_does_not_count_it_twice():
    state = _state({"n1": [gpu("A", mem=16000)]})
    _limit(state, gpumem=6000)
    assert state.decide(request(name="a", mem=6000), None).decision.ok
    assert state.decide(request(name="a", mem=6000), None).decision.ok


def test_deleting_the_quota_lifts_the_limit():
    state = _state({"n1": [gpu("A", mem=16000)]})
    _limit(state, gpumem=1000)
    assert not state.decide(request(name="a", mem=6000), None).decision.ok
    state.apply_quota("t", "q", None)
    assert state.decide(request(name="a", mem=6000), None).decision.ok
    assert state.reconcile_quotas([]) == 0


def test_racing_decisions_never_exceed_the_quota():
    state = _state({f"n{i}": [gpu(f"G{i}-{j}", mem=16000) for j in range(4)]
                    for i in range(8)})
    _limit(state, gpumem=10 * 3000, gpu=32)
    results, barrier = [], threading.Barrier(32)

    def one(i):
        barrier.wait()
        results.append(state.decide(request(name=f"p{i}", mem=3000), None).decision.ok)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 10
    assert state.view.namespace_used("t") == (10, 30000, 0)
    assert [(s.name, used) for s, used in state.quota_usage()] == [("q", (10, 30000, 0))]


def test_sync_reservations_count_against_the_quota():
    state = _state({"n1": [gpu("A", mem=16000)]})
    _limit(state, gpumem=8000)
    held = Reservation("t/x", "n1", ((ContainerDevice("A", 5000, 0),),))
    state.apply_pod("t/x", 3, held)
    refused = state.decide(request(name="a", mem=4000), None).decision
    assert "used 5000 + asked 4000 > limit 8000" in refused.message


def test_status_patch_writes_only_what_the_status_lacks():
    quota = _quota({MEM: "20000", GPU: "4"})
    spec = parse_quota(quota)
    assert status_patch(spec, Amount(1, 6000, 30)) == {
        "hard": {GPU: "4", MEM: "20000"}, "used": {GPU: "1", MEM: "6000"}}
    # as the API server stores it (canonical "20k", "6k"), beside Kubernetes' own keys
    quota["status"] = {"hard": {MEM: "20k", GPU: "4", "requests.nvidia.com/gpu": "2"},
                       "used": {MEM: "6k", GPU: "1", "requests.nvidia.com/gpu": "1"}}
    assert status_patch(parse_quota(quota), Amount(1, 6000, 30)) is None
    assert status_patch(parse_quota(quota), Amount(2, 9000, 30))["used"] == {GPU: "2",
                                                                             MEM: "9000"}
    quota["status"]["used"][MEM] = "garbage"
    assert status_patch(parse_quota(quota), Amount(1, 6000, 30)) is not None


def test_sync_keeps_earlier_limits_of_a_quota_that_became_unreadable(caplog):
    from hami_control.cluster.sync import QUOTAS, ClusterSync
    state = _state({"n1": [gpu("A", mem=16000)]})
    sync = ClusterSync(source=None, state=state)
    assert QUOTAS in sync.kinds
    sync._apply(QUOTAS, "ADDED", _quota({MEM: "1000"}))
    sync._apply(QUOTAS, "MODIFIED", _quota({MEM: "1.5"}))
    assert "give a whole number" in caplog.text
    assert state.namespace_quotas() == [("t", {MEM: 1000}, Amount())]
    sync._apply(QUOTAS, "DELETED", _quota({MEM: "1000"}))
    assert state.namespace_quotas() == []
    assert QUOTAS not in ClusterSync(source=None, state=state, quotas=False).kinds
