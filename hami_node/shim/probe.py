"""How much memory each visible GPU has, and what a CUDA context takes on it by itself, asked
of the driver in a child process (so the caller's own process never loads libcuda, and the
child sees exactly the environment the command will run with: CUDA_VISIBLE_DEVICES, the
simulator's library path)."""
import json
import subprocess
import sys
from typing import List, Mapping, Optional, Protocol, runtime_checkable

from hami_node.shim.errors import ShimError

_SCRIPT = r'''
import ctypes, json, sys
lib = ctypes.CDLL("libcuda.so.1")
count, size = ctypes.c_int(0), ctypes.c_size_t(0)
rc = lib.cuInit(0) or lib.cuDeviceGetCount(ctypes.byref(count))
totals = []
for i in range(count.value if not rc else 0):
    dev = ctypes.c_int(0)
    rc = lib.cuDeviceGet(ctypes.byref(dev), i) or lib.cuDeviceTotalMem_v2(ctypes.byref(size), dev)
    if rc:
        break
    totals.append(size.value)
print(json.dumps({"rc": rc, "totals": totals}))
'''


# A context's own memory: the driver's count of this process (NVML) once the device's primary
# context exists. None where NVML cannot say (no libnvidia-ml, a PID it does not list).
_CONTEXT_SCRIPT = r'''
import ctypes, json, os
lib = ctypes.CDLL("libcuda.so.1")
count = ctypes.c_int(0)
rc = lib.cuInit(0) or lib.cuDeviceGetCount(ctypes.byref(count))
costs = []
try:
    import pynvml
    pynvml.nvmlInit()
except Exception:
    pynvml = None
for i in range(count.value if not rc else 0):
    ctx, dev = ctypes.c_void_p(), ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(dev), i) or lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev):
        costs.append(None)
        continue
    cost = None
    if pynvml:
        try:
            uuid = ctypes.create_string_buffer(16)
            lib.cuDeviceGetUuid_v2(uuid, dev)
            hexed = uuid.raw.hex()
            name = "GPU-%s-%s-%s-%s-%s" % (hexed[:8], hexed[8:12], hexed[12:16], hexed[16:20], hexed[20:])
            h = pynvml.nvmlDeviceGetHandleByUUID(name)
            cost = sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                       if p.pid == os.getpid()) or None
        except Exception:
            cost = None
    costs.append(cost)
print(json.dumps({"rc": rc, "costs": costs}))
'''


@runtime_checkable
class DeviceProbe(Protocol):
    """Where device facts come from (a child process asking the driver, by default)."""

    def totals(self, env: Mapping[str, str]) -> List[int]:
        """Physical memory in bytes of each device a process with `env` sees, by ordinal."""

    def context_costs(self, env: Mapping[str, str]) -> List[Optional[int]]:
        """Device memory a CUDA context takes by itself on each device (None: unknown)."""


def _ask(script: str, env: Mapping[str, str], what: str) -> dict:
    """Runs `script` against the driver without the shim; its JSON answer."""
    child = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    try:
        out = subprocess.run([sys.executable, "-c", script], env=child, capture_output=True,
                             text=True, timeout=120)
        return json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        raise ShimError(f"cannot ask the driver for {what}: {e}") from e


class DriverProbe:
    """DeviceProbe that runs a short Python child against libcuda.so.1."""

    def context_costs(self, env: Mapping[str, str]) -> List[Optional[int]]:
        return _ask(_CONTEXT_SCRIPT, env, "a context's cost").get("costs", [])

    def totals(self, env: Mapping[str, str]) -> List[int]:
        answer = _ask(_SCRIPT, env, "device sizes")
        if answer["rc"] or not answer["totals"]:
            raise ShimError(f"the driver lists no usable GPU (CUDA error {answer['rc']}); "
                            "--gpu-mem-percent needs one")
        return answer["totals"]
