"""The engine: decisions, reserve/release, node subsets, caches, policies, views from objects."""
import random

import pytest

from hami_common import node_register, pod_devices
from hami_common.pod_devices import ContainerDevice
from hami_control.placement import Engine, PlacementConfig, PlacementError, Reservation, place
from hami_control.placement.annotations import build_view
from hami_control.placement.policy import GpuPolicy, NodePolicy
from hami_control.placement.registry import BASELINE_POLICIES, SERVER_POLICIES, PolicyRegistry
from hami_control.placement.workload import Workload

from _placement_fixtures import gpu, request, view_of

BINPACK = PlacementConfig(node_policy="binpack", gpu_policy="binpack")
SPREAD = PlacementConfig(node_policy="spread", gpu_policy="spread")


def two_nodes():
    return view_of({"a": [gpu("GPU-a0", index=0), gpu("GPU-a1", index=1)],
                    "b": [gpu("GPU-b0", index=0), gpu("GPU-b1", index=1)]})


def commit(view, req, decision):
    view.reserve(Reservation.of(req, decision))


def test_decision_devices_are_the_annotation_value():
    view = two_nodes()
    req = request(mem=3000, cores=30)
    decision = place(view, req, BINPACK)
    assert decision.ok and decision.node in ("a", "b")
    (ctr,) = decision.devices
    assert ctr[0].usedmem == 3000 and ctr[0].usedcores == 30
    assert pod_devices.decode(pod_devices.encode(decision.devices)) == decision.devices


def test_binpack_fills_one_node_spread_uses_both():
    for config, expected in ((BINPACK, 1), (SPREAD, 2)):
        view, engine = two_nodes(), Engine(config)
        nodes = set()
        for i in range(2):
            req = request(name=f"p{i}", mem=2000, cores=20)
            decision = engine.place(view, req)
            commit(view, req, decision)
            nodes.add(decision.node)
        assert len(nodes) == expected, config


def test_reserve_is_seen_by_the_next_decision_and_release_gives_back():
    view = view_of({"a": [gpu("GPU-a0")]})
    engine = Engine(BINPACK)
    first = request(name="p1", mem=10000)
    commit(view, first, engine.place(view, first))
    second = request(name="p2", mem=10000)
    refused = engine.place(view, second)
    assert not refused.ok
    assert refused.failed == {"a": "1/1 CardInsufficientMemory"}
    assert refused.message == "0/1 nodes are available: 1 CardInsufficientMemory"
    view.release(first.key)
    assert engine.place(view, second).ok


def test_reserving_twice_is_refused_until_released():
    view = two_nodes()
    req = request(mem=100)
    decision = place(view, req, BINPACK)
    commit(view, req, decision)
    with pytest.raises(PlacementError, match="already holds"):
        commit(view, req, decision)
    assert view.release(req.key) is not None and view.release(req.key) is None


def test_node_subset_and_unknown_names():
    view = two_nodes()
    decision = Engine(BINPACK).place(view, request(mem=100), nodes=["b", "ghost"])
    assert decision.node == "b" and decision.failed == {}
    refused = Engine(BINPACK).place(view, request(mem=100), nodes=["ghost"])
    assert not refused.ok and refused.failed == {"ghost": "NodeUnregistered"}
    refused = Engine(BINPACK).place(view, request(mem=99999), nodes=["a", "ghost"])
    assert refused.failed == {"a": "2/2 CardInsufficientMemory", "ghost": "NodeUnregistered"}


def test_pod_annotation_overrides_the_default_policy():
    view = two_nodes()
    engine = Engine(BINPACK)
    first = request(name="p1", mem=1000, cores=10)
    commit(view, first, engine.place(view, first))
    spread = request(name="p2", mem=1000, cores=10,
                     annotations={"hami.io/node-scheduler-policy": "spread"})
    assert engine.place(view, spread).node != view.reservation(first.key).node


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(PlacementError, match="use one of binpack, spread, fragaware"):
        Engine(BINPACK).place(two_nodes(), request(
            mem=1, annotations={"hami.io/gpu-scheduler-policy": "tetris"}))
    with pytest.raises(PlacementError, match="unknown scheduling policy"):
        Engine(PlacementConfig(node_policy="fgd"))


def test_resource_fit_checks_node_cpu_and_memory():
    view = view_of({"a": [gpu("GPU-a0")]}, cpu=4000, mem=8192)
    engine = Engine(PlacementConfig(node_policy="binpack", gpu_policy="binpack",
                                    resource_fit=True))
    assert engine.place(view, request(mem=1, cpu="3")).ok
    assert engine.place(view, request(mem=1, cpu="5")).failed == {"a": "Insufficient cpu"}
    assert engine.place(view, request(mem=1, memory="9Gi")).failed == \
        {"a": "Insufficient memory"}


def test_cache_follows_node_changes():
    view = two_nodes()
    engine = Engine(BINPACK)
    req = request(name="x", gpus=2)
    assert engine.place(view, req).ok
    for name in ("a", "b"):
        other = request(name=f"hold-{name}", mem=100)
        view.reserve(Reservation(other.key, name, ((ContainerDevice(f"GPU-{name}0", 100, 0),),)))
    refused = engine.place(view, req)
    assert not refused.ok and set(refused.failed) == {"a", "b"}
    view.upsert_node("c", [gpu("GPU-c0", index=0), gpu("GPU-c1", index=1)])
    assert engine.place(view, req).node == "c"


def test_every_policy_satisfies_the_protocols():
    registry = PolicyRegistry(rng=random.Random(1), allow_baselines=True,
                              fgd_workload=Workload([]))
    for name in SERVER_POLICIES + BASELINE_POLICIES:
        policy = registry.get(name)
        assert isinstance(policy, GpuPolicy), name
        assert isinstance(policy, NodePolicy), name


def test_fgd_is_not_offered_by_the_server_registry():
    with pytest.raises(PlacementError, match="unknown"):
        PolicyRegistry().get("fgd")


def node_object(name, devices, legacy=False, cordon=""):
    value = node_register.encode(devices)
    if legacy:
        from hami_common import node_register_legacy
        value = node_register_legacy.encode(devices)
    annotations = {"hami.io/node-nvidia-register": value}
    if cordon:
        annotations["hami.io/device-cordon"] = cordon
    return {"metadata": {"name": name, "annotations": annotations},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}


def placed_pod(name, node, value, phase="Running"):
    return {"metadata": {"name": name, "namespace": "t", "annotations": {
        "hami.io/vgpu-devices-allocated": value, "hami.io/vgpu-node": node}},
        "spec": {"containers": [{"name": "c"}]}, "status": {"phase": phase}}


def test_view_from_objects_reads_both_register_formats_and_allocations():
    nodes = [node_object("a", [gpu("GPU-a0")]),
             node_object("b", [gpu("GPU-b0")], legacy=True, cordon="GPU-b0"),
             {"metadata": {"name": "cpu-only"}},
             {"metadata": {"name": "broken", "annotations": {
                 "hami.io/node-nvidia-register": "[{oops"}}}]
    pods = [placed_pod("p1", "a", "GPU-a0,NVIDIA,4000,40:;"),
            placed_pod("done", "a", "GPU-a0,NVIDIA,9000,50:;", phase="Succeeded"),
            placed_pod("bad", "a", "GPU-a0,NVIDIA,x,1:;")]
    view, problems = build_view(nodes, pods, resource_fit=True)
    assert sorted(n.name for n in view.nodes) == ["a", "b"]
    assert len(problems) == 2 and "broken" in problems[0] and "t/bad" in problems[1]
    dev = view.node("a").devices[0]
    assert (dev.used, dev.usedmem, dev.usedcores) == (1, 4000, 40)
    assert view.node("a").cpu_capacity == 8000
    assert view.node("b").devices[0].cordoned
    decision = place(view, request(mem=13000), BINPACK)
    assert not decision.ok            # a is too full, b's only GPU is cordoned
    assert decision.failed == {"a": "1/1 CardInsufficientMemory", "b": "1/1 CardCordoned"}


def test_reregistering_a_node_keeps_its_reservations():
    view = view_of({"a": [gpu("GPU-a0")]})
    view.reserve(Reservation("t/p", "a", ((ContainerDevice("GPU-a0", 5000, 50),),)))
    view.upsert_node("a", [gpu("GPU-a0"), gpu("GPU-a1", index=1)])
    assert view.node("a").devices[0].usedmem == 5000
    view.remove_node("a")
    assert view.node("a") is None and view.reservation("t/p") is not None
    view.upsert_node("a", [gpu("GPU-a0")])
    assert view.node("a").devices[0].usedcores == 50


def test_init_container_usage_is_the_max_not_the_sum():
    res = Reservation("t/p", "a", ((ContainerDevice("GPU-a0", 6000, 30),),
                                   (ContainerDevice("GPU-a0", 8000, 50),)),
                      init_positions=frozenset({0}))
    assert res.device_usage() == {"GPU-a0": (1, 8000, 50)}


def test_a_mig_or_mps_gpu_takes_no_hami_core_slice():
    from dataclasses import replace
    nodes = [node_object("a", [replace(gpu("GPU-a0"), mode="mig"), replace(gpu("GPU-a1", index=1),
                                                                          mode="mps")]),
             node_object("b", [gpu("GPU-b0")])]
    view, problems = build_view(nodes, [], resource_fit=True)
    assert problems == []
    decision = place(view, request(mem=1000), BINPACK)
    assert decision.ok and decision.node == "b"
    view.reserve(Reservation.of(request(mem=1000), decision))
    refused = place(view, request(mem=16000), BINPACK, nodes=["a"])
    assert refused.failed == {"a": "2/2 CardModeMismatch"}


@pytest.mark.parametrize("policy", SERVER_POLICIES)
def test_node_scores_are_what_place_chooses_from(policy):
    view = view_of({"a": [gpu("a0", mem=16000)], "b": [gpu("b0", mem=16000)],
                    "c": [gpu("c0", mem=4000)]})
    view.reserve(Reservation("t/old", "b", ((ContainerDevice("b0", 8000, 0),),)))
    engine = Engine(PlacementConfig(node_policy=policy, gpu_policy=policy))
    ask = request(mem=6000)
    scores = engine.node_scores(view, ask)
    assert set(scores) == {"a", "b"}                     # c's 4000 MiB cannot hold it
    assert engine.place(view, ask).node == max(scores, key=scores.get)
    assert set(engine.node_scores(view, ask, ["b", "c", "zz"])) == {"b"}


def test_only_the_candidates_are_rescored_and_a_stale_node_is_rescored_once_asked_about():
    view = view_of({"a": [gpu("a0", mem=16000)], "b": [gpu("b0", mem=12000)]})
    engine = Engine(PlacementConfig(node_policy="binpack", gpu_policy="binpack"))
    evaluated = []
    real = engine._evaluate
    engine._evaluate = lambda node, *rest: evaluated.append(node.name) or real(node, *rest)
    ask = request(mem=6000)
    first = engine.node_scores(view, ask)
    assert sorted(evaluated) == ["a", "b"]
    view.reserve(Reservation("t/x", "a", ((ContainerDevice("a0", 8000, 0),),)))
    view.reserve(Reservation("t/y", "b", ((ContainerDevice("b0", 4000, 0),),)))
    evaluated.clear()
    assert set(engine.node_scores(view, ask, ["b"])) == {"b"}
    assert evaluated == ["b"]                  # a changed too, but was not asked about
    evaluated.clear()
    now = engine.node_scores(view, ask, ["a", "b"])
    assert evaluated == ["a"]                  # a's change is seen once it is a candidate
    assert now == engine.node_scores(view, ask) and now != first
    assert engine.place(view, ask).node == max(now, key=now.get)
