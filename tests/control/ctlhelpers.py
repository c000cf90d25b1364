"""Helpers of the control-plane tier: GPU nodes and pods, hami-control started for a test, and
kube-scheduler's and the node agent's parts of a scheduling round."""
from __future__ import annotations

import json

from hami_common import constants as C
from hami_common import node_register, node_register_legacy, pod_devices
from hami_common.node_register import DeviceInfo
from hami_sim.control_launch import start_control
from hami_sim.extender_client import finish_allocation
from hami_sim.testing import wait_for

QUIET = ("--no-leader-elect", "--handshake-interval", "0", "--log-level", "warning")


def start_plane(apiserver, *extra, process: bool = False, **options):
    """hami-control against the API server double, one replica, no handshake writes."""
    return start_control(apiserver.kubeconfig, process, extra_args=QUIET + tuple(extra),
                         **options)


def devices(node: str, gpus: int = 2, mem: int = 16384, count: int = 10,
            gpu_type: str = "NVIDIA-Tesla T4", numa=None, health=True) -> list:
    """DeviceInfo list for a node: GPU-<node>-<i>, numa from the list or all 0."""
    return [DeviceInfo(id=f"GPU-{node}-{i}", index=i, count=count, devmem=mem, devcore=100,
                       type=gpu_type, numa=numa[i] if numa else 0,
                       health=health if isinstance(health, bool) else health[i])
            for i in range(gpus)]


def add_gpu_node(core_v1, name: str, cordon: str = "", legacy: bool = False,
                 allocatable: dict | None = None, **device_options) -> list:
    """Creates a node publishing GPUs the way the node agent does (and `allocatable`, e.g. CPU
    and memory, as kubelet does); returns its DeviceInfos."""
    devs = devices(name, **device_options)
    codec = node_register_legacy if legacy else node_register
    annotations = {C.ANNO_NODE_REGISTER: codec.encode(devs)}
    if cordon:
        annotations[C.ANNO_DEVICE_CORDON] = cordon
    core_v1.create_node({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": name, "annotations": annotations}})
    resources = {C.RESOURCE_GPU: str(sum(d.count for d in devs)), **(allocatable or {})}
    core_v1.patch_node_status(name, {"status": {"capacity": resources,
                                                "allocatable": resources}})
    return devs


def gpu_pod(name: str, limits: dict | None = None, annotations: dict | None = None,
            containers: list | None = None, init: list | None = None,
            namespace: str = "default", labels: dict | None = None) -> dict:
    """A pod whose container `main` has these nvidia.com/* limits (or the given containers)."""
    if containers is None:
        containers = [{"name": "main", "image": "busybox:1.36",
                       "resources": {"limits": {k: str(v) for k, v in (limits or {}).items()}}}]
    spec = {"containers": containers}
    if init:
        spec["initContainers"] = init
    meta = {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def container(name: str, **limits) -> dict:
    """A container with nvidia.com/<key> limits: container("a", gpu=1, gpucores=30)."""
    return {"name": name, "image": "busybox:1.36", "resources": {
        "limits": {f"nvidia.com/{k.replace('_', '-')}": str(v) for k, v in limits.items()}}}


def create(core_v1, ctl, pod: dict) -> dict:
    """The pod after the webhook, created in the API server; returns it as stored (a dict)."""
    admitted = ctl.client.admit(pod, pod["metadata"].get("namespace", "default"))
    raw = core_v1.create_namespaced_pod(admitted["metadata"].get("namespace", "default"),
                                        admitted, _preload_content=False).data
    return json.loads(raw)


def read_pod(core_v1, name: str, namespace: str = "default") -> dict:
    """The pod as a dict."""
    return json.loads(core_v1.read_namespaced_pod(name, namespace, _preload_content=False).data)


def node_names(core_v1) -> list:
    """Every node's name."""
    return [n.metadata.name for n in core_v1.list_node().items]


def schedule(core_v1, ctl, pod: dict, nodes=None, finish: bool = True):
    """One kube-scheduler round for a stored pod: filter, then bind to the node chosen; the node
    agent's part when finish. Returns (node or None, filter result, bind result)."""
    nodes = node_names(core_v1) if nodes is None else nodes
    result = ctl.client.filter(pod, nodes)
    if result["Error"] or not result["NodeNames"]:
        return None, result, None
    node = result["NodeNames"][0]
    meta = pod["metadata"]
    bound = ctl.client.bind(meta.get("namespace", "default"), meta["name"], meta.get("uid", ""),
                            node)
    if bound["Error"]:
        return None, result, bound
    if finish:
        finish_allocation(core_v1, meta.get("namespace", "default"), meta["name"], node)
    return node, result, bound


def allocated(pod: dict) -> tuple:
    """The pod's vgpu-devices-allocated, decoded."""
    value = (pod["metadata"].get("annotations") or {}).get(C.ANNO_DEVICES_ALLOCATED, "")
    return pod_devices.decode(value)


def usage_by_device(core_v1) -> dict:
    """uuid -> [slots, MiB, cores] summed over every active pod's allocation annotations."""
    usage: dict = {}
    for item in json.loads(core_v1.list_pod_for_all_namespaces(_preload_content=False).data)[
            "items"]:
        if (item.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for ctr in allocated(item):
            for d in ctr:
                u = usage.setdefault(d.uuid, [0, 0, 0])
                u[0], u[1], u[2] = u[0] + 1, u[1] + d.usedmem, u[2] + d.usedcores
    return usage


def assert_not_overcommitted(core_v1, devs_by_uuid: dict) -> None:
    """No GPU holds more slots, memory or cores than it has (by the pods' annotations)."""
    for uuid, (slots, mem, cores) in usage_by_device(core_v1).items():
        dev = devs_by_uuid[uuid]
        assert slots <= dev.count and mem <= dev.devmem and cores <= dev.devcore, \
            f"{uuid} overcommitted: {slots} slots, {mem} MiB, {cores}% of {dev}"


def eventually(check, timeout: float = 5.0, interval: float = 0.02):
    """Polls check() until it returns a truthy value (returned) or the timeout (AssertionError)."""
    return wait_for(check, timeout, "condition", interval)


def filter_fits(ctl, pod: dict, nodes) -> bool:
    """Whether a filter of pod over nodes returns a node (no write: a pod not stored fails the
    annotation write, which rolls the reservation back)."""
    result = ctl.client.filter(pod, nodes)
    return bool(result["NodeNames"]) or "could not record" in result["Error"]
