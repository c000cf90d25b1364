"""The GPU backend boundary: what the node agent needs to know about the node's GPUs.

`DeviceBackend` is the interface (discover, probe, XID events, usage); `NvmlBackend` in
`nvml.py` is the production implementation through nvidia-ml-py. Tests and the simulated GPU
use the same NvmlBackend (pynvml loads the simulated libnvidia-ml.so.1); unit tests inject a
small fake.
"""
from dataclasses import dataclass
from typing import Iterable, Optional, Protocol, runtime_checkable


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as discovered."""

    uuid: str
    index: int
    name: str
    memory_mib: int
    numa: int = 0
    minor: int = 0          # /dev/nvidia<minor>


@dataclass(frozen=True)
class XidEvent:
    """A critical error reported by the driver for one GPU."""

    uuid: str
    xid: int


@dataclass(frozen=True)
class GpuUsage:
    """What a GPU is doing right now (for metrics)."""

    uuid: str
    index: int
    name: str
    memory_used: int        # bytes
    memory_total: int       # bytes
    utilization: int        # percent of time a kernel ran over the last sample period


@runtime_checkable
class XidWatch(Protocol):
    """An open subscription to XID events of some GPUs."""

    unsupported: frozenset  # UUIDs whose events cannot be watched (health from probes only)

    def wait(self, timeout_s: float) -> Optional[XidEvent]:
        """The next event, or None after timeout_s; BackendError if the driver fails."""

    def close(self) -> None:
        """Releases the subscription."""


@runtime_checkable
class DeviceBackend(Protocol):
    """Discovery and health of the node's GPUs."""

    def discover(self) -> list:
        """Every GPU (list of Gpu) in index order; BackendError if the driver does not answer."""

    def probe(self, uuid: str) -> Optional[str]:
        """None when the GPU answers the driver; otherwise why it does not."""

    def watch_xids(self, uuids: Iterable[str]) -> XidWatch:
        """Subscribes to the critical XID events of these GPUs."""

    def usage(self) -> list:
        """GpuUsage per GPU (skipping GPUs that do not answer)."""

    def process_utilization(self, uuid: str, since_us: int = 0) -> dict:
        """pid -> SM utilization percent over the last sample period, for one GPU; with since_us
        (Unix-epoch microseconds) the mean of each pid's samples since then."""

    def process_memory(self, uuid: str) -> dict:
        """Host pid -> device memory in bytes as the driver counts it, for one GPU."""

    def versions(self) -> tuple:
        """(driver version, CUDA driver API version) as text, e.g. ("550.54.15", "12.4");
        empty where the driver does not say."""
