"""What a real driver does that the simulator used to ignore (issue 17): context and module
memory, NVML keyed by host PIDs, stream-ordered frees at stream progress, the graph memory
pool, the three capture modes, and NVML as older clients call it."""
import pytest

MiB = 1 << 20


def test_contexts_cost_their_models_default_and_modules_load_at_first_launch(make_sim):
    sim = make_sim("4g/8/NVIDIA A100-SXM4-40GB,8g/16/NVIDIA H200,2g/4/Tesla T4")
    env = {k: v for k, v in sim.env.items()
           if k not in ("HAMI_SIM_CTX_OVERHEAD", "HAMI_SIM_MODULE_MEM")}  # the defaults
    out, _ = sim.run('''
        ok(cu.cuInit(0))
        sizes = []
        for dev in range(3):
            ctx = ok(cu.cuCtxCreate(None, 0, ok(cu.cuDeviceGet(dev))))
            sizes.append(used())
            if dev == 0:
                f = spin_function()
                loaded = used()                      # loading is lazy: nothing yet
                spin(f, 1000)
                sizes += [loaded, used()]
        say(sizes=sizes)
    ''', env=env)
    a100, loaded, launched, h200, t4 = out[0]["sizes"]
    assert (a100, h200, t4) == (430 * MiB, 520 * MiB, 300 * MiB)
    assert loaded == a100 and launched == a100 + 8 * MiB


def test_nvml_names_processes_by_host_pid(sim):
    env = dict(sim.env, HAMI_SIM_PID_OFFSET="100000")
    out, _ = sim.run('''
        ctx = context(0)
        p = ok(cu.cuMemAlloc(3 * MiB + 1))
        import pynvml
        pynvml.nvmlInit()
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0))
        say(pid=os.getpid(), listed=[[q.pid, q.usedGpuMemory] for q in procs])
    '''.replace("MiB", str(MiB)), env=env)
    assert out[0]["listed"] == [[out[0]["pid"] + 100000, 4 * MiB]]  # in whole pages


def test_unversioned_nvml_entry_points_and_epoch_samples(sim):
    out, _ = sim.run('''
        ctx = context(0)
        f = spin_function(); spin(f, 2_000_000)
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        assert nvml.nvmlInit() == 0
        count, h = ctypes.c_uint(0), ctypes.c_void_p()
        assert nvml.nvmlDeviceGetCount(ctypes.byref(count)) == 0
        assert nvml.nvmlDeviceGetHandleByIndex(0, ctypes.byref(h)) == 0
        class V1(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
        infos, n = (V1 * 4)(), ctypes.c_uint(4)
        rc = nvml.nvmlDeviceGetComputeRunningProcesses(h, ctypes.byref(n), infos)
        import pynvml
        pynvml.nvmlInit()
        since = int(time.time() * 1e6) - 5_000_000          # epoch microseconds
        samples = pynvml.nvmlDeviceGetProcessUtilization(pynvml.nvmlDeviceGetHandleByIndex(0),
                                                         since)
        say(count=count.value, rc=rc, n=n.value, first=[infos[0].pid, infos[0].usedGpuMemory],
            pid=os.getpid(), stamps=[s.timeStamp for s in samples], now=int(time.time() * 1e6))
    ''')
    got = out[0]
    assert got["count"] == 2 and got["rc"] == 0 and got["n"] == 1
    assert got["first"] == [got["pid"], 0]
    assert got["stamps"] and all(got["now"] - 5_000_000 < s <= got["now"] for s in got["stamps"])


def test_stream_ordered_frees_return_memory_when_the_stream_gets_there(sim):
    out, _ = sim.run('''
        ctx = context(0)
        f = spin_function()
        s = ok(cu.cuStreamCreate(0))
        pool = ok(cu.cuDeviceGetDefaultMemPool(0))
        USED = cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT
        p = ok(cu.cuMemAllocAsync(64 * 1024**2, s))
        spin(f, 300_000_000, s)                       # the stream is busy for 300 ms
        ok(cu.cuMemFreeAsync(p, s))
        ok(cu.cuMemPoolTrimTo(pool, 0))               # nothing to give back yet
        pending = int(ok(cu.cuMemPoolGetAttribute(pool, USED)))
        ok(cu.cuStreamSynchronize(s))
        say(pending=pending, after=int(ok(cu.cuMemPoolGetAttribute(pool, USED))), used=used())
    ''')
    assert out == [{"pending": 64 * MiB, "after": 0, "used": 0}]


CAPTURE = '''
    ctx = context(0)
    f = spin_function()
    s = ok(cu.cuStreamCreate(0))
    {setup}
    ok(cu.cuStreamBeginCapture(s, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_{mode}))
    spin(f, 1000, s)
    import threading
    calls = {{}}
    def call(where):
        ok(cu.cuCtxSetCurrent(ctx))
        {exchange}
        calls[where] = error_name({call})
    call("capturing thread")
    t = threading.Thread(target=call, args=("other thread",)); t.start(); t.join()
    end = cu.cuStreamEndCapture(s)
    say(calls=calls, end=error_name(end))
'''

UNSAFE = {
    "alloc": "cu.cuMemAlloc(1024)",
    "pool attribute": "cu.cuMemPoolGetAttribute(pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_"
                      "RESERVED_MEM_CURRENT)",
    "legacy sync": "cu.cuStreamSynchronize(cu.CUstream(1))",
    "event query": "cu.cuEventQuery(ev)",
}
SETUP = ("pool = ok(cu.cuDeviceGetDefaultMemPool(0)); ev = ok(cu.cuEventCreate(0)); "
         "ok(cu.cuEventRecord(ev, s))")
BAD = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"


@pytest.mark.parametrize("what", sorted(UNSAFE))
@pytest.mark.parametrize("mode, capturing, other, end", [
    ("GLOBAL", BAD, BAD, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    ("THREAD_LOCAL", BAD, "CUDA_SUCCESS", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    ("RELAXED", "CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_SUCCESS")])
def test_capture_modes_prohibit_unsafe_calls_and_invalidate(sim, what, mode, capturing, other,
                                                            end):
    script = CAPTURE.format(setup=SETUP, mode=mode, exchange="", call=UNSAFE[what])
    out, _ = sim.run(script)
    assert out == [{"calls": {"capturing thread": capturing, "other thread": other},
                    "end": end}]


def test_a_relaxed_thread_may_call_anything_during_a_global_capture(sim):
    exchange = ("ok(cu.cuThreadExchangeStreamCaptureMode("
                "cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))")
    out, _ = sim.run(CAPTURE.format(setup=SETUP, mode="GLOBAL", exchange=exchange,
                                    call=UNSAFE["alloc"]))
    assert out == [{"calls": {"capturing thread": "CUDA_SUCCESS", "other thread": "CUDA_SUCCESS"},
                    "end": "CUDA_SUCCESS"}]


def test_graph_memory_comes_from_the_graph_pool_at_launch(sim):
    out, _ = sim.run('''
        ctx = context(0)
        s = ok(cu.cuStreamCreate(0))
        RES = cu.CUgraphMem_attribute.CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT
        ok(cu.cuStreamBeginCapture(s, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
        p = ok(cu.cuMemAllocAsync(100 * 1024**2, s))
        ok(cu.cuMemFreeAsync(p, s))
        g = ok(cu.cuStreamEndCapture(s))
        captured = used()
        e = ok(cu.cuGraphInstantiate(g, 0))
        ok(cu.cuGraphLaunch(e, s)); ok(cu.cuStreamSynchronize(s))
        launched, pool = used(), int(ok(cu.cuDeviceGetGraphMemAttribute(0, RES)))
        ok(cu.cuDeviceGraphMemTrim(0))
        say(captured=captured, launched=launched, pool=pool, trimmed=used())
    ''')
    assert out == [{"captured": 0, "launched": 100 * MiB, "pool": 100 * MiB, "trimmed": 0}]
