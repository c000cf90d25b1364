"""hami-control places MIG pods: nvidia.com/vgpu-mode, the profile and placement per instance,
reservations that never overlap (in the view and read back from HAMi's annotations), the
reason when no layout holds a request, and quotas in the instance's MiB."""
import json

import pytest

from hami_common import constants as C
from hami_common.errors import RequestError
from hami_common.mig import MigPlacement as P
from hami_common.mig import MigAllocation
from hami_common.pod_devices import ContainerDevice, encode
from hami_control.extender.filter import allocation_annotations
from hami_control.placement import Engine, PlacementConfig, Reservation
from hami_control.placement.annotations import build_view
from hami_control.placement.quota import place_within_quota
from hami_common.node_register import encode as encode_register

from _placement_fixtures import gpu, mig_gpu, request, view_of

MIG = {C.ANNO_VGPU_MODE: "mig"}


def _place(view, engine=None, **kwargs):
    engine = engine or Engine(PlacementConfig())
    req = request(**kwargs)
    decision = engine.place(view, req)
    if decision.ok:
        view.reserve(Reservation.of(req, decision))
    return decision


def test_vgpu_mode_chooses_mig_instances_or_hami_core_slices():
    view = view_of({"n": [mig_gpu("GPU-m", 0), gpu("GPU-c", mem=40960, index=1)]})
    shim = _place(view, name="shim", mem=4000)
    assert shim.devices[0][0].uuid == "GPU-c" and not shim.mig
    inst = _place(view, name="inst", mem=4000, annotations=MIG)
    assert inst.devices[0][0].uuid == "GPU-m"
    (alloc,) = inst.mig
    assert (alloc.container_index, alloc.device_index, alloc.gpu_uuid, alloc.profile) == \
        (0, 0, "GPU-m", "1g.5gb")
    # Recorded as HAMi records an instance: its MiB and its share of the GPU's compute.
    assert (inst.devices[0][0].usedmem, inst.devices[0][0].usedcores) == (4864, 14)


def test_mig_only_node_refuses_shim_pods_and_says_why():
    view = view_of({"n": [mig_gpu("GPU-m")]})
    refused = _place(view, name="shim", mem=4000)
    assert not refused.ok and refused.failed == {"n": "1/1 CardModeMismatch"}


@pytest.mark.parametrize("value, ok", [("mig", True), ("hami-core,mig", True),
                                       ("MIG", True), ("mps", False), ("vgpu", False)])
def test_vgpu_mode_values(value, ok):
    if ok:
        assert request(annotations={C.ANNO_VGPU_MODE: value}).filters.mig
    else:
        with pytest.raises(RequestError, match="not a mode hami-py serves"):
            request(annotations={C.ANNO_VGPU_MODE: value})


@pytest.mark.parametrize("kwargs, profile", [
    (dict(mem=4000), "1g.5gb"), (dict(mem=9000), "2g.10gb"), (dict(mem=15000), "4g.20gb"),
    (dict(pct=50), "4g.20gb"), (dict(pct=25), "2g.10gb"), (dict(), "7g.40gb"),
], ids=["4000MiB", "9000MiB", "15000MiB", "50pct", "25pct", "whole"])
def test_profile_is_the_least_memory_that_covers_the_ask(kwargs, profile):
    # Of equal memory, the variant with more SMs while nothing pending needs the difference
    # (HAMi takes the fewest slices: 1g.10gb, 3g.20gb); a percentage counts memory slices.
    view = view_of({"n": [mig_gpu("GPU-m")]})
    assert _place(view, annotations=MIG, **kwargs).mig[0].profile == profile


def test_instances_never_overlap_and_slots_run_out():
    view = view_of({"n": [mig_gpu("GPU-m")]})
    engine = Engine(PlacementConfig())
    seen = []
    for i in range(7):
        decision = _place(view, engine, name=f"p{i}", mem=4000, annotations=MIG)
        seen.append(decision.mig[0].placement)
    assert sorted(seen) == [P(i, 1) for i in range(7)]
    refused = _place(view, engine, name="p7", mem=4000, annotations=MIG)
    assert refused.failed == {"n": "1/1 CardTimeSlicingExhausted"}
    assert view.overcommitted() == []


def test_a_request_no_layout_can_hold_is_refused_with_the_reason():
    view = view_of({"n": [mig_gpu("GPU-m")]})
    for i, start in enumerate((1, 5)):       # 1g instances in both halves
        view.reserve(Reservation(f"t/h{i}", "n", ((_dev(4864, 14),),),
                                 mig=(_alloc(P(start, 1)),)))
    refused = _place(view, name="big", mem=15000, annotations=MIG)
    assert refused.failed == {"n": "1/1 CardMigTopologyInfeasible"}
    assert "CardMigTopologyInfeasible" in refused.message
    too_big = _place(view, name="huge", mem=50000, annotations=MIG)
    assert too_big.failed == {"n": "1/1 CardInsufficientMemory"}


def test_two_containers_of_one_pod_get_two_instances_on_one_gpu():
    containers = [{"name": n, "resources": {"limits": {"nvidia.com/gpu": 1,
                                                       "nvidia.com/gpumem": 15000}}}
                  for n in ("a", "b")]
    view = view_of({"n": [mig_gpu("GPU-m")]})
    decision = _place(view, containers=containers, annotations=MIG)
    assert sorted(a.placement for a in decision.mig) == [P(0, 4), P(4, 4)]
    assert [a.container_index for a in decision.mig] == [0, 1]


def test_hamis_reservations_read_back_block_their_placements():
    # A pod HAMi's scheduler placed: its devices and MIG annotations, in HAMi's format.
    hami_pod = {"metadata": {"name": "h", "namespace": "t", "annotations": {
        C.ANNO_VGPU_NODE: "n",
        C.ANNO_DEVICES_ALLOCATED: "GPU-m,NVIDIA,20096,43:;",
        C.ANNO_MIG_ALLOCATIONS: '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-m",'
                                '"profile":"3g.20gb","placement":{"start":4,"size":4},'
                                '"migUUID":"MIG-x","gpuInstanceID":2,"computeInstanceID":0}]'}},
        "spec": {"nodeName": "n", "containers": [{"name": "c"}]}}
    node = {"metadata": {"name": "n", "annotations": {
        C.ANNO_NODE_REGISTER: encode_register([mig_gpu("GPU-m")])}}}
    view, problems = build_view([node], [hami_pod])
    assert problems == []
    assert list(view.node("n").devices[0].mig_used) == [P(4, 4)]
    decision = _place(view, name="next", mem=15000, annotations=MIG)
    assert decision.mig[0].placement == P(0, 4)
    assert _place(view, name="third", mem=15000, annotations=MIG).failed == \
        {"n": "1/1 CardMigTopologyInfeasible"}


def test_filter_writes_hamis_reservation_annotation():
    view = view_of({"n": [mig_gpu("GPU-m")]})
    decision = _place(view, mem=4000, annotations=MIG)
    changes = allocation_annotations(decision, 0)
    assert changes[C.ANNO_DEVICES_ALLOCATED] == encode(decision.devices)
    assert json.loads(changes[C.ANNO_MIG_ALLOCATIONS]) == [{
        "containerIndex": 0, "deviceIndex": 0, "gpuUUID": "GPU-m", "profile": "1g.5gb",
        "placement": {"start": 6, "size": 1}}]
    plain = allocation_annotations(_place(view_of({"n": [gpu("GPU-c")]}), mem=10), 0)
    assert plain[C.ANNO_MIG_ALLOCATIONS] is None       # removed when a pod holds no instance


def test_quota_counts_the_instances_mib():
    view = view_of({"n": [mig_gpu("GPU-m")]})
    engine = Engine(PlacementConfig())
    limits = {"limits.nvidia.com/gpumem": 10000}
    req = request(name="a", mem=4000, annotations=MIG)
    first = place_within_quota(engine, view, req, None, limits)
    view.reserve(Reservation.of(req, first))
    assert view.namespace_used("t").mem == 4864        # the 1g.5gb, not the 4000 asked
    req2 = request(name="b", mem=5000, annotations=MIG)    # a 9856 MiB instance: over
    refused = place_within_quota(engine, view, req2, None, limits)
    assert not refused.ok and "used 4864 + asked 9856 > limit 10000" in refused.message


def _dev(mem, cores):
    return ContainerDevice(uuid="GPU-m", usedmem=mem, usedcores=cores)


def _alloc(placement):
    return MigAllocation(0, 0, "GPU-m", "1g.5gb", placement)


# A node as HAMi's device plugin registers a MIG GPU (its Go encoder: these keys, this order).
HAMI_NODE = ('[{"id":"GPU-h","index":0,"count":7,"devmem":40960,"devcore":100,'
             '"type":"NVIDIA-NVIDIA A100-SXM4-40GB","mode":"mig","health":true,'
             '"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":14,"sliceCount":1,'
             '"placements":[{"start":0,"size":1},{"start":1,"size":1},{"start":2,"size":1},'
             '{"start":3,"size":1},{"start":4,"size":1},{"start":5,"size":1},'
             '{"start":6,"size":1}]},{"name":"3g.20gb","memoryMB":20096,"core":43,'
             '"sliceCount":3,"placements":[{"start":0,"size":4},{"start":4,"size":4}]}]},'
             '{"id":"GPU-s","index":1,"count":10,"devmem":40960,"devcore":100,'
             '"type":"NVIDIA-NVIDIA A100-SXM4-40GB","mode":"hami-core","health":true}]')


def test_a_hami_nodes_mig_gpu_is_placed_on_by_profile_and_placement():
    node = {"metadata": {"name": "h", "annotations": {C.ANNO_NODE_REGISTER: HAMI_NODE}}}
    view, problems = build_view([node], [])
    assert problems == [] and [d.mode for d in view.node("h").devices] == ["mig", "hami-core"]
    first = _place(view, name="a", mem=15000, annotations=MIG)
    second = _place(view, name="b", mem=15000, annotations=MIG)
    assert {first.mig[0].placement, second.mig[0].placement} == {P(0, 4), P(4, 4)}
    assert first.devices[0][0].uuid == "GPU-h" and first.devices[0][0].usedmem == 20096
    assert _place(view, name="c", mem=1000, annotations=MIG).failed == \
        {"h": "1/2 CardMigTopologyInfeasible, 1/2 CardModeMismatch"}
    shim = _place(view, name="d", mem=1000)
    assert shim.devices[0][0].uuid == "GPU-s"


def test_preemption_frees_the_placement_a_mig_request_needs():
    from hami_control.placement.preempt import Candidate, choose
    view = view_of({"n": [mig_gpu("GPU-m")]})
    cands = []
    for key, start, size, prio in (("t/low", 0, 4, 0), ("t/high", 4, 4, 2000)):
        r = Reservation(key, "n", ((_dev(20096, 43),),),
                        mig=(MigAllocation(0, 0, "GPU-m", "3g.20gb", P(start, size)),))
        view.reserve(r)
        cands.append(Candidate(key, prio, r, {}))
    plan = choose(view.node("n"), request(mem=15000, annotations=MIG), cands)
    assert plan.ok and [c.key for c in plan.victims] == ["t/low"]
    assert list(view.node("n").devices[0].mig_used) == [P(0, 4), P(4, 4)]   # view untouched
