"""Node scores for pods whose GPUs kube-scheduler allocates itself (DRA claims): pure.

kube-scheduler's DRA allocator scores no device and takes, on the node kube-scheduler
chose, the first devices that fit; its node scores look at CPU and memory alone. Given our
node scores through an extender's `prioritize`, it chooses the node as fragaware would
(bench/dra_placement.py: that recovers nearly all of first-fit's packing cost). What is
needed, and built here from what the API server publishes:
- the DRA nodes' GPUs, from our driver's ResourceSlices (`slice_gpus`);
- what each allocated claim consumed of them (`claim_reservation`, from placement/claims.py);
- the pod's ask, from what the webhook recorded on it (`claim_request`);
- the answer kube-scheduler reads (`priorities`): 0..MAX_PRIORITY per node, the best node(s)
  alone at the top, so that with the extender's weight our order is kube-scheduler's.
The devices are placed in the view as the allocator places them (first fit, in the slice's
order): the score is that of the plan kube-scheduler will carry out.
"""
import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from hami_common.constants import DRA_CORES, DRA_MEMORY
from hami_common.errors import HamiFormatError
from hami_common.node_register import DeviceInfo
from hami_common.pod_devices import ContainerDevice
from hami_common.quantity import parse_quantity
from hami_common.request import ContainerRequest, DeviceFilters, PodRequest
from hami_control.placement.claims import ClaimUse
from hami_control.placement.view import Reservation

MAX_PRIORITY = 10           # kube-scheduler's extender scores are 0..MaxExtenderPriority (10)
SHARED_SLOTS = 1 << 16      # a shareable device limits claims by capacity only
_SAME = 1e-9


@dataclass(frozen=True)
class SliceGpus:
    """One ResourceSlice of our driver: its node, pool and GPUs (in the slice's order)."""

    node: str
    pool: str
    gpus: tuple             # DeviceInfo; id = the device's name (its UUID in lower case)


def _capacity(device: Mapping, key: str, where: str) -> int:
    raw = ((device.get("capacity") or {}).get(key) or {}).get("value")
    if raw is None:
        raise HamiFormatError(f"{where}: no capacity {key!r}")
    try:
        return int(parse_quantity(raw))
    except HamiFormatError as e:
        raise HamiFormatError(f"{where}: capacity {key}: {e}") from e


def _attribute(device: Mapping, name: str, kind: str, default):
    value = ((device.get("attributes") or {}).get(name) or {}).get(kind)
    return default if value is None else value


def slice_gpus(obj: Mapping) -> SliceGpus:
    """The GPUs a ResourceSlice of our driver publishes; HamiFormatError names what is
    unreadable (no node, a device without memory or cores)."""
    spec = obj.get("spec") or {}
    name = str((obj.get("metadata") or {}).get("name") or "")
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        raise HamiFormatError(f"resourceslice {name}: no spec.nodeName (a slice of our driver "
                              "is per node)")
    pool = str((spec.get("pool") or {}).get("name") or node)
    gpus = []
    for position, device in enumerate(spec.get("devices") or []):
        dev_name = str(device.get("name") or "")
        where = f"resourceslice {name} device {dev_name or position}"
        if not dev_name:
            raise HamiFormatError(f"{where}: no name")
        memory, cores = _capacity(device, DRA_MEMORY, where), _capacity(device, DRA_CORES, where)
        try:
            index, numa = int(_attribute(device, "index", "int", position)), \
                int(_attribute(device, "numaNode", "int", 0))
        except (TypeError, ValueError) as e:
            raise HamiFormatError(f"{where}: index or numaNode is not a number") from e
        gpus.append(DeviceInfo(id=dev_name, index=index,
                               count=SHARED_SLOTS if device.get("allowMultipleAllocations")
                               else 1, devmem=memory >> 20, devcore=cores,
                               type=str(_attribute(device, "type", "string", "")), numa=numa))
    return SliceGpus(node, pool, tuple(gpus))


def claim_key(key: str) -> str:
    """The view's reservation key of a claim (namespace/name)."""
    return f"claim:{key}"


def claim_reservation(use: ClaimUse, node_of_pool: Mapping) -> Optional[Reservation]:
    """What an allocated claim holds on its node's GPUs, one device per entry; None when its
    pool is no node's (a slice not seen yet: it is placed once the slice comes)."""
    pools = {d.node for d in use.devices}
    if len(pools) != 1 or next(iter(pools)) not in node_of_pool:
        return None
    node = node_of_pool[next(iter(pools))]
    devices = tuple((ContainerDevice(uuid=d.device, usedmem=d.mem, usedcores=d.cores),)
                    for d in use.devices)
    return Reservation(claim_key(use.key), node, devices)


def claim_request(namespace: str, name: str, uid: str, asks: Iterable[ContainerRequest],
                  filters: DeviceFilters, cpu_milli: int = 0, memory_mib: int = 0) -> PodRequest:
    """The placement request of a pod the webhook turned to claims (its recorded asks, one
    container per claim). UUID filters are compared with device names (UUIDs in lower case);
    the pod's policy annotations do not apply: kube-scheduler's allocator picks the GPUs."""
    lowered = DeviceFilters(filters.use_types, filters.nouse_types,
                            frozenset(u.lower() for u in filters.use_uuids),
                            frozenset(u.lower() for u in filters.nouse_uuids),
                            filters.numa_bind, filters.modes)
    containers = tuple(ContainerRequest(name=a.name, nums=a.nums, mem_mib=a.mem_mib,
                                        mem_percent=a.mem_percent, cores=a.cores)
                       for a in asks)
    return PodRequest(namespace=namespace, name=name, uid=uid, containers=containers,
                      filters=lowered, cpu_milli=cpu_milli, memory_mib=memory_mib)


def priorities(scores: Mapping[str, float], names: Iterable[str]) -> list:
    """kube-scheduler's HostPriorityList for `names`: MAX_PRIORITY for the best-scoring
    node(s), the others spread over 0..MAX_PRIORITY-1 by score, 0 for a node without a score
    (the pod does not fit there, or the node is unknown)."""
    out = []
    known = [v for v in scores.values() if math.isfinite(v)]
    best, low = (max(known), min(known)) if known else (0.0, 0.0)
    for name in names:
        value = scores.get(name)
        if value is None or not math.isfinite(value):
            level = 0
        elif value >= best - _SAME:
            level = MAX_PRIORITY
        else:
            level = min(MAX_PRIORITY - 1, int((MAX_PRIORITY - 1) * (value - low) / (best - low)))
        out.append({"Host": name, "Score": level})
    return out
