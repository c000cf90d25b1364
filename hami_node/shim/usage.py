"""Reading a container's shared accounting file: per device its limit and use, per process its
use. For the node agent's metrics, hami-smi and tests. Reads without the lock (a snapshot may
be microseconds stale) and never writes: processes that died are left out of the view, and
their slots are freed by the shim itself at its next liveness sweep.

Compute: `sm_share` is the share of device time the compute limiter charged over its last
window of about a second (percent; the window in progress when it is overdue, i.e. when the
container stopped launching), `sm_waits` its timed sleeps for budget (wake-ups),
`sm_charged_ns` the device time charged since the file was made (a counter: the share over any
stretch is its difference over the stretch's length)."""
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Protocol, Union, runtime_checkable

from hami_node.shim import layout
from hami_node.shim.errors import CacheFileError


@runtime_checkable
class ProcessTable(Protocol):
    """Where process liveness comes from (the real /proc by default)."""

    def start_time(self, pid: int) -> Optional[int]:
        """Start time of a live process (field 22 of /proc/<pid>/stat), 0 when it lives but
        its start time cannot be read, None when it is gone or a zombie."""


class ProcFs:
    """ProcessTable over a /proc file system (the shim's own rules, c/vgpu/ledger.c)."""

    def __init__(self, root: Union[str, Path] = "/proc"):
        self.root = Path(root)

    def start_time(self, pid: int) -> Optional[int]:
        try:
            text = (self.root / str(pid) / "stat").read_text()
        except OSError:
            return self._exists(pid)
        fields = text[text.rfind(")") + 2:].split()  # the name may hold spaces and ')'
        if len(fields) < 20 or fields[0] in ("Z", "X", "x"):
            return None
        return int(fields[19])  # field 22 overall; fields[0] is field 3

    @staticmethod
    def _exists(pid: int) -> Optional[int]:
        """/proc may hide other users' processes (hidepid): then existence is all we see."""
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return 0
        return 0


@dataclass(frozen=True)
class DeviceUsage:
    """One device record: bytes, and the SM limit in percent (0: none). `used` sums the live
    processes' slots; `counted` is the shim's running total (equal once dead slots are swept)."""
    index: int
    uuid: str
    total: int
    limit: int
    used: int
    counted: int
    peak: int
    sm_limit: int
    refusals: int
    sm_share: float = 0.0
    sm_launches: int = 0
    sm_waits: int = 0
    sm_charged_ns: int = 0


@dataclass(frozen=True)
class ProcessUsage:
    """One live process: bytes it holds per device record index; its compute figures (all
    devices together)."""
    pid: int
    priority: int
    used: Dict[int, int] = field(default_factory=dict)
    sm_share: float = 0.0
    sm_launches: int = 0
    sm_waits: int = 0


@dataclass(frozen=True)
class CacheSnapshot:
    """A container's accounting at one moment (live processes only)."""
    path: str
    version: int
    policy: str
    devices: List[DeviceUsage]
    processes: List[ProcessUsage]
    dead_slots: int

    def device(self, uuid: str) -> Optional[DeviceUsage]:
        """The record of a device UUID, if the container used it."""
        return next((d for d in self.devices if d.uuid == uuid), None)

    def to_json(self) -> dict:
        """Plain data for JSON output."""
        return asdict(self)


def _load(path: Path) -> layout.VgpuShared:
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise CacheFileError(f"{path}: no such shared accounting file (has any process of the "
                             "container started under the shim?)") from e
    except OSError as e:
        raise CacheFileError(f"{path}: cannot read it: {e.strerror}") from e
    if len(data) != layout.FILE_SIZE:
        raise CacheFileError(f"{path}: has size {len(data)}, expected {layout.FILE_SIZE}")
    shared = layout.VgpuShared.from_buffer_copy(data)
    if shared.header.magic != layout.MAGIC:
        raise CacheFileError(f"{path}: not a hami-vgpu accounting file (bad magic number)")
    if shared.header.version != layout.VERSION:
        raise CacheFileError(f"{path}: version {shared.header.version}, this reader knows "
                             f"version {layout.VERSION}")
    return shared


def _alive(proc: layout.VgpuProc, processes: ProcessTable) -> bool:
    started = processes.start_time(proc.pid)
    if started is None:
        return False
    return started == 0 or proc.start_time == 0 or started == proc.start_time


WINDOW_NS = 1_000_000_000  # the limiter's share window (c/vgpu/limiter.h)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def share_percent(f: layout.VgpuComputeFigures, now_ns: int) -> float:
    """The charged share of device time in percent: the last complete window, or the window
    in progress when none closed yet or it is overdue (nothing launched since)."""
    if not f.window_start_ns:
        return 0.0
    open_ns = now_ns - f.window_start_ns
    if f.share_at_ns and open_ns < WINDOW_NS:
        return f.share_ppm / 1e4
    return max(0, _signed(f.window_charged_ns)) * 100 / max(open_ns, 1)


def read_usage(path: Union[str, Path], processes: Optional[ProcessTable] = None,
               clock: Callable[[], int] = time.monotonic_ns) -> CacheSnapshot:
    """The container's view from its shared file; CacheFileError when it cannot be read.
    `clock` is CLOCK_MONOTONIC in ns, the clock the shim stamps its windows with."""
    processes = processes or ProcFs()
    now = clock()
    shared = _load(Path(path))
    live, dead = [], 0
    for proc in shared.procs:
        if not proc.pid:
            continue
        if not _alive(proc, processes):
            dead += 1
            continue
        live.append(ProcessUsage(proc.pid, proc.priority,
                                 {d: proc.used[d] for d in range(layout.MAX_DEVICES)
                                  if proc.used[d]},
                                 share_percent(proc.compute, now), proc.compute.launches,
                                 proc.compute.waits))
    devices = []
    for index, dev in enumerate(shared.devices):
        if not dev.uuid:
            continue
        used = sum(p.used.get(index, 0) for p in live)  # the slots are the truth
        figures = dev.compute.figures
        devices.append(DeviceUsage(index, dev.uuid.decode(errors="replace"), dev.total_bytes,
                                   dev.limit_bytes, used, dev.used_bytes, dev.peak_bytes,
                                   dev.sm_limit, dev.refusals, share_percent(figures, now),
                                   figures.launches, figures.waits, figures.charged_ns))
    return CacheSnapshot(str(path), shared.header.version,
                         layout.POLICY_NAMES.get(shared.header.policy, "?"), devices,
                         sorted(live, key=lambda p: p.pid), dead)

