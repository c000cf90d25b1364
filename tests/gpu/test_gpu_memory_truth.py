"""Issue 17 on a real GPU: the memory cap by the driver's own count (NVML's per-process
figure), CUDA graph capture under the shim in every mode, VMM, a refused cudaMallocAsync, fork.

Each test is short and records what it measured with record_property (tests/gpu/run.sh puts
the figures in its JSON summary). Only the standard library and pytest here; the GPU work runs
in children (PyTorch, cuda-bindings, nvidia-ml-py) with libvgpu.so preloaded.
"""
import json
import subprocess
import sys

import pytest

from gpuhelpers import child

MiB = 1 << 20

# Child helpers: this process's figure as the driver counts it (NVML, matched by PID: under
# the shim the list shows the container's processes under their own PIDs) and the ledger
# (nvmlDeviceGetMemoryInfo's used in the container view: no re-read, no synchronisation).
HELPERS = r'''
import json, os, sys, threading
import pynvml
pynvml.nvmlInit()
NVML = pynvml.nvmlDeviceGetHandleByIndex(0)
MiB = 1 << 20

def driver_count():
    return sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(NVML)
               if p.pid == os.getpid())

def ledger():
    return pynvml.nvmlDeviceGetMemoryInfo(NVML).used

def say(**kw):
    print(json.dumps(kw), flush=True)

def driver_api():
    """cuda-bindings' driver module and a checker, with the primary context current."""
    from cuda.bindings import driver as cu
    def ok(ret):
        err, *rest = ret if isinstance(ret, tuple) else (ret,)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        return rest[0] if len(rest) == 1 else rest
    ok(cu.cuInit(0))
    ok(cu.cuCtxSetCurrent(ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))))
    return cu, ok
'''


def run_child(script, env, timeout=120):
    done = subprocess.run(child(env, "-c", HELPERS + script), env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def capped(gpu_env, libvgpu, tmp_path):
    """Environment factory: the shim preloaded with a limit and a private cache file."""
    def make(limit="1g", **extra):
        return dict(gpu_env, LD_PRELOAD=str(libvgpu), CUDA_DEVICE_MEMORY_LIMIT=limit,
                    CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / f"vgpu-{limit}.cache"),
                    **extra)
    return make


def test_ledger_matches_nvml_after_pytorch_start_and_a_matmul(capped, record_property):
    got = run_child(r'''
import torch
a = torch.randn(2048, 2048, device="cuda")
b = (a @ a).sum().item()
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
say(driver=driver_count(), ledger=total - free, nvml_used=ledger(), total=total,
    reserved=torch.cuda.memory_reserved())
''', capped("4g"))
    for key, value in got.items():
        record_property(key, value)
    record_property("gap_bytes", got["driver"] - got["ledger"])
    assert got["total"] == 4096 * MiB
    assert got["driver"] > got["reserved"]  # the context and modules are real
    assert abs(got["driver"] - got["ledger"]) <= 4 * MiB, got


@pytest.mark.parametrize("alloc_conf",
                         ["", "expandable_segments:True", "backend:cudaMallocAsync"],
                         ids=["caching", "expandable-segments", "cudaMallocAsync"])
def test_fill_to_oom_stays_within_the_cap_by_nvml(capped, record_property, alloc_conf):
    """PyTorch filled to its OutOfMemoryError under a 1 GiB cap, with each allocator backend:
    the driver's own count of the process (NVML: context, modules and every allocation) never
    passes the cap, and PyTorch's allocated bytes stop short of it by the context."""
    conf = {"PYTORCH_CUDA_ALLOC_CONF": alloc_conf} if alloc_conf else {}
    got = run_child(r'''
import torch
torch.cuda.init()
held, message, peak = [], "", 0
try:
    while len(held) < 10000:
        held.append(torch.empty(64 * MiB, dtype=torch.uint8, device="cuda"))
        peak = max(peak, driver_count())
except torch.cuda.OutOfMemoryError as e:
    message = str(e)[:300]
say(driver=driver_count(), peak=peak, held=len(held) * 64 * MiB, ledger=ledger(),
    allocated=torch.cuda.memory_allocated(), message=message)
''', capped("1g", **conf))
    for key, value in got.items():
        record_property(key, value)
    assert got["message"]
    assert max(got["driver"], got["peak"]) <= 1024 * MiB + 2 * MiB, got  # a page at most
    assert got["driver"] >= 1024 * MiB - 64 * MiB - 20 * MiB, got
    assert got["allocated"] == got["held"] < got["driver"], got  # the context is real
    if not alloc_conf.startswith("backend"):  # the caching allocator's message names the cap
        assert "total capacity of 1024.00 MiB" in got["message"], got["message"]


def test_vmm_create_map_release_then_a_refused_allocation(capped, record_property):
    got = run_child(r'''
cu, ok = driver_api()
prop = cu.CUmemAllocationProp()
prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
prop.location.id = 0
gran = ok(cu.cuMemGetAllocationGranularity(prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
size = (1024 * MiB + gran - 1) // gran * gran
h = ok(cu.cuMemCreate(size, prop, 0))
va = ok(cu.cuMemAddressReserve(size, 0, 0, 0))
ok(cu.cuMemMap(va, size, 0, h, 0))
ok(cu.cuMemRelease(h))
mapped = driver_count()
err, p = cu.cuMemAlloc(1024 * MiB)        # context + 1 GiB mapped + 1 GiB > 2 GiB
refused = err.name
ok(cu.cuMemUnmap(va, size))
err2, p2 = cu.cuMemAlloc(1024 * MiB)
say(refused=refused, after_unmap=err2.name, driver_mapped=mapped, driver_end=driver_count(),
    ledger_end=ledger())
''', capped("2g"))
    for key, value in got.items():
        record_property(key, value)
    assert got["refused"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert got["after_unmap"] == "CUDA_SUCCESS"
    assert got["driver_end"] <= 2048 * MiB + 2 * MiB


CAPTURE = r'''
import time, torch
mode, n = os.environ["MODE"], 256
x = torch.randn(n, n, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(2):
        y = x @ x                                  # warm-up outside the capture
torch.cuda.current_stream().wait_stream(s)
stop, seen = threading.Event(), []
def other():
    while not stop.is_set():
        try:
            torch.cuda.mem_get_info()
            seen.append("ok")
        except Exception as e:
            seen.append(type(e).__name__)
        time.sleep(0.001)
t = threading.Thread(target=other)
t.start()
g = torch.cuda.CUDAGraph()
error = ""
try:
    with torch.cuda.graph(g, capture_error_mode=mode):
        y = x @ x
        z = torch.empty(32 * MiB, dtype=torch.uint8, device="cuda")   # a graph allocation
        z.fill_(1)
except Exception as e:
    error = type(e).__name__ + ": " + str(e)[:200]
stop.set(); t.join()
replayed = False
if not error:
    g.replay(); torch.cuda.synchronize(); replayed = True
say(error=error, replayed=replayed, other=sorted(set(seen)), driver=driver_count(),
    ledger=ledger())
'''


@pytest.mark.parametrize("allocator", ["native", "cudaMallocAsync"])
@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_graph_capture_under_the_shim(capped, gpu_env, record_property, mode, allocator):
    conf = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"} if allocator != "native" else {}
    # The same capture without the shim first: the shim must change nothing about it.
    plain = run_child(CAPTURE, dict(gpu_env, MODE=mode, **conf))
    shimmed = run_child(CAPTURE, capped("8g", MODE=mode, **conf))
    for key, value in shimmed.items():
        record_property(key, value)
    record_property("error_without_shim", plain["error"])
    assert shimmed["error"] == plain["error"], (plain, shimmed)
    assert shimmed["other"] == plain["other"], (plain, shimmed)
    assert shimmed["replayed"] == plain["replayed"]


def test_a_refused_malloc_async_leaves_the_ledger_within_the_cap(capped, record_property):
    got = run_child(r'''
cu, ok = driver_api()
s = ok(cu.cuStreamCreate(0))
a = ok(cu.cuMemAllocAsync(256 * MiB, s))
base = driver_count()
err, b = cu.cuMemAllocAsync(1024 * MiB - base + 64 * MiB, s)  # just past the cap
say(refused=err.name, ledger=ledger(), driver=driver_count(), before=base)
''', capped("1g"))
    for key, value in got.items():
        record_property(key, value)
    assert got["refused"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert got["ledger"] <= 1024 * MiB, got   # read before any synchronisation
    assert got["driver"] <= 1024 * MiB + 2 * MiB, got


def test_fork_after_start_up_keeps_the_ledger(capped, record_property):
    got = run_child(r'''
import torch
a = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
before = ledger()
pid = os.fork()
if pid == 0:                      # the child uses no CUDA: it only reads NVML and leaves
    pynvml.nvmlDeviceGetMemoryInfo(NVML)
    os._exit(0)
_, status = os.waitpid(pid, 0)
b = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
say(status=status, before=before, after=ledger(), driver=driver_count(), seen=total - free)
''', capped("4g"))
    for key, value in got.items():
        record_property(key, value)
    assert got["status"] == 0
    assert got["after"] >= got["before"] + 100 * MiB - 2 * MiB, got
    assert abs(got["driver"] - got["seen"]) <= 4 * MiB, got
