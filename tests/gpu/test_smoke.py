"""Smoke test against the real driver: cuda-python and pynvml agree and memory works."""
import json
import subprocess
import sys

from gpuhelpers import child

SMOKE = r'''
import json
import pynvml
from cuda.bindings import driver as cu

def ok(ret):
    err, *rest = ret
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return rest[0] if len(rest) == 1 else rest

ok(cu.cuInit(0))
count = ok(cu.cuDeviceGetCount())
dev = ok(cu.cuDeviceGet(0))
name = ok(cu.cuDeviceGetName(256, dev)).split(b"\0")[0].decode()
total = ok(cu.cuDeviceTotalMem(dev))
ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
ok(cu.cuCtxSetCurrent(ctx))
free_before, total_ctx = ok(cu.cuMemGetInfo())
size = 64 << 20
ptr = ok(cu.cuMemAlloc(size))
data = bytes(range(256)) * (size // 256)
ok(cu.cuMemcpyHtoD(ptr, data, size))
back = bytearray(size)
ok(cu.cuMemcpyDtoH(back, ptr, size))
ok(cu.cuMemFree(ptr))
ok(cu.cuDevicePrimaryCtxRelease(dev))
version = ok(cu.cuDriverGetVersion())

pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
nvml = dict(count=pynvml.nvmlDeviceGetCount(), name=pynvml.nvmlDeviceGetName(handle),
            total=pynvml.nvmlDeviceGetMemoryInfo(handle).total,
            uuid=pynvml.nvmlDeviceGetUUID(handle))
pynvml.nvmlShutdown()
print(json.dumps(dict(count=count, name=name, total=total, total_ctx=total_ctx,
                      free_before=free_before, round_trip=bytes(back) == data,
                      version=version, nvml=nvml)))
'''


def test_real_driver_smoke(gpu_env):
    result = subprocess.run(child(gpu_env, "-c", SMOKE), env=gpu_env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["count"] >= 1 and got["nvml"]["count"] == got["count"]
    assert got["name"] and got["nvml"]["name"] == got["name"]
    assert got["total"] == got["total_ctx"] == got["nvml"]["total"] > 0
    assert 0 < got["free_before"] <= got["total"]
    assert got["round_trip"] is True
    assert got["version"] >= 12000
    assert got["nvml"]["uuid"].startswith("GPU-")
