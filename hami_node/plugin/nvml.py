"""NvmlBackend: the production DeviceBackend, through nvidia-ml-py (pynvml).

pynvml loads libnvidia-ml.so.1 by soname, so the same code drives a real driver or the
simulated one (`hami-sim run -- hami-node ...`).
"""
import threading
from typing import Iterable, Optional

from hami_node.plugin.backend import Gpu, GpuUsage, XidEvent
from hami_node.plugin.errors import BackendError

MIB = 1 << 20


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlXidWatch:
    """An NVML event set registered for critical XIDs on some GPUs."""

    def __init__(self, nvml, handles: dict):
        self._nvml = nvml
        self._by_handle = {}
        unsupported = set()
        self._set = nvml.nvmlEventSetCreate()
        for uuid, handle in handles.items():
            try:
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
                if not supported & nvml.nvmlEventTypeXidCriticalError:
                    unsupported.add(uuid)
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError,
                                              self._set)
            except nvml.NVMLError:
                unsupported.add(uuid)
                continue
            self._by_handle[_handle_key(handle)] = uuid
        self.unsupported = frozenset(unsupported)

    def wait(self, timeout_s: float) -> Optional[XidEvent]:
        """The next critical XID, or None when none came within timeout_s."""
        nvml = self._nvml
        try:
            data = nvml.nvmlEventSetWait_v2(self._set, max(1, int(timeout_s * 1000)))
        except nvml.NVMLError_Timeout:
            return None
        except nvml.NVMLError as e:
            raise BackendError(f"waiting for NVML events failed: {e}") from e
        if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
            return None
        uuid = self._by_handle.get(_handle_key(data.device))
        if uuid is None:
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
            except nvml.NVMLError:
                uuid = ""   # an event for a GPU we cannot name: the caller treats "" as all
        return XidEvent(uuid=uuid, xid=int(data.eventData))

    def close(self) -> None:
        """Frees the event set."""
        try:
            self._nvml.nvmlEventSetFree(self._set)
        except self._nvml.NVMLError:
            pass  # the driver is gone; nothing left to free


def _handle_key(handle) -> int:
    """A hashable identity for an NVML device handle (a ctypes pointer)."""
    import ctypes
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class NvmlBackend:
    """DeviceBackend over NVML. `nvml` is the pynvml module (injectable)."""

    def __init__(self, nvml=None):
        if nvml is None:
            import pynvml as nvml
        self._nvml = nvml
        self._lock = threading.Lock()
        self._initialised = False

    def _init(self) -> None:
        with self._lock:
            if self._initialised:
                return
            try:
                self._nvml.nvmlInit()
            except self._nvml.NVMLError as e:
                raise BackendError(f"NVML cannot be initialised ({e}); is the NVIDIA driver "
                                   "installed and libnvidia-ml.so.1 on the library path?") from e
            self._initialised = True

    def _handle(self, uuid: str):
        return self._nvml.nvmlDeviceGetHandleByUUID(uuid)

    def discover(self) -> list:
        """Every GPU the driver reports, in index order."""
        self._init()
        nvml = self._nvml
        try:
            count = nvml.nvmlDeviceGetCount()
            return [self._describe(nvml.nvmlDeviceGetHandleByIndex(i), i) for i in range(count)]
        except nvml.NVMLError as e:
            raise BackendError(f"NVML device discovery failed: {e}") from e

    def _describe(self, handle, position: int) -> Gpu:
        nvml = self._nvml
        try:
            numa = int(nvml.nvmlDeviceGetNumaNodeId(handle))
        except (nvml.NVMLError, AttributeError):
            numa = 0   # single-socket machines and old drivers do not report one
        try:
            minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        except nvml.NVMLError:
            minor = position
        return Gpu(uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                   index=int(nvml.nvmlDeviceGetIndex(handle)),
                   name=_text(nvml.nvmlDeviceGetName(handle)),
                   memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB,
                   numa=max(numa, 0), minor=minor)

    def versions(self) -> tuple:
        """The driver's version and its CUDA version (12040 -> "12.4")."""
        self._init()
        nvml = self._nvml
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            driver = ""
        try:
            cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
            cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except nvml.NVMLError:
            cuda_text = ""
        return driver, cuda_text

    def probe(self, uuid: str) -> Optional[str]:
        """None when the GPU answers a memory query, else the NVML error."""
        try:
            self._init()
            self._nvml.nvmlDeviceGetMemoryInfo(self._handle(uuid))
            return None
        except (BackendError, self._nvml.NVMLError) as e:
            return f"NVML does not answer for it: {e}"

    def watch_xids(self, uuids: Iterable[str]) -> NvmlXidWatch:
        """An event set for the critical XIDs of these GPUs."""
        self._init()
        nvml = self._nvml
        try:
            return NvmlXidWatch(nvml, {u: self._handle(u) for u in uuids})
        except nvml.NVMLError as e:
            raise BackendError(f"cannot create an NVML event set: {e}") from e

    def usage(self) -> list:
        """Memory use and utilization per GPU."""
        self._init()
        nvml, out = self._nvml, []
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                try:
                    util = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                except nvml.NVMLError_NotSupported:
                    util = 0      # NVML has no utilization for a GPU in MIG mode
                out.append(GpuUsage(uuid=_text(nvml.nvmlDeviceGetUUID(handle)), index=i,
                                    name=_text(nvml.nvmlDeviceGetName(handle)),
                                    memory_used=int(mem.used), memory_total=int(mem.total),
                                    utilization=util))
            except nvml.NVMLError:
                continue  # an unanswering GPU has no figures; its health says why
        return out

    def process_memory(self, uuid: str) -> dict:
        """Host pid -> bytes from NVML's running compute processes; BackendError when the GPU
        cannot say."""
        nvml = self._nvml
        self._init()
        try:
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(self._handle(uuid))
        except nvml.NVMLError as e:
            raise BackendError(f"GPU {uuid}: cannot list its processes: {e}") from e
        return {int(p.pid): int(p.usedGpuMemory or 0) for p in processes}

    def process_utilization(self, uuid: str, since_us: int = 0) -> dict:
        """pid -> SM percent from NVML's per-process samples: the newest per pid, or with
        since_us (Unix-epoch microseconds, NVML's stamps) the mean of each pid's samples newer
        than it; empty when the GPU has none or cannot say."""
        nvml = self._nvml
        try:
            self._init()
            samples = nvml.nvmlDeviceGetProcessUtilization(self._handle(uuid), since_us)
        except (BackendError, nvml.NVMLError):
            return {}
        if since_us:
            by_pid: dict = {}
            for sample in samples:
                if sample.timeStamp > since_us:
                    by_pid.setdefault(int(sample.pid), []).append(int(sample.smUtil))
            return {pid: sum(pcts) / len(pcts) for pid, pcts in by_pid.items()}
        newest = {}
        for sample in samples:
            if sample.pid not in newest or sample.timeStamp > newest[sample.pid].timeStamp:
                newest[sample.pid] = sample
        return {pid: int(sample.smUtil) for pid, sample in newest.items()}
