"""hami-control's CPU/memory view, built from the watches, over real HTTP: other schedulers'
bound pods steer placement away from GPUs their CPU use would strand, are checked a second
time, and release what they hold when they finish or go; pods not yet bound hold nothing; a
CPU-only pod of hami-scheduler is placed too, and bound without a node lock."""
import pytest

from ctlhelpers import add_gpu_node, create, eventually, gpu_pod, read_pod, start_plane
from hami_common import constants as C

NODE = {"cpu": "8", "memory": "32Gi", "pods": "110"}
SLICE = {C.RESOURCE_GPU: "1", C.RESOURCE_CORES: "50", C.RESOURCE_MEM_PERCENTAGE: "50"}


def _with_cpu(pod: dict, cpu: str, memory: str = "1Gi") -> dict:
    for ctr in pod["spec"]["containers"]:
        ctr.setdefault("resources", {})["requests"] = {"cpu": cpu, "memory": memory}
    return pod


def _other_pod(core_v1, name: str, cpu: str, node=None) -> None:
    """A pod of the default scheduler, bound to `node` (or pending), asking for `cpu`."""
    pod = _with_cpu(gpu_pod(name, containers=[{"name": "c", "image": "busybox:1.36"}]), cpu)
    pod["spec"]["schedulerName"] = "default-scheduler"
    if node:
        pod["spec"]["nodeName"] = node
    core_v1.create_namespaced_pod("default", pod)


def _cpu_free(ctl, node: str):
    with ctl.plane.state.lock:
        return ctl.plane.state.view.node(node).cpu_free


def _learn(ctl, count: int = 16) -> None:
    """Filters that fit nowhere, so that the workload model learns half-GPU, 2-CPU pods."""
    for i in range(count):
        pod = _with_cpu(gpu_pod(f"seen-{i}", SLICE), "2")
        assert ctl.client.filter(pod, ["nowhere"])["NodeNames"] == []


@pytest.fixture(params=[(), ("--no-track-cpu-memory",)], ids=["cpu-view", "gpu-only-view"])
def plane(request, apiserver, core_v1):
    for name in ("node-a", "node-b"):
        add_gpu_node(core_v1, name, gpus=1, allocatable=NODE)
    ctl = start_plane(apiserver, *request.param)
    try:
        eventually(lambda: len(ctl.plane.state.node_names()) == 2)
        yield ctl, not request.param
    finally:
        ctl.stop()


def test_other_schedulers_pods_steer_placement(core_v1, plane):
    ctl, tracked = plane
    _learn(ctl)
    _other_pod(core_v1, "batch", "6", node="node-a")
    if tracked:
        eventually(lambda: _cpu_free(ctl, "node-a") == 2000)
    pod = create(core_v1, ctl, _with_cpu(gpu_pod("p", SLICE), "2"))
    chosen = ctl.client.filter(pod, ["node-a", "node-b"])["NodeNames"]
    # On node-a half a GPU would be left with no CPU to feed it: only a view that counts the
    # other scheduler's pod sees it. Without one, the two nodes tie and the first one wins.
    assert chosen == (["node-b"] if tracked else ["node-a"])


@pytest.mark.parametrize("ending", ["Succeeded", "deleted"])
def test_finished_and_deleted_pods_release_cpu(core_v1, apiserver, ending):
    add_gpu_node(core_v1, "node-a", gpus=1, allocatable=NODE)
    _other_pod(core_v1, "pending", "7")                  # not bound: holds nothing
    _other_pod(core_v1, "batch", "7", node="node-a")
    ctl = start_plane(apiserver)
    try:
        probe = create(core_v1, ctl, _with_cpu(gpu_pod("probe", SLICE), "4"))
        assert ctl.client.filter(probe, ["node-a"])["FailedNodes"] == {
            "node-a": "Insufficient cpu"}
        if ending == "deleted":
            core_v1.delete_namespaced_pod("batch", "default")
        else:
            core_v1.patch_namespaced_pod_status("batch", "default",
                                                {"status": {"phase": ending}})
        eventually(lambda: ctl.client.filter(probe, ["node-a"])["NodeNames"] == ["node-a"])
        assert _cpu_free(ctl, "node-a") == 4000         # the probe's own 4 CPUs
    finally:
        ctl.stop()


def test_cpu_only_pod_of_hami_scheduler(core_v1, apiserver):
    add_gpu_node(core_v1, "node-a", gpus=1, allocatable=NODE)
    core_v1.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "plain"}})
    ctl = start_plane(apiserver)
    try:
        eventually(lambda: ctl.plane.state.node_names())
        pod = gpu_pod("cpu", containers=[{"name": "c", "image": "busybox:1.36"}])
        pod["spec"]["schedulerName"] = C.SCHEDULER_NAME
        pod = create(core_v1, ctl, _with_cpu(pod, "3"))
        # A node without GPUs is offered: kube-scheduler chooses among those.
        assert ctl.client.filter(pod, ["node-a", "plain"])["NodeNames"] == ["plain"]
        # Only GPU nodes: the engine places it, and the view counts it at once.
        assert ctl.client.filter(pod, ["node-a"])["NodeNames"] == ["node-a"]
        assert _cpu_free(ctl, "node-a") == 5000
        uid = pod["metadata"]["uid"]
        assert ctl.client.bind("default", "cpu", uid, "node-a") == {"Error": ""}
        stored = read_pod(core_v1, "cpu")
        annotations = stored["metadata"]["annotations"]
        assert stored["spec"]["nodeName"] == "node-a"
        assert annotations[C.ANNO_VGPU_NODE] == "node-a"
        assert C.ANNO_DEVICES_ALLOCATED not in annotations
        assert C.ANNO_BIND_PHASE not in annotations       # no GPU for the node agent
        node_annotations = core_v1.read_node("node-a").metadata.annotations or {}
        assert C.ANNO_NODE_LOCK not in node_annotations
        eventually(lambda: _cpu_free(ctl, "node-a") == 5000)
    finally:
        ctl.stop()
