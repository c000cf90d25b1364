"""The memory cap by the driver's own count: contexts, modules, pools, VMM and graph memory,
on the simulated GPU with realistic context costs, in a "container" whose PIDs are not the ones
the driver (NVML) names it by (HAMI_SIM_PID_OFFSET)."""
import subprocess
import textwrap

import pytest

from hami_sim.gpu.state import STATE_FILE, device_status, read_state

MiB = 1 << 20
CAP = 1024 * MiB

# The child's own helpers: a spin kernel (module memory on first launch) and JSON lines.
KERNEL = '''
import threading
def spin_once():
    module = ok(cu.cuModuleLoadData(b"spin"))
    f = ok(cu.cuModuleGetFunction(module, b"spin"))
    ok(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, ((1000,), (ctypes.c_uint64,)), 0))

def fill(sizes=(64, 2)):
    held = []
    for chunk in sizes:
        while True:
            err, p = cu.cuMemAlloc(chunk * MiB)
            if err != cu.CUresult.CUDA_SUCCESS:
                break
            held.append(p)
    return held
'''


@pytest.fixture
def container(shim):
    """The shim fixture with a 500 MiB context and a PID namespace offset."""
    shim.env = dict(shim.env, HAMI_SIM_CTX_OVERHEAD="500m", HAMI_SIM_MODULE_MEM="8m",
                    HAMI_SIM_PID_OFFSET="100000")
    return shim


def driver_count(shim, pid, device=0):
    """What the simulated driver counts for `pid` on a device (the host's view)."""
    status = device_status(read_state(shim.tmp / "sim" / STATE_FILE))[device]
    return sum(p.used_bytes for p in status.processes if p.pid == pid)


def hold(shim, code, limit="1024m"):
    """Runs `code` under the shim; it ends by saying something and waiting for a line on stdin.
    Returns (what it said, the driver's count for it then)."""
    proc = shim.watch(KERNEL + textwrap.dedent(code) + "\nsys.stdin.readline()\n", limit=limit,
                      stdin=subprocess.PIPE)
    try:
        said = shim.next_line(proc)
    except AssertionError:
        proc.kill()
        raise AssertionError(proc.stderr.read()[-3000:]) from None
    count = driver_count(shim, said["pid"])
    said["ledger"] = shim.usage().devices[0].used
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    return said, count


def test_the_cap_holds_by_the_drivers_count_with_context_and_modules(container):
    said, count = hold(container, '''
        ctx = context(0)
        spin_once()
        held = fill()
        free, total = ok(cu.cuMemGetInfo())
        say(pid=os.getpid(), held=len(held), total=total, used=total - free)
    ''')
    # the old shim let the process allocate its full 1024 MiB on top of the 500 MiB context
    assert count <= CAP, f"driver counts {count / MiB} MiB at a 1024 MiB cap"
    assert count >= CAP - 2 * MiB, f"refused early: driver counts {count / MiB} MiB"
    assert said["total"] == CAP
    assert abs(said["used"] - count) <= 2 * MiB  # the container sees the driver's count


def test_nvml_in_the_container_shows_its_processes_and_true_use(container):
    said, count = hold(container, '''
        ctx = context(0)
        p = ok(cu.cuMemAlloc(100 * MiB))
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        say(pid=os.getpid(), procs=[[q.pid, q.usedGpuMemory] for q in procs],
            total=mem.total, used=mem.used)
    ''')
    assert said["procs"] == [[said["pid"], count]]  # its own PID, the driver's figure
    assert count >= 600 * MiB  # context (500 MiB) and the allocation
    assert said["total"] == CAP and said["used"] == count


def test_vmm_memory_counts_until_its_last_unmap(container):
    said, _ = hold(container, '''
        ctx = context(0)
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = 0
        size = 256 * MiB
        h = ok(cu.cuMemCreate(size, prop, 0))
        va = ok(cu.cuMemAddressReserve(size, 0, 0, 0))
        ok(cu.cuMemMap(va, size, 0, h, 0))
        ok(cu.cuMemRelease(h))                 # still mapped: the driver keeps the memory
        err, p = cu.cuMemAlloc(400 * MiB)      # 500 + 256 + 400 > 1024
        mapped_refusal = name(err)
        ok(cu.cuMemUnmap(va, size))            # now it is gone
        err2, p2 = cu.cuMemAlloc(400 * MiB)
        say(pid=os.getpid(), mapped=mapped_refusal, after=name(err2))
    ''')
    assert said["mapped"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert said["after"] == "CUDA_SUCCESS"


def test_a_refused_async_allocation_leaves_the_ledger_within_the_cap(container):
    said, count = hold(container, '''
        ctx = context(0)
        s = ok(cu.cuStreamCreate(0))
        a = ok(cu.cuMemAllocAsync(400 * MiB, s))
        err, b = cu.cuMemAllocAsync(200 * MiB, s)   # 500 + 400 + 200 > 1024
        say(pid=os.getpid(), refused=name(err))
    ''')
    assert said["refused"] == "CUDA_ERROR_OUT_OF_MEMORY"
    # read before any synchronize or cuMemGetInfo could have put it right
    assert said["ledger"] <= CAP, f"ledger {said['ledger'] / MiB} MiB after the refusal"
    assert count <= CAP


GRAPH = '''
    ctx = context(0)
    module = ok(cu.cuModuleLoadData(b"spin"))
    f = ok(cu.cuModuleGetFunction(module, b"spin"))
    s = ok(cu.cuStreamCreate(0))
    warm = ok(cu.cuMemAllocAsync(8 * MiB, s)); ok(cu.cuMemFreeAsync(warm, s))
    ok(cu.cuStreamSynchronize(s))          # the shim now knows the pool
    stop = threading.Event(); seen = []
    def other():                           # another thread asks for memory figures
        ok(cu.cuCtxSetCurrent(ctx))
        while not stop.is_set():
            seen.append(name(cu.cuMemGetInfo()))
    t = threading.Thread(target=other); t.start()
    ok(cu.cuStreamBeginCapture(s, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_{mode}))
    ok(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, ((1000,), (ctypes.c_uint64,)), 0))
    p = ok(cu.cuMemAllocAsync(64 * MiB, s))
    ok(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, ((1000,), (ctypes.c_uint64,)), 0))
    ok(cu.cuMemFreeAsync(p, s))
    import time; time.sleep(0.05)
    end = cu.cuStreamEndCapture(s)
    stop.set(); t.join()
    launched = None
    if name(end) == "CUDA_SUCCESS":
        g = ok(cu.cuGraphInstantiate(end[1], 0))
        launched = name(cu.cuGraphLaunch(g, s))
        ok(cu.cuStreamSynchronize(s))
    free, total = ok(cu.cuMemGetInfo())
    say(pid=os.getpid(), end=name(end), launched=launched, other=sorted(set(seen)),
        used=total - free)
'''


@pytest.mark.parametrize("mode", ["GLOBAL", "THREAD_LOCAL", "RELAXED"])
def test_graph_capture_works_under_the_shim_in_every_mode(container, mode):
    said, count = hold(container, GRAPH.replace("{mode}", mode))
    # the old shim read pool attributes inside cuMemAllocAsync and cuMemGetInfo during the
    # capture: the simulated driver (like a real one) then invalidates it
    assert said["end"] == "CUDA_SUCCESS", said
    assert said["launched"] == "CUDA_SUCCESS"
    assert said["other"] == ["CUDA_SUCCESS"]
    # the graph's 64 MiB memory node is counted once the graph ran
    assert said["used"] >= 500 * MiB + 64 * MiB and count <= CAP
    assert abs(said["used"] - count) <= 2 * MiB


def test_a_second_context_that_cannot_fit_is_refused_before_it_exists(container):
    first = container.watch(KERNEL + textwrap.dedent('''
        ctx = context(0)
        p = ok(cu.cuMemAlloc(300 * MiB))
        say(pid=os.getpid())
        sys.stdin.readline()
    '''), limit="1024m", stdin=subprocess.PIPE)
    container.next_line(first)
    # the first context taught the container what a context costs (500 MiB): another one
    # would take it to 500 + 300 + 500 MiB, so the second process is refused its context
    out, _, _ = container.run('''
        ok(cu.cuInit(0))
        err, ctx = cu.cuCtxCreate(None, 0, ok(cu.cuDeviceGet(0)))
        say(pid=os.getpid(), context=name(err))
    ''', limit="1024m")
    status = device_status(read_state(container.tmp / "sim" / STATE_FILE))[0]
    first.stdin.write("\n")
    first.stdin.flush()
    assert first.wait(timeout=30) == 0
    assert out[0]["context"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert sum(p.used_bytes for p in status.processes) <= CAP


def test_every_kind_of_memory_together_stays_within_the_cap_at_the_models_defaults(shim):
    # no HAMI_SIM_CTX_OVERHEAD / HAMI_SIM_MODULE_MEM: the A100's own context cost and module
    # memory; then VMM (released while mapped), a stream-ordered pool allocation, a launched
    # graph's memory node, and plain allocations until refused, all against one 1024 MiB cap
    env = {k: v for k, v in shim.env.items()
           if k not in ("HAMI_SIM_CTX_OVERHEAD", "HAMI_SIM_MODULE_MEM")}
    shim.env = dict(env, HAMI_SIM_PID_OFFSET="100000")
    said, count = hold(shim, '''
        ctx = context(0)
        spin_once()
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = 0
        h = ok(cu.cuMemCreate(128 * MiB, prop, 0))
        va = ok(cu.cuMemAddressReserve(128 * MiB, 0, 0, 0))
        ok(cu.cuMemMap(va, 128 * MiB, 0, h, 0))
        ok(cu.cuMemRelease(h))
        s = ok(cu.cuStreamCreate(0))
        pooled = ok(cu.cuMemAllocAsync(128 * MiB, s))
        ok(cu.cuStreamSynchronize(s))
        ok(cu.cuStreamBeginCapture(s, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
        p = ok(cu.cuMemAllocAsync(64 * MiB, s))
        ok(cu.cuMemFreeAsync(p, s))
        g = ok(cu.cuGraphInstantiate(ok(cu.cuStreamEndCapture(s)), 0))
        ok(cu.cuGraphLaunch(g, s))
        ok(cu.cuStreamSynchronize(s))
        before_fill = used()
        held = fill()
        free, total = ok(cu.cuMemGetInfo())
        say(pid=os.getpid(), held=len(held), before_fill=before_fill, used=total - free)
    ''')
    # the A100's 430 MiB context, 8 MiB of module, 128 + 128 + 64 MiB: the rest is filled
    assert said["before_fill"] >= 430 * MiB + 8 * MiB + 320 * MiB, said
    assert CAP - 2 * MiB <= count <= CAP, f"driver counts {count / MiB} MiB at a 1024 MiB cap"
    assert abs(said["used"] - count) <= 2 * MiB
