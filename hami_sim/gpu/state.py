"""Read-only view of the simulated GPUs' shared state file (layout: c/simgpu/sim_state.h).

The ctypes structures mirror the C header field for field; LAYOUT lists the sizes and
offsets both sides assert. Reading takes no lock: a snapshot may be a few microseconds
inconsistent, which is fine for status displays.
"""
import ctypes
import mmap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

MAGIC = 0x314D4953494D4148  # "HAMISIM1"
VERSION = 4
STATE_FILE = "gpus.state"
MAX_DEVICES, MAX_PROCS, BUSY_RING, XID_RING, BUSY_BINS = 16, 64, 1024, 64, 256
MIG_GIS, MIG_CIS, MIG_RECORDS, MAX_HOLDS = 7, 7, 24, 1024
UTIL_WINDOW_NS = 1_000_000_000


class SimProc(ctypes.Structure):
    """One process using one device (pid 0: free slot)."""
    _fields_ = [("pid", ctypes.c_int32), ("contexts", ctypes.c_uint32),
                ("start_time", ctypes.c_uint64), ("used_bytes", ctypes.c_uint64),
                ("pidns", ctypes.c_uint64), ("reserved", ctypes.c_uint64 * 3),
                ("host_pid", ctypes.c_int32),
                ("reserved2", ctypes.c_uint32)]


class SimBusy(ctypes.Structure):
    """A stretch of device time spent on one process's kernels (CLOCK_MONOTONIC ns)."""
    _fields_ = [("start_ns", ctypes.c_int64), ("end_ns", ctypes.c_int64),
                ("pid", ctypes.c_int32), ("reserved", ctypes.c_uint32)]


class SimXid(ctypes.Structure):
    """One injected XID event."""
    _fields_ = [("seq", ctypes.c_uint64), ("xid", ctypes.c_uint64),
                ("time_ns", ctypes.c_int64), ("reserved", ctypes.c_uint64)]


class SimBusyBins(ctypes.Structure):
    """Busy time per 10 ms bin, device-wide and per process slot (NVML's utilization)."""
    _fields_ = [("bin", ctypes.c_int64 * BUSY_BINS), ("device_ns", ctypes.c_uint32 * BUSY_BINS),
                ("proc_ns", (ctypes.c_uint32 * BUSY_BINS) * MAX_PROCS)]


class SimDevice(ctypes.Structure):
    """One simulated GPU."""
    _fields_ = [("total_bytes", ctypes.c_uint64), ("index", ctypes.c_uint32),
                ("sms", ctypes.c_uint32), ("name", ctypes.c_char * 96),
                ("uuid", ctypes.c_char * 48), ("cc_major", ctypes.c_int32),
                ("cc_minor", ctypes.c_int32), ("pci_bus", ctypes.c_uint32),
                ("numa_node", ctypes.c_int32), ("busy_until_ns", ctypes.c_int64),
                ("busy_count", ctypes.c_uint64), ("xid_count", ctypes.c_uint64),
                ("reserved", ctypes.c_uint8 * 248), ("procs", SimProc * MAX_PROCS),
                ("busy", SimBusy * BUSY_RING), ("xids", SimXid * XID_RING),
                ("bins", SimBusyBins)]


class SimHeader(ctypes.Structure):
    """File header: identification, configuration and the shared lock."""
    _fields_ = [("magic", ctypes.c_uint64), ("version", ctypes.c_uint32),
                ("header_size", ctypes.c_uint32), ("total_size", ctypes.c_uint64),
                ("device_count", ctypes.c_uint32), ("device_size", ctypes.c_uint32),
                ("config", ctypes.c_char * 1024), ("lock", ctypes.c_uint8 * 64),
                ("reserved", ctypes.c_uint8 * 928)]


class SimMigCi(ctypes.Structure):
    """A compute instance: a MIG device with its own UUID."""
    _fields_ = [("live", ctypes.c_uint32), ("id", ctypes.c_uint32),
                ("profile_id", ctypes.c_uint32), ("start", ctypes.c_uint32),
                ("size", ctypes.c_uint32), ("sms", ctypes.c_uint32),
                ("uuid", ctypes.c_char * 48), ("reserved", ctypes.c_uint8 * 8)]


class SimMigGi(ctypes.Structure):
    """A GPU instance; `record` indexes SimState.mig_records."""
    _fields_ = [("live", ctypes.c_uint32), ("id", ctypes.c_uint32),
                ("profile_id", ctypes.c_uint32), ("start", ctypes.c_uint32),
                ("size", ctypes.c_uint32), ("record", ctypes.c_int32),
                ("memory_bytes", ctypes.c_uint64), ("sms", ctypes.c_uint32),
                ("compute_slices", ctypes.c_uint32), ("reserved", ctypes.c_uint64 * 2),
                ("cis", SimMigCi * MIG_CIS)]


class SimMigGpu(ctypes.Structure):
    """One GPU's MIG mode and instances."""
    _fields_ = [("mode_current", ctypes.c_uint32), ("mode_pending", ctypes.c_uint32),
                ("serial", ctypes.c_uint64), ("reserved", ctypes.c_uint64 * 6),
                ("gis", SimMigGi * MIG_GIS)]


class SimHold(ctypes.Structure):
    """One process holding memory more than one process can reach (pid 0: free row)."""
    _fields_ = [("ino", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("start_time", ctypes.c_uint64), ("pid", ctypes.c_int32),
                ("host_pid", ctypes.c_int32), ("record", ctypes.c_int32),
                ("charged", ctypes.c_uint32), ("refs", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("pidns", ctypes.c_uint64),
                ("since_ns", ctypes.c_int64)]


class SimState(ctypes.Structure):
    """The whole file."""
    _fields_ = [("header", SimHeader), ("devices", SimDevice * MAX_DEVICES),
                ("mig", SimMigGpu * MAX_DEVICES), ("mig_used", ctypes.c_uint8 * MIG_RECORDS),
                ("reserved_mig", ctypes.c_uint8 * (64 - MIG_RECORDS)),
                ("mig_records", SimDevice * MIG_RECORDS), ("holds", SimHold * MAX_HOLDS)]


# (struct, field or None for sizeof, value): the numbers sim_state.h asserts too.
LAYOUT = [
    (SimProc, None, 64), (SimBusy, None, 24), (SimXid, None, 32),
    (SimDevice, "busy_until_ns", 176), (SimDevice, "procs", 448), (SimDevice, "busy", 4544),
    (SimDevice, "xids", 29120), (SimDevice, "bins", 31168), (SimBusyBins, None, 68608),
    (SimDevice, None, 99776),
    (SimHeader, "config", 32), (SimHeader, "lock", 1056), (SimHeader, None, 2048),
    (SimMigCi, None, 80), (SimMigGi, None, 616), (SimMigGpu, None, 4376),
    (SimState, "mig", 2048 + 16 * 99776),
    (SimState, "mig_records", 2048 + 16 * 99776 + 16 * 4376 + 64),
    (SimHold, None, 64),
    (SimState, "holds", 2048 + 16 * 99776 + 16 * 4376 + 64 + 24 * 99776),
    (SimState, None, 2048 + 16 * 99776 + 16 * 4376 + 64 + 24 * 99776 + 1024 * 64),
]


class StateError(Exception):
    """The state file is missing or is not a simulated-GPU state file of this version."""


@dataclass
class ProcessUse:
    """One process on one device."""
    pid: int
    used_bytes: int
    utilization: int


@dataclass
class DeviceStatus:
    """What `hami-sim status` shows for one device."""
    index: int
    name: str
    uuid: str
    total_bytes: int
    used_bytes: int
    utilization: int
    processes: List[ProcessUse] = field(default_factory=list)


def read_state(path: Path) -> SimState:
    """A copy of the state file, checked for magic, version and size."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if len(m) != ctypes.sizeof(SimState):
                raise StateError(f"{path}: size {len(m)}, expected {ctypes.sizeof(SimState)}")
            state = SimState.from_buffer_copy(m)
    except (OSError, ValueError) as e:
        raise StateError(f"{path}: cannot read the simulated GPU state ({e})") from e
    if state.header.magic != MAGIC or state.header.version != VERSION:
        raise StateError(f"{path}: not a version-{VERSION} simulated GPU state file")
    return state


def _busy_ns(dev: SimDevice, start: int, end: int, pid: int = 0) -> int:
    total = 0
    for k in range(min(dev.busy_count, BUSY_RING)):
        b = dev.busy[(dev.busy_count - 1 - k) % BUSY_RING]
        if b.end_ns <= start:
            break
        if pid and b.pid != pid:
            continue
        total += max(0, min(b.end_ns, end) - max(b.start_ns, start))
    return total


def _percent(busy: int) -> int:
    return min(100, round(busy * 100 / UTIL_WINDOW_NS))


def proc_alive(pid: int, start_time: int) -> bool:
    """Whether `pid` is still the process that registered (same start time, not a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = text[text.rindex(")") + 2:].split()
    return fields[0] not in ("Z", "X") and int(fields[19]) == start_time


PAGE = 2 << 20


def reported(used: int) -> int:
    """A process's use as the driver reports it: in whole 2 MiB pages."""
    return -(-used // PAGE) * PAGE


def device_status(state: SimState, now_ns: Optional[int] = None,
                  alive: Callable[[int, int], bool] = proc_alive) -> List[DeviceStatus]:
    """Per-device memory, processes and utilization over the last second."""
    now = time.monotonic_ns() if now_ns is None else now_ns
    out = []
    for dev in state.devices[:state.header.device_count]:
        procs = [ProcessUse(p.pid, reported(p.used_bytes),
                            _percent(_busy_ns(dev, now - UTIL_WINDOW_NS, now, p.pid)))
                 for p in dev.procs if p.pid and alive(p.pid, p.start_time)]
        out.append(DeviceStatus(dev.index, dev.name.decode(), dev.uuid.decode(), dev.total_bytes,
                                sum(p.used_bytes for p in procs),
                                _percent(_busy_ns(dev, now - UTIL_WINDOW_NS, now)), procs))
    return out
