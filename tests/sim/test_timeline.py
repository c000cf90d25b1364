"""Kernels and time: one device timeline in wall-clock time, events, graphs, utilization."""
import json
import subprocess


def test_twenty_5ms_spins_take_100ms_while_enqueueing_is_fast(sim):
    out, _ = sim.run('''
        ctx = context(0)
        f, stream = spin_function(), ok(cu.cuStreamCreate(0))
        spin(f, 1000, stream); ok(cu.cuStreamSynchronize(stream))      # warm-up
        t0 = time.perf_counter()
        for _ in range(20):
            spin(f, 5_000_000, stream)
        t1 = time.perf_counter()
        ok(cu.cuStreamSynchronize(stream))
        t2 = time.perf_counter()
        say(enqueue_ms=(t1 - t0) * 1e3, total_ms=(t2 - t0) * 1e3)
    ''')
    assert 90 <= out[0]["total_ms"] <= 110
    assert out[0]["enqueue_ms"] < 20


def test_blocks_beyond_the_sm_count_run_in_waves(sim):
    out, _ = sim.run('''
        ctx = context(0)                                    # 8 SMs
        f, start, end = spin_function(), ok(cu.cuEventCreate(0)), ok(cu.cuEventCreate(0))
        stream = ok(cu.cuStreamCreate(0))
        times = []
        for blocks in (1, 8, 9, 24):
            spin(f, 50_000_000, stream)       # queued work first: the events' times are exact
            ok(cu.cuEventRecord(start, stream))
            spin(f, 2_000_000, stream, blocks=blocks)
            ok(cu.cuEventRecord(end, stream))
            ok(cu.cuEventSynchronize(end))
            times.append(ok(cu.cuEventElapsedTime(start, end)))
        library = ok(cu.cuLibraryLoadData(b"x", None, None, 0, None, None, 0))
        kernel = ok(cu.cuKernelGetFunction(ok(cu.cuLibraryGetKernel(library, b"spin"))))
        spin(f, 50_000_000, stream)
        ok(cu.cuEventRecord(start, stream)); spin(kernel, 3_000_000, stream)
        ok(cu.cuEventRecord(end, stream)); ok(cu.cuEventSynchronize(end))
        times.append(ok(cu.cuEventElapsedTime(start, end)))
        say(ms=times, missing=error_name(cu.cuModuleGetFunction(
            ok(cu.cuModuleLoadData(b"x")), b"matmul")))
    ''')
    assert out[0]["ms"] == [2.0, 2.0, 4.0, 6.0, 3.0]  # the last through cuLibrary*
    assert out[0]["missing"] == "CUDA_ERROR_NOT_FOUND"


def test_queries_report_pending_work_and_launch_variants_queue_too(sim):
    out, _ = sim.run('''
        ctx = context(0)
        f, stream, ev = spin_function(), ok(cu.cuStreamCreate(0)), ok(cu.cuEventCreate(0))
        spin(f, 50_000_000, stream)
        ok(cu.cuEventRecord(ev, stream))
        busy = [error_name(cu.cuStreamQuery(stream)), error_name(cu.cuEventQuery(ev))]
        ok(cu.cuEventSynchronize(ev))
        idle = [error_name(cu.cuStreamQuery(stream)), error_name(cu.cuEventQuery(ev))]
        config = cu.CUlaunchConfig()
        config.gridDimX = config.gridDimY = config.gridDimZ = 1
        config.blockDimX = config.blockDimY = config.blockDimZ = 1
        config.hStream = stream
        t0 = time.perf_counter()
        ok(cu.cuLaunchKernelEx(config, f, ((10_000_000,), (ctypes.c_uint64,)), 0))
        ok(cu.cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, stream,
                                        ((10_000_000,), (ctypes.c_uint64,))))
        ok(cu.cuCtxSynchronize())
        say(busy=busy, idle=idle, ms=(time.perf_counter() - t0) * 1e3)
    ''')
    assert out[0]["busy"] == ["CUDA_ERROR_NOT_READY"] * 2
    assert out[0]["idle"] == ["CUDA_SUCCESS"] * 2
    assert 18 <= out[0]["ms"] <= 40


def test_captured_graph_replays_its_kernels(sim):
    out, _ = sim.run('''
        ctx = context(0)
        f, stream = spin_function(), ok(cu.cuStreamCreate(0))
        ok(cu.cuStreamBeginCapture(stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
        capturing = ok(cu.cuStreamIsCapturing(stream)).name
        t0 = time.perf_counter()
        for _ in range(3):
            spin(f, 10_000_000, stream)
        graph = ok(cu.cuStreamEndCapture(stream))
        ok(cu.cuStreamSynchronize(stream))
        capture_ms = (time.perf_counter() - t0) * 1e3
        exe = ok(cu.cuGraphInstantiate(graph, 0))
        start, end = ok(cu.cuEventCreate(0)), ok(cu.cuEventCreate(0))
        spin(f, 50_000_000, stream)           # queued work first: the events' times are exact
        ok(cu.cuEventRecord(start, stream)); ok(cu.cuGraphLaunch(exe, stream))
        ok(cu.cuGraphLaunch(exe, stream)); ok(cu.cuEventRecord(end, stream))
        ok(cu.cuEventSynchronize(end))
        say(capturing=capturing, capture_ms=capture_ms, graph_ms=ok(cu.cuEventElapsedTime(start, end)),
            after=ok(cu.cuStreamIsCapturing(stream)).name)
        ok(cu.cuGraphExecDestroy(exe)); ok(cu.cuGraphDestroy(graph))
    ''')
    assert out[0]["capturing"] == "CU_STREAM_CAPTURE_STATUS_ACTIVE"
    assert out[0]["after"] == "CU_STREAM_CAPTURE_STATUS_NONE"
    assert out[0]["capture_ms"] < 25          # captured kernels do not run
    assert out[0]["graph_ms"] == 60.0         # two launches of three 10 ms kernels


def test_two_half_busy_processes_show_50_percent_each_and_100_for_the_device(sim):
    # Blocking-sync contexts: spinning waits would keep both cores of a small machine busy.
    worker = '''
        ok(cu.cuInit(0))
        ctx = ok(cu.cuCtxCreate(None, 4, ok(cu.cuDeviceGet(0))))  # CU_CTX_SCHED_BLOCKING_SYNC
        f, stream = spin_function(), ok(cu.cuStreamCreate(0))
        say(ready=True)
        end = time.monotonic() + 3.0  # outlives the NVML reader on a loaded machine
        while time.monotonic() < end:        # always one 10 ms kernel queued or running
            spin(f, 10_000_000, stream)
            ok(cu.cuStreamSynchronize(stream))
    '''
    workers = [sim.spawn(worker) for _ in range(2)]
    for w in workers:
        assert json.loads(w.stdout.readline()) == {"ready": True}
    out, _ = sim.run('''
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        time.sleep(1.2)
        samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
        say(gpu=pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
            procs={s.pid: s.smUtil for s in samples})
    ''')
    for w in workers:
        w.wait(timeout=10)
    got = out[0]
    assert got["gpu"] >= 90
    assert sorted(int(p) for p in got["procs"]) == sorted(w.pid for w in workers)
    for util in got["procs"].values():
        assert 35 <= util <= 65


def test_utilization_of_many_short_kernels_is_the_busy_time(sim):
    """A 200 us kernel, a synchronisation and 200 us of host work, 2,500 times a second:
    NVML's utilization is the device's busy time over the last second (the kernels' own count
    says how much), however many kernels that took; a ring of the last 1,024 intervals read
    20 % here."""
    out, _ = sim.run('''
        import pynvml
        ok(cu.cuInit(0))
        ctx = ok(cu.cuCtxCreate(None, 0, ok(cu.cuDeviceGet(0))))
        f, stream = spin_function(), ok(cu.cuStreamCreate(0))
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        t0 = time.monotonic()
        kernels = []
        while time.monotonic() < t0 + 2.2:
            spin(f, 200_000, stream)
            ok(cu.cuStreamSynchronize(stream))
            kernels.append(time.monotonic())
            host = time.monotonic()
            while time.monotonic() < host + 0.0002:
                pass
        now = time.monotonic()
        in_last_second = sum(1 for t in kernels if t > now - 1.0)
        samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
        say(gpu=pynvml.nvmlDeviceGetUtilizationRates(h).gpu, own=in_last_second * 0.02,
            proc=[s.smUtil for s in samples])
    ''', timeout=60)
    got = out[0]
    assert got["own"] > 25, got  # the loop kept the device at least a quarter busy
    assert abs(got["gpu"] - got["own"]) <= 6, got
    assert len(got["proc"]) == 1 and abs(got["proc"][0] - got["own"]) <= 6, got
