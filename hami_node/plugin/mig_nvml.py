"""MigBackend: MIG instances through NVML (nvidia-ml-py), on a real driver or the simulated one.

What the node agent needs: whether a GPU can do MIG and in which mode it is, its profiles with
their possible placements (what it publishes), the instances that exist, and making or
destroying one exact instance (a GPU instance at a placement, with one compute instance over
all of it, as HAMi does)."""
import ctypes
import threading
from dataclasses import dataclass
from typing import Optional

from hami_common.mig import MigPlacement, MigProfile
from hami_node.plugin.errors import BackendError

MIG_COMPUTE_SLICES = 7
# NVML_COMPUTE_INSTANCE_PROFILE_* for a compute instance of n slices.
CI_PROFILE_OF_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


@dataclass(frozen=True)
class MigInstance:
    """One GPU instance (with its compute instance) on a GPU."""

    gpu_uuid: str
    gpu_instance_id: int
    compute_instance_id: Optional[int]   # None: a GPU instance without a compute instance
    profile: str
    placement: MigPlacement
    mig_uuid: str = ""
    memory_mb: int = 0


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlMig:
    """MIG through NVML. `nvml` is the pynvml module (injectable)."""

    def __init__(self, nvml=None):
        if nvml is None:
            import pynvml as nvml
        self._nvml = nvml
        self._lock = threading.Lock()
        self._ready = False

    def _gpu(self, uuid: str):
        nvml = self._nvml
        with self._lock:
            if not self._ready:
                nvml.nvmlInit()
                self._ready = True
        return nvml.nvmlDeviceGetHandleByUUID(uuid)

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except self._nvml.NVMLError as e:
            raise BackendError(f"{what}: {e}") from e

    def mode(self, uuid: str) -> Optional[tuple]:
        """(current, pending) MIG mode, 1 enabled; None when the GPU cannot do MIG."""
        nvml = self._nvml
        try:
            return tuple(nvml.nvmlDeviceGetMigMode(self._gpu(uuid)))
        except nvml.NVMLError_NotSupported:
            return None
        except nvml.NVMLError as e:
            raise BackendError(f"GPU {uuid}: cannot read its MIG mode: {e}") from e

    def enable(self, uuid: str) -> bool:
        """Asks for MIG mode; True once active, False while pending (a process holds the GPU)."""
        nvml = self._nvml
        status = self._call(f"GPU {uuid}: cannot enable MIG", nvml.nvmlDeviceSetMigMode,
                            self._gpu(uuid), nvml.NVML_DEVICE_MIG_ENABLE)
        return status == nvml.NVML_SUCCESS

    def profiles(self, uuid: str) -> list:
        """The GPU-instance profiles with their placements, in NVML's profile order."""
        nvml, gpu, out = self._nvml, self._gpu(uuid), []
        for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfoV(gpu, index)
            except nvml.NVMLError:
                continue          # a profile this GPU does not have
            count = ctypes.c_uint(0)
            self._call(f"GPU {uuid}: placements", nvml.nvmlDeviceGetGpuInstancePossiblePlacements,
                       gpu, info.id, None, ctypes.byref(count))
            places = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
            self._call(f"GPU {uuid}: placements", nvml.nvmlDeviceGetGpuInstancePossiblePlacements,
                       gpu, info.id, places, ctypes.byref(count))
            out.append(MigProfile(
                name=_text(info.name).removeprefix("MIG "), memory_mb=int(info.memorySizeMB),
                core=round(100 * info.sliceCount / MIG_COMPUTE_SLICES),
                slice_count=int(info.sliceCount),
                placements=tuple(MigPlacement(p.start, p.size) for p in places)))
        return out

    def _profile_ids(self, gpu) -> dict:
        nvml, ids = self._nvml, {}
        for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfoV(gpu, index)
            except nvml.NVMLError:
                continue
            ids[_text(info.name).removeprefix("MIG ")] = (info.id, info)
        return ids

    def instances(self, uuid: str) -> list:
        """Every GPU instance on the GPU, with its first compute instance."""
        nvml, gpu, out = self._nvml, self._gpu(uuid), []
        for name, (pid, info) in self._profile_ids(gpu).items():
            handles = (nvml.c_nvmlGpuInstance_t * max(1, info.instanceCount))()
            count = ctypes.c_uint(0)
            self._call(f"GPU {uuid}: list instances", nvml.nvmlDeviceGetGpuInstances, gpu, pid,
                       handles, ctypes.byref(count))
            for gi in handles[:count.value]:
                out.append(self._describe(uuid, gpu, gi, name, info))
        return out

    def _describe(self, uuid, gpu, gi, name, info) -> MigInstance:
        nvml = self._nvml
        gi_info = nvml.nvmlGpuInstanceGetInfo(gi)
        ci_id, mig_uuid = None, ""
        cis = self._compute_instances(gi)
        if cis:
            ci_id = int(nvml.nvmlComputeInstanceGetInfo(cis[0]).id)
            mig_uuid = self._mig_uuid(gpu, int(gi_info.id), ci_id)
        return MigInstance(uuid, int(gi_info.id), ci_id, name,
                           MigPlacement(gi_info.placement.start, gi_info.placement.size),
                           mig_uuid, int(info.memorySizeMB))

    def _compute_instances(self, gi) -> list:
        """The compute instances of a GPU instance, of every profile."""
        nvml, out = self._nvml, []
        for index in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            cis = (nvml.c_nvmlComputeInstance_t * MIG_COMPUTE_SLICES)()
            count = ctypes.c_uint(0)
            try:
                nvml.nvmlGpuInstanceGetComputeInstances(gi, index, cis, ctypes.byref(count))
            except nvml.NVMLError:
                continue          # a profile this GPU instance cannot have
            out += cis[:count.value]
        return out

    def _mig_uuid(self, gpu, gi_id: int, ci_id: int) -> str:
        nvml = self._nvml
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i)
            except nvml.NVMLError:
                break
            if (nvml.nvmlDeviceGetGpuInstanceId(mig), nvml.nvmlDeviceGetComputeInstanceId(mig)) \
                    == (gi_id, ci_id):
                return _text(nvml.nvmlDeviceGetUUID(mig))
        return ""

    def create(self, uuid: str, profile: str, placement: MigPlacement) -> MigInstance:
        """Makes a GPU instance of `profile` at exactly `placement` and a compute instance over
        all of it; BackendError says why not (nothing is left half-made)."""
        nvml, gpu = self._nvml, self._gpu(uuid)
        ids = self._profile_ids(gpu)
        if profile not in ids:
            raise BackendError(f"GPU {uuid} has no MIG profile {profile} "
                               f"(it has {', '.join(ids) or 'none'})")
        pid, info = ids[profile]
        place = nvml.c_nvmlGpuInstancePlacement_t(placement.start, placement.size)
        gi = self._call(f"GPU {uuid}: cannot create a {profile} instance at slices "
                        f"{placement.start}-{placement.start + placement.size - 1}",
                        nvml.nvmlDeviceCreateGpuInstanceWithPlacement, gpu, pid,
                        ctypes.byref(place))
        try:
            ci_profile = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, CI_PROFILE_OF_SLICES[int(info.sliceCount)], 0)
            nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
        except (nvml.NVMLError, KeyError) as e:
            nvml.nvmlGpuInstanceDestroy(gi)
            raise BackendError(f"GPU {uuid}: cannot create the compute instance of {profile}: "
                               f"{e}") from e
        return self._describe(uuid, gpu, gi, profile, info)

    def destroy(self, uuid: str, gpu_instance_id: int) -> None:
        """Destroys a GPU instance and its compute instances; BackendError when in use."""
        nvml, gpu = self._nvml, self._gpu(uuid)
        gi = self._call(f"GPU {uuid}: no GPU instance {gpu_instance_id}",
                        nvml.nvmlDeviceGetGpuInstanceById, gpu, gpu_instance_id)
        for ci in self._compute_instances(gi):
            self._call(f"GPU {uuid}: instance {gpu_instance_id} is in use",
                       nvml.nvmlComputeInstanceDestroy, ci)
        self._call(f"GPU {uuid}: instance {gpu_instance_id} is in use",
                   nvml.nvmlGpuInstanceDestroy, gi)
