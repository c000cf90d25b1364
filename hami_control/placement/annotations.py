"""Building the cluster view from what the cluster publishes: nodes' register annotations and
pods' `vgpu-devices-allocated`. A node or pod whose annotation cannot be read is reported and
left out; it never stops the rest of the view from being built."""
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from hami_common import constants as C
from hami_common import node_register, pod_devices
from hami_common.errors import HamiFormatError, RequestError
from hami_common.mig import decode_allocations
from hami_common.quantity import cpu_millis, memory_mib
from hami_common.request import pod_cpu_memory
from hami_control.placement.model import PlacementError
from hami_control.placement.view import ClusterView, Reservation



@dataclass(frozen=True)
class NodeRegistration:
    """What a node object says about its GPUs (and its CPU and memory, for resource fit)."""

    name: str
    devices: tuple
    cordoned: frozenset = frozenset()
    cpu_milli: Optional[int] = None
    memory_mib: Optional[int] = None


def node_registration(node: Mapping, resource_fit: bool = False) -> Optional[NodeRegistration]:
    """The registration of a v1.Node dict; None if it registers no GPUs; HamiFormatError if its
    annotation is malformed."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    value = annotations.get(C.ANNO_NODE_REGISTER)
    if not value:
        return None
    name = str(meta.get("name") or "")
    try:
        devices = tuple(node_register.decode(value))
    except HamiFormatError as e:
        raise HamiFormatError(f"node {name}: {C.ANNO_NODE_REGISTER}: {e}") from e
    cordoned = frozenset(u.strip() for u in annotations.get(C.ANNO_DEVICE_CORDON, "").split(",")
                         if u.strip())
    cpu = mem = None
    if resource_fit:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        try:
            cpu = cpu_millis(allocatable["cpu"]) if "cpu" in allocatable else None
            mem = memory_mib(allocatable["memory"]) if "memory" in allocatable else None
        except HamiFormatError as e:
            raise HamiFormatError(f"node {name}: status.allocatable: {e}") from e
    return NodeRegistration(name, devices, cordoned, cpu, mem)


def pod_reservation(pod: Mapping, resource_fit: bool = False,
                    decisions: bool = True) -> Optional[Reservation]:
    """What a pod holds, None if nothing (not placed, finished, or nothing counted); its MIG
    instances (`hami.io/vgpu-mig-allocations`, HAMi's or ours) with its GPUs.

    `decisions`: whether the pod's HAMi decision counts (`vgpu-node` and
    `vgpu-devices-allocated`: the pods of this scheduler); without it only a bound pod's CPU
    and memory can. With `resource_fit` a pod also holds its CPU and memory on its node once
    bound (`spec.nodeName`), or once it carries a decision (kube-scheduler's assumed pod: it
    binds next); a pod that is neither holds nothing yet."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if (pod.get("status") or {}).get("phase") in C.POD_FINISHED_PHASES:
        return None
    annotations = meta.get("annotations") or {}
    node = spec.get("nodeName") or (annotations.get(C.ANNO_VGPU_NODE) if decisions else None)
    value = annotations.get(C.ANNO_DEVICES_ALLOCATED) if decisions else None
    if not node or not (value or resource_fit):
        return None
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    try:
        devices = pod_devices.decode(value) if value else ()
    except HamiFormatError as e:
        raise HamiFormatError(f"pod {key}: {C.ANNO_DEVICES_ALLOCATED}: {e}") from e
    try:
        mig = tuple(decode_allocations(annotations.get(C.ANNO_MIG_ALLOCATIONS, ""))) \
            if devices else ()
    except HamiFormatError as e:
        raise HamiFormatError(f"pod {key}: {C.ANNO_MIG_ALLOCATIONS}: {e}") from e
    inits = spec.get("initContainers") or []
    init_positions = frozenset(i for i, c in enumerate(inits)
                               if isinstance(c, Mapping) and c.get("restartPolicy") != "Always")
    cpu = mem = 0
    if resource_fit:
        try:
            cpu, mem = pod_cpu_memory(pod)
        except RequestError as e:
            raise HamiFormatError(f"pod {key}: {e}") from e
    if not devices and not cpu and not mem:
        return None
    return Reservation(key, node, devices, init_positions, cpu, mem, mig=mig)


def _readable(objects, read, resource_fit: bool, problems: list):
    """The non-None results of `read` over the objects; failures go to `problems`."""
    for obj in objects:
        try:
            item = read(obj, resource_fit)
        except HamiFormatError as e:
            problems.append(str(e))
            continue
        if item is not None:
            yield item


def build_view(nodes: Iterable[Mapping], pods: Iterable[Mapping],
               resource_fit: bool = False) -> tuple:
    """(ClusterView, problems): the view of the nodes and pods, and one message per object that
    had to be left out."""
    view, problems = ClusterView(), []
    for reg in _readable(nodes, node_registration, resource_fit, problems):
        view.upsert_node(reg.name, reg.devices, reg.cpu_milli, reg.memory_mib, reg.cordoned)
    for reservation in _readable(pods, pod_reservation, resource_fit, problems):
        try:
            view.reserve(reservation)
        except PlacementError as e:
            problems.append(str(e))
    return view, problems
