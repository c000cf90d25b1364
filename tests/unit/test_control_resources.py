"""The server's CPU/memory view: what each pod holds (by scheduler, binding and phase), which
pods are watched, the node's allocatable, and the engine scoring with it."""
import pytest

from hami_common.errors import HamiFormatError, RequestError
from hami_common.node_register import DeviceInfo
from hami_common.pod_devices import ContainerDevice
from hami_common.request import parse_pod, pod_cpu_memory
from hami_control.cluster.objects import registration_source
from hami_control.cluster.sync import UNFINISHED, PodScope
from hami_control.placement.annotations import NodeRegistration, pod_reservation
from hami_control.placement.learn import OnlineWorkload
from hami_control.placement.registry import PolicyRegistry
from hami_control.placement import Engine, PlacementConfig
from hami_control.state import SchedulerState, make_state

DECISION = "GPU-a-0,NVIDIA,8000,50:;"


def _pod(scheduler="hami-scheduler", node=None, decided_on=None, phase="Running",
         cpu="2", memory="4Gi", name="p"):
    annotations = {}
    if decided_on:
        annotations = {"hami.io/vgpu-node": decided_on,
                       "hami.io/vgpu-devices-allocated": DECISION}
    spec = {"schedulerName": scheduler, "containers": [
        {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ns", "annotations": annotations},
            "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize("pod, decisions, expected", [
    (_pod("default-scheduler", node="a"), False, ("a", 0, 2000, 4096)),
    (_pod("default-scheduler"), False, None),
    (_pod("default-scheduler", node="a", phase="Succeeded"), False, None),
    (_pod("other-hami", decided_on="a"), False, None),
    (_pod(decided_on="a"), True, ("a", 1, 2000, 4096)),
    (_pod(node="b"), True, ("b", 0, 2000, 4096)),
    (_pod(), True, None),
    (_pod(node="a", cpu="0", memory="0"), True, None),
], ids=["other-bound", "other-pending", "other-finished", "other-decision-ignored",
        "ours-decided-not-yet-bound", "ours-bound-without-gpu", "ours-pending", "holds-nothing"])
def test_what_a_pod_holds(pod, decisions, expected):
    held = pod_reservation(pod, resource_fit=True, decisions=decisions)
    if expected is None:
        assert held is None
    else:
        assert (held.node, len(held.devices), held.cpu_milli, held.memory_mib) == expected


def test_without_resources_only_gpu_decisions_count():
    assert pod_reservation(_pod("default-scheduler", node="a")) is None
    held = pod_reservation(_pod(decided_on="a"))
    assert held.devices and (held.cpu_milli, held.memory_mib) == (0, 0)


def test_unreadable_resources_are_a_format_error():
    with pytest.raises(HamiFormatError, match="ns/p"):
        pod_reservation(_pod(node="a", cpu="lots"), resource_fit=True)


def test_pod_overhead_and_init_containers_count_as_kube_scheduler_counts():
    pod = _pod(cpu="1", memory="1Gi")
    pod["spec"]["overhead"] = {"cpu": "250m", "memory": "64Mi"}
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "3"}}}]
    assert pod_cpu_memory(pod) == (3250, 1088)
    assert parse_pod(pod).cpu_milli == 3250


@pytest.mark.parametrize("scope, selector, ours, others", [
    (PodScope("hami-scheduler"), UNFINISHED, True, False),
    (PodScope("hami-scheduler", all_pods=True), UNFINISHED, True, True),
    (PodScope("hami-scheduler", resources=False), "spec.schedulerName=hami-scheduler", True,
     False),
    (PodScope("hami-scheduler", resources=False, all_pods=True), "", True, True),
], ids=["default", "all-pods", "gpus-only", "gpus-only-all-pods"])
def test_pod_scope(scope, selector, ours, others):
    assert scope.selector == selector
    assert scope.decisions(_pod()) is ours
    assert scope.decisions(_pod("default-scheduler")) is others


def test_a_node_is_read_again_when_its_allocatable_changes():
    node = {"metadata": {"name": "a", "annotations": {"hami.io/node-nvidia-register": "[]"}},
            "status": {"allocatable": {"cpu": "8"}}}
    before = registration_source(node)
    node["status"]["allocatable"]["cpu"] = "16"
    assert registration_source(node) != before


def _registration(name, cpu=8000, memory=32768):
    devices = (DeviceInfo(id=f"GPU-{name}-0", index=0, count=10, devmem=16000, devcore=100,
                          type="NVIDIA-T4"),)
    return NodeRegistration(name, devices, cpu_milli=cpu, memory_mib=memory)


def _slice(name, cpu="2"):
    return parse_pod({"metadata": {"name": name, "namespace": "ns"}, "spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {
            "nvidia.com/gpu": "1", "nvidia.com/gpucores": "50",
            "nvidia.com/gpumem-percentage": "50"}}}]}})


def _learned_state(resources: bool) -> SchedulerState:
    """Two 1-GPU, 8-CPU nodes; the workload model has seen 16 pods of half a GPU and 2 CPUs."""
    registry = PolicyRegistry(learner=OnlineWorkload(first_refresh=16))
    state = SchedulerState(Engine(PlacementConfig(resource_fit=resources), registry=registry))
    for name in ("a", "b"):
        state.apply_node(name, _registration(name) if resources else
                         NodeRegistration(name, _registration(name).devices))
    for i in range(16):
        registry.observe(_slice(f"seen-{i}"))
    return state


@pytest.mark.parametrize("resources, expected", [(True, "b"), (False, "a")],
                         ids=["cpu-view", "gpu-only-view"])
def test_a_gpu_that_cpu_would_strand_is_avoided(resources, expected):
    state = _learned_state(resources)
    # Another scheduler's pod took 6 of a's 8 CPUs: half a GPU placed there would leave the
    # other half with no CPU to feed it.
    state.apply_pod("ns/batch", 1, pod_reservation(
        _pod("default-scheduler", node="a", cpu="6", name="batch"), resource_fit=resources,
        decisions=False))
    decision = state.decide(_slice("p"), ["a", "b"]).decision
    assert decision.node == expected


def test_cpu_is_checked_again_and_released_when_the_pod_finishes():
    state = _learned_state(True)
    busy = _pod("default-scheduler", node="a", cpu="7", name="batch")
    state.apply_pod("ns/batch", 1, pod_reservation(busy, True, False))
    refused = state.decide(_slice("p", cpu="4"), ["a"]).decision
    assert refused.failed == {"a": "Insufficient cpu"}
    busy["status"]["phase"] = "Succeeded"
    state.apply_pod("ns/batch", 2, pod_reservation(busy, True, False))
    assert state.decide(_slice("q", cpu="4"), ["a"]).decision.node == "a"


def test_a_pod_without_gpus_is_placed_and_held_without_devices():
    state = make_state()
    state.apply_node("a", _registration("a"))
    cpu_only = parse_pod(_pod(cpu="3", memory="1Gi"))
    placement = state.decide(cpu_only, ["a"])
    held = state.reservation("ns/p")
    assert placement.decision.node == "a" and held.devices == ()
    assert (held.cpu_milli, held.memory_mib) == (3000, 1024)
    # Read back from the pod once the decision is written, it is the same reservation.
    written = _pod(cpu="3", memory="1Gi")
    written["metadata"]["annotations"] = {"hami.io/vgpu-node": "a"}
    assert pod_reservation(written, resource_fit=True) == held


def test_unknown_nodes_are_those_without_gpus():
    state = make_state()
    state.apply_node("a", _registration("a"))
    assert state.unknown_nodes(["a", "cpu-1", "cpu-2"]) == ["cpu-1", "cpu-2"]
    assert state.unknown_nodes(["a"]) == []


@pytest.mark.parametrize("pod, message", [
    ({"spec": {"containers": [{"name": "c", "resources": {"limits": "nvidia.com/gpu=1"}}]}},
     "resources.limits must be an object"),
    ({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": True}}}]}},
     "must be a quantity"),
    ({"metadata": {"annotations": {"nvidia.com/use-gputype": 5}}}, "must be a string"),
    ({"metadata": {"name": ["p"]}}, "metadata.name must be a string"),
    ({"spec": {"containers": {"name": "c"}}}, "spec.containers must be a list"),
    ({"spec": {"containers": [{"name": 3}]}}, "name must be a string"),
    ({"spec": {"overhead": "lots"}}, "spec.overhead must be an object"),
], ids=["limits-string", "bool-quantity", "annotation-number", "name-list",
        "containers-object", "container-name-number", "overhead-string"])
def test_parse_pod_rejects_bad_shapes_itself(pod, message):
    with pytest.raises(RequestError, match=message):
        parse_pod(pod)
    with pytest.raises(RequestError, match=message):
        pod_cpu_memory(pod)


def test_reservation_of_a_gpu_pod_matches_its_annotations():
    state = make_state()
    state.apply_node("a", _registration("a"))
    placement = state.decide(_slice("p"), None)
    held = state.reservation("ns/p")
    pod = _pod(cpu="2", memory="1Gi")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    pod["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "a", "hami.io/vgpu-devices-allocated":
            "".join(f"{d.uuid},NVIDIA,{d.usedmem},{d.usedcores}:;"
                    for ctr in placement.decision.devices for d in ctr)}
    assert pod_reservation(pod, resource_fit=True) == held
    assert held.devices == ((ContainerDevice("GPU-a-0", 8000, 50),),)
