"""Filter and bind over HTTP against the API server double: every policy and filter annotation,
multi-GPU and multi-container pods, reasons, re-filter, the node lock, failures."""
import json

import pytest

from ctlhelpers import (add_gpu_node, allocated, container, create, eventually, gpu_pod,
                        read_pod, schedule)
from hami_common import constants as C

SLICE = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30, "nvidia.com/gpumem": 3000}


@pytest.fixture
def two_nodes(core_v1, control):
    devs = add_gpu_node(core_v1, "node-a") + add_gpu_node(core_v1, "node-b")
    eventually(lambda: len(control.plane.state.node_names()) == 2)
    return {d.id: d for d in devs}


def _place(core_v1, control, name, limits=SLICE, annotations=None, **kw):
    pod = create(core_v1, control, gpu_pod(name, limits, annotations, **kw))
    node, result, bound = schedule(core_v1, control, pod)
    assert node, (result, bound)
    return node, allocated(read_pod(core_v1, name))


@pytest.mark.parametrize("policy,same_node,same_gpu", [
    ("binpack", True, True), ("spread", False, False)], ids=["binpack", "spread"])
def test_node_and_gpu_policies(core_v1, control, two_nodes, policy, same_node, same_gpu):
    annos = {C.ANNO_NODE_SCHEDULER_POLICY: policy, C.ANNO_GPU_SCHEDULER_POLICY: policy}
    node1, devs1 = _place(core_v1, control, "first", annotations=annos)
    node2, devs2 = _place(core_v1, control, "second", annotations=annos)
    assert (node1 == node2) is same_node
    if same_node:
        assert (devs1[0][0].uuid == devs2[0][0].uuid) is same_gpu


def test_gpu_policy_spread_on_a_binpacked_node(core_v1, control, two_nodes):
    annos = {C.ANNO_NODE_SCHEDULER_POLICY: "binpack", C.ANNO_GPU_SCHEDULER_POLICY: "spread"}
    node1, devs1 = _place(core_v1, control, "first", annotations=annos)
    node2, devs2 = _place(core_v1, control, "second", annotations=annos)
    assert node1 == node2 and devs1[0][0].uuid != devs2[0][0].uuid


def test_fragaware_default_packs_slices_together(core_v1, control, two_nodes):
    placed = [_place(core_v1, control, f"p{i}") for i in range(3)]
    uuids = {devs[0][0].uuid for _, devs in placed}
    assert len(uuids) == 1, placed        # 3 x 30% fit one GPU: no second GPU gets broken


@pytest.mark.parametrize("annotations,expect_node,expect_gpu", [
    ({C.ANNO_USE_GPUTYPE: "v100"}, "node-v", None),
    ({C.ANNO_NOUSE_GPUTYPE: "V100"}, "node-t", None),
    ({C.ANNO_USE_GPUUUID: "GPU-node-t-1"}, "node-t", "GPU-node-t-1"),
    ({C.ANNO_NOUSE_GPUUUID: "GPU-node-t-0,GPU-node-t-1"}, "node-v", None),
], ids=["use-gputype", "nouse-gputype", "use-gpuuuid", "nouse-gpuuuid"])
def test_filter_annotations(core_v1, control, annotations, expect_node, expect_gpu):
    add_gpu_node(core_v1, "node-t", gpu_type="NVIDIA-Tesla T4")
    add_gpu_node(core_v1, "node-v", gpu_type="NVIDIA-Tesla V100-PCIE-32GB", mem=32768)
    eventually(lambda: len(control.plane.state.node_names()) == 2)
    node, devs = _place(core_v1, control, "p", annotations=annotations)
    assert node == expect_node
    if expect_gpu:
        assert devs[0][0].uuid == expect_gpu


def test_numa_bind_keeps_gpus_on_one_numa_node(core_v1, control):
    add_gpu_node(core_v1, "split", gpus=4, numa=[0, 1, 1, 0])
    eventually(lambda: control.plane.state.node_names())
    node, devs = _place(core_v1, control, "p", {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 10},
                        {C.ANNO_NUMA_BIND: "true"})
    assert sorted(d.uuid for d in devs[0]) in (["GPU-split-0", "GPU-split-3"],
                                               ["GPU-split-1", "GPU-split-2"])


def test_reasons_counted_per_node(core_v1, control, two_nodes):
    pod = create(core_v1, control, gpu_pod("big", {"nvidia.com/gpumem": 20000}))
    result = control.client.filter(pod, ["node-a", "node-b", "ghost"])
    assert result["NodeNames"] == [] and result["Error"] == ""
    assert result["FailedNodes"] == {"node-a": "2/2 CardInsufficientMemory",
                                     "node-b": "2/2 CardInsufficientMemory",
                                     "ghost": "NodeUnregistered"}


def test_multi_gpu_and_multi_container_pods(core_v1, control, two_nodes):
    pod = gpu_pod("multi", containers=[container("a", gpu=2, gpucores=40, gpumem=1000),
                                       {"name": "plain", "image": "x"},
                                       container("b", gpu=1, gpucores=20, gpumem=500)],
                  init=[container("init", gpu=1, gpucores=50, gpumem=2000)])
    node, devs = _place(core_v1, control, "multi", containers=pod["spec"]["containers"],
                        init=pod["spec"]["initContainers"])
    assert [len(c) for c in devs] == [1, 2, 0, 1]        # init first, empty container kept
    assert len({d.uuid for d in devs[1]}) == 2           # two different physical GPUs
    assert all(d.uuid.startswith(f"GPU-{node}-") for c in devs for d in c)
    value = read_pod(core_v1, "multi")["metadata"]["annotations"][C.ANNO_DEVICES_ALLOCATED]
    assert value.count(";") == 4 and ";;" in value


def test_nodes_mode_returns_node_objects(core_v1, control, two_nodes):
    pod = create(core_v1, control, gpu_pod("p", SLICE))
    nodes = json.loads(core_v1.list_node(_preload_content=False).data)
    status, result = control.client.post("/filter", {"Pod": pod, "Nodes": nodes})
    assert status == 200 and result["Error"] == ""
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == result["NodeNames"]
    assert len(result["NodeNames"]) == 1


def test_refilter_releases_the_earlier_reservation(core_v1, control):
    add_gpu_node(core_v1, "one", gpus=1)
    eventually(lambda: control.plane.state.node_names())
    pod = create(core_v1, control, gpu_pod("whole", {"nvidia.com/gpu": 1}))
    for _ in range(3):       # the same pod again: its own earlier share does not block it
        assert control.client.filter(pod, ["one"])["NodeNames"] == ["one"]
    other = create(core_v1, control, gpu_pod("other", {"nvidia.com/gpu": 1}))
    assert control.client.filter(other, ["one"])["FailedNodes"] == {
        "one": "1/1 CardInsufficientMemory"}


def test_bind_records_phase_and_binds(core_v1, control, two_nodes):
    pod = create(core_v1, control, gpu_pod("p", SLICE))
    node, _, bound = schedule(core_v1, control, pod, finish=False)
    assert bound == {"Error": ""}
    stored = read_pod(core_v1, "p")
    annos = stored["metadata"]["annotations"]
    assert stored["spec"]["nodeName"] == node
    assert annos[C.ANNO_BIND_PHASE] == "allocating" and annos[C.ANNO_BIND_TIME].isdigit()
    assert annos[C.ANNO_VGPU_NODE] == node
    assert stored["metadata"]["labels"][C.LABEL_VGPU_NODE] == node     # as HAMi labels it
    assert annos[C.ANNO_DEVICES_TO_ALLOCATE] == annos[C.ANNO_DEVICES_ALLOCATED]
    lock = core_v1.read_node(node).metadata.annotations[C.ANNO_NODE_LOCK]
    assert lock.endswith(",default,p")


def test_non_gpu_pod_passes_through(core_v1, control, two_nodes):
    pod = create(core_v1, control, gpu_pod("cpu", containers=[{"name": "c", "image": "x"}]))
    assert control.client.filter(pod, ["node-a", "node-b"])["NodeNames"] == ["node-a", "node-b"]
    assert control.client.bind("default", "cpu", pod["metadata"]["uid"], "node-b") == \
        {"Error": ""}
    assert read_pod(core_v1, "cpu")["spec"]["nodeName"] == "node-b"


def test_deleted_and_finished_pods_give_their_share_back(core_v1, control):
    add_gpu_node(core_v1, "one", gpus=1)
    eventually(lambda: control.plane.state.node_names())
    whole = {"nvidia.com/gpu": 1}
    first = create(core_v1, control, gpu_pod("first", whole))
    assert schedule(core_v1, control, first)[0] == "one"
    probe = create(core_v1, control, gpu_pod("probe", whole))
    assert control.client.filter(probe, ["one"])["NodeNames"] == []
    core_v1.patch_namespaced_pod_status("first", "default", {"status": {"phase": "Succeeded"}})
    eventually(lambda: control.client.filter(probe, ["one"])["NodeNames"] == ["one"])
    assert schedule(core_v1, control, probe)[0] == "one"
    core_v1.delete_namespaced_pod("probe", "default")
    late = create(core_v1, control, gpu_pod("late", whole))
    eventually(lambda: control.client.filter(late, ["one"])["NodeNames"] == ["one"])


def test_node_without_registration_drops_out(core_v1, control, two_nodes):
    core_v1.patch_node("node-b", {"metadata": {"annotations": {C.ANNO_NODE_REGISTER: None}}},
                       _content_type="application/merge-patch+json")
    eventually(lambda: control.plane.state.node_names() == ["node-a"])
    pod = create(core_v1, control, gpu_pod("p", SLICE))
    result = control.client.filter(pod, ["node-b"])
    assert result["FailedNodes"] == {"node-b": "NodeUnregistered"}


def test_legacy_registration_and_cordon(core_v1, control):
    add_gpu_node(core_v1, "old", legacy=True, cordon="GPU-old-0")
    eventually(lambda: control.plane.state.node_names())
    node, devs = _place(core_v1, control, "p")
    assert node == "old" and devs[0][0].uuid == "GPU-old-1"
    pod = create(core_v1, control, gpu_pod("q", {"nvidia.com/gpu": 2}))
    assert control.client.filter(pod, ["old"])["FailedNodes"] == {
        "old": "1/2 CardCordoned, 1/2 CardInsufficientMemory"}


@pytest.mark.parametrize("all_pods,fits", [(False, True), (True, False)],
                         ids=["our-scheduler-only", "all-pods"])
def test_pods_of_other_scheduler_names_count_with_all_pods(core_v1, apiserver, all_pods, fits):
    from ctlhelpers import start_plane
    add_gpu_node(core_v1, "one", gpus=1)
    other = gpu_pod("other", {"nvidia.com/gpu": 1}, {
        C.ANNO_VGPU_NODE: "one", C.ANNO_DEVICES_ALLOCATED: "GPU-one-0,NVIDIA,16384,100:;"})
    other["spec"]["schedulerName"] = "another-hami"
    core_v1.create_namespaced_pod("default", other)
    ctl = start_plane(apiserver, *(("--all-pods",) if all_pods else ()))
    try:
        pod = create(core_v1, ctl, gpu_pod("p", {"nvidia.com/gpu": 1}))
        assert bool(ctl.client.filter(pod, ["one"])["NodeNames"]) is fits
    finally:
        ctl.stop()
