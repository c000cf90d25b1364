"""PyTorch on the GPU of this place, with and without the shim: what it sees of the device, data
round trips, kernels launched (computed results checked on a real GPU only), what
torch.cuda.mem_get_info reports inside a container (its cap, its processes' use), and
torch.multiprocessing workers (spawn and fork) drawing on one container's limit.

Only the standard library and pytest here; PyTorch runs in children (conftest.child)."""
import json
import subprocess

import pytest

from gpuhelpers import child

MiB = 1 << 20

SEES = r'''
import json, torch, pynvml
from cuda.bindings import driver as cu
p = torch.cuda.get_device_properties(0)
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
cu.cuInit(0)
err, sms = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0)
x = torch.arange(1 << 20, dtype=torch.float32)
g = x.to("cuda")
y = (g * 2 + 1)                         # an elementwise kernel
m = torch.randn(512, 512, device="cuda") @ torch.randn(512, 512, device="cuda")  # cuBLAS
torch.cuda.synchronize()
print(json.dumps(dict(available=torch.cuda.is_available(), count=torch.cuda.device_count(),
    name=p.name, total=p.total_memory, sms=p.multi_processor_count, cc=[p.major, p.minor],
    nvml_name=pynvml.nvmlDeviceGetName(h), nvml_total=pynvml.nvmlDeviceGetMemoryInfo(h).total,
    driver_sms=sms, round_trip=bool(torch.equal(g.cpu(), x)), shapes=[list(y.shape), list(m.shape)])))
'''

COMPUTES = r'''
import json, torch
x = torch.arange(1 << 16, dtype=torch.float32, device="cuda")
a = torch.randn(256, 256, device="cuda", dtype=torch.float64)
print(json.dumps(dict(elementwise=bool(torch.equal((x * 2 + 1).cpu(), torch.arange(1 << 16) * 2. + 1)),
    matmul=bool(torch.allclose((a @ torch.eye(256, device="cuda", dtype=torch.float64)).cpu(), a.cpu())))))
'''


def run(env, script, timeout=300, path=None):
    """Runs `script` (or the file at `path`) in a child; its last line as JSON."""
    argv = child(env, str(path)) if path else child(env, "-c", script)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def container(gpu_env, libvgpu, tmp_path):
    """A container's environment: the shim preloaded, a memory cap, its own shared file."""
    def make(cap="2g", name="box", **extra):
        return dict(gpu_env, LD_PRELOAD=str(libvgpu), CUDA_DEVICE_MEMORY_LIMIT=cap,
                    CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / f"{name}.cache"), **extra)
    return make


def test_pytorch_sees_the_device_and_moves_data(gpu_env):
    got = run(gpu_env, SEES)
    assert got["available"] and got["count"] >= 1
    assert got["name"] == got["nvml_name"] and got["total"] == got["nvml_total"] > 0
    assert got["sms"] == got["driver_sms"] > 0 and got["cc"][0] >= 7
    assert got["round_trip"], "a tensor copied to the device and back comes back unchanged"
    assert got["shapes"] == [[1 << 20], [512, 512]]


def test_pytorch_under_the_shim_sees_the_cap(container):
    got = run(container("3g"), SEES)
    assert got["total"] == got["nvml_total"] == 3 << 30
    assert got["round_trip"]


@pytest.mark.computes_results
def test_kernels_compute_what_they_should(gpu_env):
    assert run(gpu_env, COMPUTES) == {"elementwise": True, "matmul": True}


HOLD = r'''
import json, os, sys, torch
x = torch.empty(int(os.environ["HOLD"]), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
print(json.dumps({"used": total - free, "total": total}), flush=True)
sys.stdin.readline()
'''

LOOK = r'''
import json, torch
torch.cuda.init()
torch.empty(1, device="cuda")
free, total = torch.cuda.mem_get_info()
print(json.dumps({"used": total - free, "total": total}))
'''


def test_mem_get_info_reports_the_cap_and_the_containers_use(container):
    """torch.cuda.mem_get_info inside a container: the cap as total, the container's use as
    used (the context included), and a second process sees the first one's use too."""
    env = container("4g")
    holder = subprocess.Popen(child(env, "-c", HOLD), env=dict(env, HOLD=str(700 * MiB)),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(holder.stdout.readline())
        second = run(env, LOOK)
    finally:
        holder.kill()
        holder.wait()
    assert first["total"] == second["total"] == 4 << 30
    assert 700 * MiB + 100 * MiB <= first["used"] < 4 << 30, first  # its tensor and context
    # the second sees the holder's use and its own context beside it
    assert second["used"] >= first["used"] + 100 * MiB, (first, second)


WORKERS = r'''
import json, os, sys, torch
import torch.multiprocessing as mp

MiB = 1 << 20

def work(name, first_done, second_done, results):
    if name == "second":
        first_done.wait(120)
    try:
        held = torch.empty(1200 * MiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        big = "ok"
    except torch.cuda.OutOfMemoryError:
        big = "oom"
    small = "ok"
    try:
        torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        small = "oom"
    results.put((name, big, small))
    if name == "first":
        first_done.set()
        second_done.wait(120)
    else:
        second_done.set()

if __name__ == "__main__":
    ctx = mp.get_context(os.environ["START"])
    first_done, second_done, results = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=work, args=(n, first_done, second_done, results))
             for n in ("first", "second")]
    for p in procs:
        p.start()
    got = dict((n, [b, s]) for n, b, s in (results.get(timeout=180) for _ in procs))
    for p in procs:
        p.join(60)
    print(json.dumps(dict(got, codes=[p.exitcode for p in procs])))
'''


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_multiprocessing_workers_share_one_limit(container, tmp_path, start):
    """Two torch.multiprocessing workers of one container under a 2.5 GiB cap: the first
    holds 1200 MiB, so the second's 1200 MiB do not fit beside it and its contexts, and 100
    MiB still do (the parent uses no CUDA before it forks, as PyTorch requires)."""
    script = tmp_path / "workers.py"
    script.write_text(WORKERS)
    env = container("2560m", START=start)
    got = run(env, None, path=script)
    assert got == {"first": ["ok", "ok"], "second": ["oom", "ok"], "codes": [0, 0]}, got
