"""From Kubernetes objects (dicts) to what the placement view holds: a node's registered GPUs,
a pod's GPU reservation. Pure functions; the sync applies their results."""
from dataclasses import dataclass
from typing import Optional

from hami_common import constants as C
from hami_common import node_register, pod_devices
from hami_control.placement import Reservation

FINISHED_PHASES = ("Succeeded", "Failed")


def annotations(obj: dict) -> dict:
    """The object's annotations (empty when it has none)."""
    return (obj.get("metadata") or {}).get("annotations") or {}


def resource_version(obj: dict) -> Optional[int]:
    """metadata.resourceVersion as a number, None when absent or not a number.

    Kubernetes calls versions opaque, but every API server hands out etcd revisions, which grow
    across a resource; they order the events of one object, which is all this is used for."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def pod_key(obj: dict) -> str:
    """namespace/name of a pod."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


@dataclass(frozen=True)
class NodeRegistration:
    """A node's GPUs as its agent published them, and the GPUs cordoned on it."""

    raw: str
    cordon: str
    devices: tuple

    @property
    def cordoned(self) -> tuple:
        """UUIDs of the cordoned GPUs."""
        return tuple(u.strip() for u in self.cordon.split(",") if u.strip())


def node_registration(node: dict) -> Optional[NodeRegistration]:
    """The node's registration, None when it publishes none; HamiFormatError when unreadable."""
    annos = annotations(node)
    raw = annos.get(C.ANNO_NODE_REGISTER)
    if not raw or not raw.strip():
        return None
    return NodeRegistration(raw, annos.get(C.ANNO_DEVICE_CORDON, ""),
                            tuple(node_register.decode(raw)))


def allocatable_gpus(node: dict) -> int:
    """status.allocatable[nvidia.com/gpu]: the GPUs kubelet offers (0 when absent or unreadable).

    The node agent advertises each GPU as deviceSplitCount devices, so this counts slots."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(C.RESOURCE_GPU)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _init_count(pod: dict) -> int:
    """Init containers that end before the others start (restartPolicy Always: a sidecar)."""
    spec = pod.get("spec") or {}
    return sum(1 for c in spec.get("initContainers") or []
               if isinstance(c, dict) and c.get("restartPolicy") != "Always")


def pod_active(pod: dict) -> bool:
    """Whether the pod still holds what it was given (not Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def pod_reservation(pod: dict) -> Optional[Reservation]:
    """What an active pod holds according to its annotations (vgpu-node and
    vgpu-devices-allocated); None when it holds nothing. HamiFormatError when unreadable."""
    if not pod_active(pod):
        return None
    annos = annotations(pod)
    node, value = annos.get(C.ANNO_VGPU_NODE), annos.get(C.ANNO_DEVICES_ALLOCATED)
    if not node or not value:
        return None
    devices = pod_devices.decode(value)
    if not any(devices):
        return None
    return Reservation(pod=pod_key(pod), node=node, devices=devices,
                       init_count=_init_count(pod))
