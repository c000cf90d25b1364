"""How much memory each visible GPU has, asked of the driver in a child process (so the
caller's own process never loads libcuda, and the child sees exactly the environment the
command will run with: CUDA_VISIBLE_DEVICES, the simulator's library path)."""
import json
import subprocess
import sys
from typing import List, Mapping, Protocol, runtime_checkable

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


@runtime_checkable
class DeviceProbe(Protocol):
    """Where device sizes come from (a child process asking the driver, by default)."""

    def totals(self, env: Mapping[str, str]) -> List[int]:
        """Physical memory in bytes of each device a process with `env` sees, by ordinal."""


class DriverProbe:
    """DeviceProbe that runs a short Python child against libcuda.so.1."""

    def totals(self, env: Mapping[str, str]) -> List[int]:
        child = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
        try:
            out = subprocess.run([sys.executable, "-c", _SCRIPT], env=child, capture_output=True,
                                 text=True, timeout=120)
            answer = json.loads(out.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError) as e:
            raise ShimError(f"cannot ask the driver for device sizes: {e}") from e
        if answer["rc"] or not answer["totals"]:
            raise ShimError(f"the driver lists no usable GPU (CUDA error {answer['rc']}); "
                            "--gpu-mem-percent needs one")
        return answer["totals"]
