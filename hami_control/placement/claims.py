"""What a ResourceClaim of hami-py's DRA driver holds, in the units of namespace GPU quotas,
and what a pod the webhook turned to DRA will ask for before kube-scheduler allocates it: pure.

An allocated claim holds, per device of our driver in `status.allocation.devices.results`, one
GPU, the MiB of its `consumedCapacity.memory` (rounded up) and its `consumedCapacity.cores`.
A device allocated whole (the DRAConsumableCapacity gate off: no consumedCapacity) holds the
GPU's memory as its slice publishes it and 100 cores. A claim shared by several pods holds
once: the units are what the claim consumed of the GPUs, not what each pod asked.
"""
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from hami_common.constants import DRA_CORES, DRA_DRIVER, DRA_MEMORY
from hami_common.errors import HamiFormatError
from hami_common.quantity import memory_mib, parse_quantity
from hami_control.placement.quota import ZERO, Amount

WHOLE_CORES = 100


@dataclass(frozen=True)
class ClaimDeviceUse:
    """One device of an allocated claim: its node (the pool), device name, MiB and cores."""

    node: str
    device: str
    mem: int
    cores: int


@dataclass(frozen=True)
class ClaimUse:
    """An allocated claim of our driver: where, how much, and the pods it is reserved for."""

    namespace: str
    name: str
    uid: str
    devices: tuple                     # ClaimDeviceUse
    pods: tuple = ()                   # (name, uid) from status.reservedFor

    @property
    def key(self) -> str:
        """namespace/name."""
        return f"{self.namespace}/{self.name}"

    @property
    def amount(self) -> Amount:
        """GPUs, MiB and cores the claim holds."""
        return Amount(len(self.devices), sum(d.mem for d in self.devices),
                      sum(d.cores for d in self.devices))


def _whole(read, raw, where: str) -> int:
    try:
        return int(read(raw))
    except HamiFormatError as e:
        raise HamiFormatError(f"{where}: {e}") from e


def _up(raw) -> int:
    return -(-parse_quantity(raw) // 1)


def parse_claim(obj: Mapping, whole_mib: Callable[[str, str], int] = lambda pool, dev: 0,
                driver: str = DRA_DRIVER) -> Optional[ClaimUse]:
    """The claim's use of our driver's GPUs; None when it holds none (not allocated, or only
    other drivers' devices). `whole_mib(pool, device)`: a GPU's published memory, asked only
    for a device allocated whole. HamiFormatError for an unreadable consumedCapacity."""
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    status = obj.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    devices = []
    for result in results:
        if result.get("driver") != driver:
            continue
        pool, device = str(result.get("pool") or ""), str(result.get("device") or "")
        where = f"resourceclaim {namespace}/{name} device {device}"
        consumed = result.get("consumedCapacity")
        if consumed:
            mem = _whole(memory_mib, consumed[DRA_MEMORY], where) if DRA_MEMORY in consumed \
                else 0
            cores = _whole(_up, consumed[DRA_CORES], where) if DRA_CORES in consumed else 0
        else:
            mem, cores = whole_mib(pool, device), WHOLE_CORES
        devices.append(ClaimDeviceUse(pool, device, mem, cores))
    if not devices:
        return None
    pods = tuple((str(r.get("name") or ""), str(r.get("uid") or ""))
                 for r in status.get("reservedFor") or [] if r.get("resource") == "pods")
    return ClaimUse(namespace, name, str(meta.get("uid") or ""), tuple(devices), pods)


def ask_amount(asks, memory_sizes_mib=()) -> Amount:
    """What a pod's recorded asks (webhook/dra.py: template -> ContainerRequest) will hold once
    allocated: N GPUs, N x its MiB, N x its cores per container. A percentage of memory is
    counted on the largest GPU it may get (`memory_sizes_mib`: the published sizes its
    filters allow), so that a pod let through never goes over its quota; its claim is then
    counted in what it got."""
    total = ZERO
    largest = max(memory_sizes_mib, default=0)
    for ask in asks:
        mem = ask.mem_mib or (largest * ask.mem_percent // 100 if ask.mem_percent else 0)
        total = total + Amount(ask.nums, ask.nums * mem, ask.nums * ask.cores)
    return total
