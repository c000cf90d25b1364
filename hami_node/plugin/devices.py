"""The GPUs this agent advertises, their virtual devices and their health.

Each GPU is advertised to kubelet as deviceSplitCount virtual devices `<GPU-UUID>-<n>`, as HAMi
does; kubelet only counts them, while the scheduler's annotation says which GPU and how much of
it a container gets. `DeviceTable` is the one shared, thread-safe record of health: the health
monitor writes it, ListAndWatch and the node annotation read it.
"""
import threading
from dataclasses import dataclass, replace
from typing import Iterable, Optional

from hami_common.constants import DEVICE_MODE_HAMI_CORE, DEVICE_MODE_MIG
from hami_common.node_register import DeviceInfo, device_type_name
from hami_node.plugin.backend import Gpu


def virtual_ids(uuid: str, split: int) -> list:
    """The virtual device IDs of one GPU."""
    return [f"{uuid}-{n}" for n in range(split)]


def parse_virtual_id(device_id: str) -> tuple:
    """(GPU UUID, replica number) of a virtual device ID; ValueError if it is not one."""
    uuid, sep, number = device_id.rpartition("-")
    if not sep or not uuid or not number.isdigit():
        raise ValueError(f"{device_id!r} is not a virtual device ID <GPU-UUID>-<n>")
    return uuid, int(number)


def select_gpus(gpus: Iterable[Gpu], exclude: Iterable[str]) -> tuple:
    """(advertised GPUs, exclude entries that matched no GPU): exclusion by UUID or index."""
    exclude = [e.strip() for e in exclude if e.strip()]
    keep, matched = [], set()
    for gpu in gpus:
        hits = {e for e in exclude if e == gpu.uuid or e == str(gpu.index)}
        matched |= hits
        if not hits:
            keep.append(gpu)
    return keep, [e for e in exclude if e not in matched]


@dataclass(frozen=True)
class GpuHealth:
    """One advertised GPU and what the agent currently believes about it."""

    gpu: Gpu
    healthy: bool = True
    reason: str = ""        # why it is unhealthy (empty when healthy)
    last_bad: float = 0.0   # monotonic time of the latest critical event or failed probe


class DeviceTable:
    """The advertised GPUs with their health; `version` grows on every change."""

    def __init__(self, gpus: Iterable[Gpu], split: int):
        self.split = split
        self._cond = threading.Condition()
        self._states = {g.uuid: GpuHealth(g) for g in gpus}
        self._order = list(self._states)
        self.version = 0

    @property
    def gpus(self) -> list:
        """The advertised GPUs in index order."""
        return [self._states[u].gpu for u in self._order]

    def get(self, uuid: str) -> Optional[GpuHealth]:
        """The state of one GPU, or None when it is not advertised here."""
        with self._cond:
            return self._states.get(uuid)

    def states(self) -> list:
        """A consistent snapshot of every GPU's state."""
        with self._cond:
            return [self._states[u] for u in self._order]

    def mark(self, uuid: str, healthy: bool, reason: str = "", when: float = 0.0) -> bool:
        """Records a GPU's health; True when that changed what is advertised."""
        with self._cond:
            old = self._states.get(uuid)
            if old is None:
                return False
            new = replace(old, healthy=healthy, reason="" if healthy else reason,
                          last_bad=when if not healthy else old.last_bad)
            self._states[uuid] = new
            changed = old.healthy != healthy
            if changed:
                self.version += 1
                self._cond.notify_all()
            return changed

    def wait_change(self, seen: int, timeout: float) -> int:
        """Blocks until version differs from `seen` (or timeout); returns the version."""
        with self._cond:
            if self.version == seen:
                self._cond.wait(timeout)
            return self.version

    def wake(self) -> None:
        """Wakes every waiter (shutting down)."""
        with self._cond:
            self.version += 1
            self._cond.notify_all()

    def virtual_devices(self) -> list:
        """(device ID, healthy, NUMA node) for every virtual device."""
        return [(vid, s.healthy, s.gpu.numa) for s in self.states()
                for vid in virtual_ids(s.gpu.uuid, self.split)]


def register_entries(states: Iterable[GpuHealth], split: int, memory_scaling: float,
                     core_scaling: float, mig=None) -> list:
    """The node annotation's DeviceInfo per GPU (HAMi's JSON register format). `mig`: the
    MigManager; its GPUs register in mode "mig" with their profiles (unscaled: an instance's
    memory is physical), as many tasks as instances fit; while their MIG mode is pending, in
    mode "mig" without profiles (nothing placed on them: a shim slice would keep the GPU
    from changing, or find it changed under it)."""
    out = []
    for s in states:
        is_mig = mig is not None and mig.is_mig(s.gpu.uuid)
        profiles = mig.profiles(s.gpu.uuid) if is_mig else ()
        out.append(DeviceInfo(
            id=s.gpu.uuid, index=s.gpu.index,
            count=max((len(p.placements) for p in profiles), default=split),
            devmem=s.gpu.memory_mib if is_mig else int(s.gpu.memory_mib * memory_scaling),
            devcore=100 if is_mig else int(100 * core_scaling),
            type=device_type_name(s.gpu.name), numa=s.gpu.numa, health=s.healthy,
            mode=DEVICE_MODE_MIG if is_mig else DEVICE_MODE_HAMI_CORE, mig_profiles=profiles))
    return out
