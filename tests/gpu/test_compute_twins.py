"""Real-GPU twins of issue 18's simulated cases (tests/shim/test_compute_truth.py), short:
kernels whose cost is not what their signature suggests, a 20 us kernel + sync loop, thousands
of shapes, a 10/90 split with each container's charged time against its kernels' isolated
time, and what timing events cost on the device. Each test records its figures with
record_property (tests/gpu/run.sh collects them).

Children run PyTorch with libvgpu.so preloaded; each starts up, says it is ready, measures
once every child of the test is ready (gpuhelpers.run_together) and prints one JSON line. Only the standard
library and pytest here (conftest.py chooses the real GPU, or the simulated one without it).
"""
import json
import subprocess
import sys
from pathlib import Path

from gpuhelpers import child, run_together

from test_compute_pytorch import container  # noqa: F401 (the fixture: shim, file, limit)

ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import ctypes, json, os, sys, time, torch
mode, seconds = sys.argv[1], float(sys.argv[2])
torch.cuda.init()
x = torch.ones(1, device="cuda")

def measure_cycles_per_us():
    """torch.cuda._sleep cycles per microsecond on this GPU, timed with events. Only an
    unlimited process can time it so: under a limit, the start event may be stamped on an idle
    device while the limiter holds the kernel back on the host."""
    torch.cuda._sleep(1000); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); torch.cuda._sleep(1_000_000); e.record(); e.synchronize()
    return 1_000_000 / (s.elapsed_time(e) * 1000)

def cycles_for(us):
    """torch.cuda._sleep cycles that take about `us` microseconds (CYCLES_PER_US, measured by
    an unlimited child of the same test)."""
    return max(1, int(float(os.environ["CYCLES_PER_US"]) * us))

def ready():
    """Start-up is done: wait for the test's go (every child of the test ready); the
    CLOCK_MONOTONIC time the test chose for the start."""
    print("ready", flush=True)
    return float(sys.stdin.readline())

out = {}
if mode == "calibrate":
    out["cycles_per_us"] = measure_cycles_per_us()
elif mode in ("mixed", "busy"):          # 19 x ~20 us and 1 x ~5 ms, same kernel and grid
    short, long_ = cycles_for(20), cycles_for(5000)
    # mixed: four rounds per sync, so a process waiting for a CPU after each sync on a loaded
    # machine still keeps its share of the device; busy: one kernel per sync
    pattern = ([short] * 19 + [long_]) * 4 if mode == "mixed" else [long_]
    busy_us = sum(20 if c == short else 5000 for c in pattern)
    torch.cuda._sleep(short); torch.cuda.synchronize()
    ready()
    n, end = 0, time.monotonic() + seconds
    t0 = time.monotonic()
    while time.monotonic() < end:
        for c in pattern:
            torch.cuda._sleep(c)
        torch.cuda.synchronize()
        n += 1
    out["seconds"] = time.monotonic() - t0
    out["share"] = n * busy_us / 1e6 / out["seconds"]
elif mode == "syncloop":               # a ~20 us kernel, then synchronize, again and again
    # Children of one test take turns of SLOT seconds (the k-th of m takes every m-th turn):
    # neither shares the device with the other, and both see the same host load.
    c = cycles_for(20)
    torch.cuda._sleep(c); torch.cuda.synchronize()
    start = ready()
    turn, turns, slot = int(os.environ.get("TURN", 0)), int(os.environ.get("TURNS", 1)), 0.5
    n, busy = 0, 0.0
    for i in range(turn, int(seconds / slot), turns):
        begin, end = start + i * slot, start + (i + 1) * slot
        time.sleep(max(0.0, begin - time.monotonic()))
        t0 = time.monotonic()
        while time.monotonic() < end:
            torch.cuda._sleep(c); torch.cuda.synchronize(); n += 1
        busy += time.monotonic() - t0
    out["share"] = n * 20e-6 / busy
elif mode == "shapes":                 # 6,000 distinct torch.add shapes
    ts = [torch.ones(1 + i, device="cuda") for i in range(6000)]
    torch.cuda.synchronize()
    ready()
    t0 = time.perf_counter()
    for t in ts:
        torch.add(t, 1)
    torch.cuda.synchronize()
    out["us_per_launch"] = (time.perf_counter() - t0) / len(ts) * 1e6
elif mode == "events":                 # cuEventRecord / cuEventQuery through the driver
    cu = ctypes.CDLL("libcuda.so.1")
    ev = ctypes.c_void_p()
    assert cu.cuEventCreate(ctypes.byref(ev), 2) == 0
    ready()
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        cu.cuEventRecord(ev, None)
    t1 = time.perf_counter()
    for _ in range(n):
        cu.cuEventQuery(ev)
    t2 = time.perf_counter()
    out.update(record_ns=(t1 - t0) / n * 1e9, query_ns=(t2 - t1) / n * 1e9)
print(json.dumps(out), flush=True)
'''


def calibrate(env):
    """torch.cuda._sleep's cycles per microsecond, timed by an unlimited child."""
    free = {k: v for k, v in env.items() if not k.startswith("CUDA_DEVICE_SM_LIMIT")}
    # a shared file of its own: a container's file keeps the limit of its first process
    free["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] + ".calib"
    kid = subprocess.run(child(free, "-c", CHILD, "calibrate", "0"), env=free,
                         capture_output=True, text=True, timeout=180)
    assert kid.returncode == 0, kid.stderr[-3000:]
    return json.loads(kid.stdout.strip().splitlines()[-1])["cycles_per_us"]


def run(envs, mode, seconds=4.0, at_go=lambda: None):
    """One child per environment, started together (`at_go()` runs when all are ready, as
    they are told to go); their JSON results."""
    if mode in ("mixed", "busy", "syncloop"):
        rate = str(calibrate(envs[0]))
        envs = [dict(env, CYCLES_PER_US=rate) for env in envs]

    def go(now):
        at_go()
        return str(now + 0.5)
    return run_together([(child(env, "-c", CHILD, mode, str(seconds)), env) for env in envs], go)


def test_mixed_20us_and_5ms_kernels_at_30_percent(container, record_property):
    (got,) = run([container("mixed", 30)], "mixed")
    record_property("mixed_share_pct", round(100 * got["share"], 2))
    assert 25 <= 100 * got["share"] <= 35, got


def test_20us_kernel_and_sync_loop_at_50_percent(container, record_property):
    free, limited = run([dict(container("free"), TURN="0", TURNS="2"),
                         dict(container("limited", 50), TURN="1", TURNS="2")],
                        "syncloop", seconds=8.0)
    record_property("syncloop_share_free_pct", round(100 * free["share"], 2))
    record_property("syncloop_share_limited_pct", round(100 * limited["share"], 2))
    assert 100 * limited["share"] <= 55, limited
    assert limited["share"] >= min(free["share"], 0.5) * 0.8, (free, limited)


def test_6000_shapes_at_limit_99_cost_at_most_1_5x(container, gpu_env, record_property):
    (bare,) = run([gpu_env], "shapes")
    (shim,) = run([container("shapes", 99)], "shapes")
    ratio = shim["us_per_launch"] / bare["us_per_launch"]
    record_property("shapes_us_per_launch_bare", round(bare["us_per_launch"], 2))
    record_property("shapes_us_per_launch_shim", round(shim["us_per_launch"], 2))
    assert ratio <= 1.5, (bare, shim)


def test_ten_ninety_split_charged_against_isolated_time(container, tmp_path, record_property):
    """Both saturate with ~5 ms kernels; each one's share from its own kernels' isolated
    durations, against the device time the limiter charged it over the same stretch. (The
    split itself is test_compute_pytorch's: a loop that syncs after every 5 ms kernel loses
    device time to a busy host, a PyTorch loop's queue does not.)"""
    sys.path.insert(0, str(ROOT))
    from hami_node.shim import read_usage  # the project's reader of the shared file

    def charged_ns():
        return [read_usage(tmp_path / f"{n}.cache").devices[0].sm_charged_ns
                for n in ("low", "high")]
    before = []
    low, high = run([container("low", 10), container("high", 90)], "busy", seconds=6.0,
                    at_go=lambda: before.extend(charged_ns()))
    charged = [100 * (after - start) / 1e9 / got["seconds"]
               for after, start, got in zip(charged_ns(), before, (low, high))]
    record_property("split_share_low_pct", round(100 * low["share"], 2))
    record_property("split_share_high_pct", round(100 * high["share"], 2))
    record_property("split_charged_pct", [round(c, 2) for c in charged])
    assert 8 <= 100 * low["share"] <= 12, (low, high)  # the light one runs, its 10 % +- 2
    assert abs(charged[0] - 100 * low["share"]) <= 0.1 * 100 * low["share"] + 1, (low, charged)
    # the saturating one too (charged ~70 % of the ~88 % it ran before anchor.c)
    assert abs(charged[1] - 100 * high["share"]) <= 0.1 * 100 * high["share"] + 1, (high, charged)


def test_event_record_and_query_cost_on_the_device(gpu_env, record_property):
    (got,) = run([gpu_env], "events")
    record_property("event_record_ns", round(got["record_ns"]))
    record_property("event_query_ns", round(got["query_ns"]))
    assert got["record_ns"] < 20000 and got["query_ns"] < 20000, got
