"""What pods were given, read from their annotations, summed per GPU against what each node
registered; and whether a pending pod's ask would fit the room left. The auditor's own
arithmetic: it shares the annotation codecs with the product (the wire format), never its
placement code."""
from __future__ import annotations

from dataclasses import dataclass, field

from hami_common import constants as C
from hami_common import node_register, pod_devices
from hami_common.errors import HamiFormatError


@dataclass
class GpuUse:
    """One registered GPU and what the pods on it were given."""

    node: str
    device: node_register.DeviceInfo
    mem: int = 0
    cores: int = 0
    tasks: int = 0
    exclusive: bool = False        # a task holds the whole card (cores 100)
    pods: list = field(default_factory=list)

    def fits(self, mem: int, cores: int) -> bool:
        """Whether one more task of mem MiB and cores percent fits."""
        d = self.device
        if not d.health or self.tasks >= d.count or self.exclusive:
            return False
        if cores >= 100 and self.tasks:
            return False
        return self.mem + mem <= d.devmem and self.cores + cores <= d.devcore


def key(pod: dict) -> str:
    """namespace/name of a pod."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def finished(pod: dict) -> bool:
    """Whether the pod's containers have ended for good."""
    return (pod.get("status") or {}).get("phase") in C.POD_FINISHED_PHASES


def given(pod: dict) -> tuple:
    """Per container (init containers first), the devices the pod was given: the allocated
    annotation, else the one the scheduler wrote at bind; () when neither (or malformed)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(C.ANNO_DEVICES_ALLOCATED) or \
        annotations.get(C.ANNO_DEVICES_TO_ALLOCATE) or ""
    try:
        return pod_devices.decode(value)
    except HamiFormatError:
        return ()


def registered(nodes: list) -> dict:
    """uuid -> GpuUse (empty) for every GPU the nodes registered."""
    gpus = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(C.ANNO_NODE_REGISTER, "")
        try:
            devices = node_register.decode(value) if value else []
        except HamiFormatError:
            continue
        for d in devices:
            gpus[d.id] = GpuUse(meta.get("name", ""), d)
    return gpus


def holders(pods: list) -> list:
    """The pods that hold what they were given: bound to a node and not finished."""
    return [p for p in pods if (p.get("spec") or {}).get("nodeName") and not finished(p)]


def usage(nodes: list, pods: list) -> tuple:
    """(uuid -> GpuUse with the holders' shares summed, given uuids no node registered)."""
    gpus = registered(nodes)
    unknown = {}
    for pod in holders(pods):
        for ctr in given(pod):
            for dev in ctr:
                use = gpus.get(dev.uuid)
                if use is None:
                    unknown.setdefault(dev.uuid, []).append(f"pod/{key(pod)}")
                    continue
                use.mem += dev.usedmem
                use.cores += dev.usedcores
                use.tasks += 1
                use.exclusive = use.exclusive or dev.usedcores >= 100
                use.pods.append(f"pod/{key(pod)}")
    return gpus, unknown


def could_hold(request, gpus: dict) -> str:
    """A node whose free room holds every container of the parsed PodRequest ('' if none)."""
    by_node = {}
    for use in gpus.values():
        by_node.setdefault(use.node, []).append(use)
    for node, devices in sorted(by_node.items()):
        room = {u.device.id: [u.mem, u.cores, u.tasks, u.exclusive] for u in devices}
        if all(_place(ctr, devices, room, request.filters) for ctr in request.containers
               if ctr.nums and not ctr.init):
            return node
    return ""


def _place(ctr, devices: list, room: dict, filters) -> bool:
    chosen = []
    for use in devices:
        d = use.device
        if len(chosen) == ctr.nums:
            break
        if not (filters.type_ok(d.type) and filters.uuid_ok(d.id)):
            continue
        mem, cores, tasks, exclusive = room[d.id]
        probe = GpuUse(use.node, d, mem, cores, tasks, exclusive)
        if probe.fits(ctr.memory_on(d.devmem), ctr.cores):
            chosen.append(d)
    if len(chosen) < ctr.nums:
        return False
    for d in chosen:
        r = room[d.id]
        r[0] += ctr.memory_on(d.devmem)
        r[1] += ctr.cores
        r[2] += 1
        r[3] = r[3] or ctr.cores >= 100
    return True
