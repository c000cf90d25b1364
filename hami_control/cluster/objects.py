"""Small readers of Kubernetes objects (dicts) shared by the sync, the lock and the handshake.
What a node registers and what a pod holds are read by the placement core
(`hami_control.placement.annotations`)."""
from typing import Optional

from hami_common import constants as C


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


def allocatable_gpus(node: dict) -> int:
    """status.allocatable[nvidia.com/gpu]: the GPUs kubelet offers (0 when absent or unreadable).

    The node agent advertises each GPU as deviceSplitCount devices, so this counts slots."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(C.RESOURCE_GPU)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def registration_source(node: dict) -> tuple:
    """The annotation values a node's registration is read from (to skip re-reading them)."""
    annos = annotations(node)
    return annos.get(C.ANNO_NODE_REGISTER), annos.get(C.ANNO_DEVICE_CORDON, "")
