"""ctypes mirror of the container's shared accounting file (c/vgpu/vgpu_shared.h, the one
place the format is defined and explained). LAYOUT lists the sizes and offsets both sides
assert; tests/shim compares every field with a probe compiled against the C header."""
import ctypes

MAGIC = 0x31504756494D4148  # "HAMIVGP1"
VERSION = 1
MAX_DEVICES, MAX_PROCS, UUID_LEN = 16, 1024, 48
POLICY_NAMES = {0: "default", 1: "force", 2: "disable"}


class VgpuComputeFigures(ctypes.Structure):
    """Compute figures of one process, or of the whole container on one device."""
    _fields_ = [("charged_ns", ctypes.c_uint64), ("launches", ctypes.c_uint64),
                ("waits", ctypes.c_uint64), ("waited_ns", ctypes.c_uint64),
                ("window_start_ns", ctypes.c_int64), ("window_charged_ns", ctypes.c_uint64),
                ("share_at_ns", ctypes.c_int64), ("share_ppm", ctypes.c_uint32),
                ("window_ms", ctypes.c_uint32)]


class VgpuCompute(ctypes.Structure):
    """The container's compute budget on one GPU (tat_ns: GCRA arrival time) and its figures."""
    _fields_ = [("tat_ns", ctypes.c_int64), ("figures", VgpuComputeFigures),
                ("reserved", ctypes.c_uint8 * 184)]


class VgpuProc(ctypes.Structure):
    """One process of the container (pid 0: free slot)."""
    _fields_ = [("pid", ctypes.c_int32), ("priority", ctypes.c_int32),
                ("start_time", ctypes.c_uint64), ("used", ctypes.c_uint64 * MAX_DEVICES),
                ("compute", VgpuComputeFigures), ("reserved", ctypes.c_uint8 * 44),
                ("host_pid", ctypes.c_int32)]


class VgpuDevice(ctypes.Structure):
    """One GPU the container uses (empty uuid: free record)."""
    _fields_ = [("uuid", ctypes.c_char * UUID_LEN), ("total_bytes", ctypes.c_uint64),
                ("limit_bytes", ctypes.c_uint64), ("used_bytes", ctypes.c_uint64),
                ("peak_bytes", ctypes.c_uint64), ("refusals", ctypes.c_uint64),
                ("sm_limit", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("reserved", ctypes.c_uint8 * 152), ("ctx_estimate", ctypes.c_uint64),
                ("compute", VgpuCompute)]


class VgpuHeader(ctypes.Structure):
    """Identity, sizes, the lock and the last liveness sweep."""
    _fields_ = [("magic", ctypes.c_uint64), ("version", ctypes.c_uint32),
                ("header_size", ctypes.c_uint32), ("total_size", ctypes.c_uint64),
                ("device_size", ctypes.c_uint32), ("proc_size", ctypes.c_uint32),
                ("max_devices", ctypes.c_uint32), ("max_procs", ctypes.c_uint32),
                ("last_reap_ns", ctypes.c_int64), ("policy", ctypes.c_int32),
                ("flags", ctypes.c_uint32), ("reserved0", ctypes.c_uint64),
                ("lock", ctypes.c_uint8 * 64), ("reserved", ctypes.c_uint8 * 384)]


class VgpuShared(ctypes.Structure):
    """The whole file."""
    _fields_ = [("header", VgpuHeader), ("devices", VgpuDevice * MAX_DEVICES),
                ("procs", VgpuProc * MAX_PROCS)]


# (struct, field or None for the size, value): the numbers vgpu_shared.h asserts.
LAYOUT = [
    (VgpuComputeFigures, None, 64), (VgpuComputeFigures, "share_ppm", 56),
    (VgpuCompute, None, 256), (VgpuCompute, "figures", 8),
    (VgpuProc, None, 256), (VgpuProc, "used", 16), (VgpuProc, "compute", 144),
    (VgpuDevice, None, 512), (VgpuDevice, "used_bytes", 64), (VgpuDevice, "sm_limit", 88),
    (VgpuDevice, "compute", 256), (VgpuHeader, "lock", 64), (VgpuHeader, None, 512),
    (VgpuShared, "devices", 512), (VgpuShared, "procs", 512 + 16 * 512),
    (VgpuShared, None, 512 + 16 * 512 + 1024 * 256),
]
FILE_SIZE = ctypes.sizeof(VgpuShared)
