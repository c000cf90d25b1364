"""The shim on a real GPU: PyTorch hits its OOM at the limit (caching allocator, expandable
segments, cudaMallocAsync), nvidia-smi shows the limit, two processes share one limit.

Only the standard library and pytest here; the GPU work runs in children (PyTorch, nvidia-smi)
with libvgpu.so preloaded, built by `make -C c` when missing (no pip needed).
"""
import json
import shutil
import subprocess
import sys

import pytest

from gpuhelpers import child

MiB = 1 << 20
LIMIT = 1024 * MiB
CHUNK = 64 * MiB

FILL = r'''
import json, os, sys, torch
chunk = int(os.environ["CHUNK"])
torch.cuda.init()
held, message = [], ""
try:
    while len(held) < 10000:
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError as e:
    message = str(e)
free, total = torch.cuda.mem_get_info()
print(json.dumps(dict(allocated=len(held) * chunk, reserved=torch.cuda.memory_reserved(),
                      total=total, free=free, message=message)))
'''


@pytest.fixture
def shim_env(gpu_env, libvgpu, tmp_path):
    """The real-GPU environment with the shim preloaded, a 1 GiB limit, a private cache."""
    return dict(gpu_env, LD_PRELOAD=str(libvgpu), CUDA_DEVICE_MEMORY_LIMIT="1g",
                CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "vgpu.cache"), CHUNK=str(CHUNK))


def run_child(script, env, timeout=300):
    done = subprocess.run(child(env, "-c", script), env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("alloc_conf",
                         ["", "expandable_segments:True", "backend:cudaMallocAsync"],
                         ids=["caching", "expandable-segments", "cudaMallocAsync"])
def test_pytorch_runs_out_of_memory_at_the_limit(shim_env, alloc_conf):
    env = dict(shim_env, PYTORCH_CUDA_ALLOC_CONF=alloc_conf) if alloc_conf else shim_env
    got = run_child(FILL, env)
    assert got["message"], "no OutOfMemoryError before 10000 chunks"
    assert got["total"] == LIMIT  # what cudaMemGetInfo reports under the shim
    # The refused chunk did not fit: at most one chunk (plus one 20 MiB allocator segment
    # rounding / 2 MiB granule) was left unused under the limit, and nothing went past it,
    # by the driver's count (cudaMemGetInfo's used: the context and modules included, so the
    # tensors themselves get less than the limit).
    used = got["total"] - got["free"]
    assert LIMIT - CHUNK - 20 * MiB < used <= LIMIT, got
    assert got["allocated"] <= got["reserved"] < used, got


HOLD = r'''
import json, os, sys, torch
x = torch.empty(int(os.environ["HOLD"]), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(json.dumps({"held": x.numel()}), flush=True)
sys.stdin.readline()
'''

TRY = r'''
import json, os, torch
def attempt(n):
    try:
        torch.empty(n, dtype=torch.uint8, device="cuda")
        return "ok"
    except torch.cuda.OutOfMemoryError:
        return "oom"
big = attempt(600 * 2**20)
torch.cuda.empty_cache()
print(json.dumps({"big": big, "small": attempt(256 * 2**20)}))
'''


def test_two_processes_share_one_limit(shim_env):
    # 3 GiB for two processes whose contexts (a few hundred MiB each) count too: the holder's
    # 1200 MiB and the other's 1200 MiB cannot both fit, 256 MiB more can.
    env = dict(shim_env, CUDA_DEVICE_MEMORY_LIMIT="3g")
    holder = subprocess.Popen(child(env, "-c", HOLD),
                              env=dict(env, HOLD=str(1200 * MiB)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(holder.stdout.readline()) == {"held": 1200 * MiB}
        assert run_child(TRY.replace("600 *", "1200 *"), env) == {"big": "oom", "small": "ok"}
    finally:
        holder.kill()
        holder.wait()


NVML_QUERY = r'''
import pynvml
pynvml.nvmlInit()
mem = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
print(f"{mem.total >> 20}, {mem.used >> 20}")
'''


def test_nvidia_smi_shows_the_limit_and_the_containers_use(shim_env):
    """nvidia-smi where the driver brought it (a GPU machine); where it did not (the simulated
    GPU), the same query by another NVML client through the shim."""
    smi = shutil.which("nvidia-smi")
    query = [smi, "-i", "0", "--query-gpu=memory.total,memory.used",
             "--format=csv,noheader,nounits"] if smi else child(shim_env, "-c", NVML_QUERY)
    holder = subprocess.Popen(child(shim_env, "-c", HOLD),
                              env=dict(shim_env, HOLD=str(256 * MiB)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(holder.stdout.readline()) == {"held": 256 * MiB}
        done = subprocess.run(query, env=shim_env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        total, used = (int(v) for v in done.stdout.split(","))
        assert total == LIMIT // MiB
        # the tensor, rounded up to the allocator's segments, and the holder's context
        assert 256 + 100 <= used <= LIMIT // MiB
    finally:
        holder.kill()
        holder.wait()


DRIVER = r'''
import json, pynvml
from cuda.bindings import driver as cu
def ok(r):
    assert r[0] == cu.CUresult.CUDA_SUCCESS, r[0]
    return r[1] if len(r) == 2 else r[1:]
ok(cu.cuInit(0))
dev = ok(cu.cuDeviceGet(0))
ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
ok(cu.cuCtxSetCurrent(ctx))
p = ok(cu.cuMemAlloc(300 * 2**20))
over = cu.cuMemAlloc(800 * 2**20)[0].name      # 300 MiB + the context + 800 MiB > 1 GiB
free, total = ok(cu.cuMemGetInfo())
pynvml.nvmlInit()
mem = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
print(json.dumps(dict(over=over, total=total, free=free, device_total=ok(cu.cuDeviceTotalMem(dev)),
                      nvml=[mem.total, mem.used, mem.free])))
'''


def test_the_driver_api_and_nvml_see_the_limit(shim_env):
    got = run_child(DRIVER, shim_env)
    used = LIMIT - got["free"]  # the allocation and the context, by the driver's count
    assert got["over"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert got["total"] == got["device_total"] == got["nvml"][0] == LIMIT
    assert 300 * MiB + 100 * MiB <= used <= LIMIT
    assert abs(got["nvml"][1] - used) <= 4 * MiB and got["nvml"][1] + got["nvml"][2] == LIMIT
