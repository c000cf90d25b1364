"""The compute limit through `hami-run --gpu-cores` and cuda-python (which reaches every driver
function through cuGetProcAddress), stream capture, and refused values."""
from pathlib import Path

from hami_node.shim import lib_path
from hami_sim.gpu.load import Worker
from hami_sim.gpu.timeline import BusyRecorder

MS = 1_000_000

LOOP = '''
ctx = context(0)
module = ok(cu.cuModuleLoadData(b"spin"))
f = ok(cu.cuModuleGetFunction(module, b"spin"))
stream = ok(cu.cuStreamCreate(0))

def spin(ns, blocks=1):
    ok(cu.cuLaunchKernel(f, blocks, 1, 1, 1, 1, 1, 0, stream, ((ns,), (ctypes.c_uint64,)), 0))

# A loop of 1 ms kernels, ten per synchronisation: the achieved share comes from the
# simulator's timeline, read by the test.
t0 = time.monotonic_ns()
while time.monotonic_ns() < t0 + 2_700_000_000:
    for _ in range(10):
        spin(1_000_000)
    ok(cu.cuStreamSynchronize(stream))
say(pid=os.getpid(), start=t0 + 700_000_000, end=t0 + 2_700_000_000)

# Capture: ten 20 ms kernels whose cost the limiter already knows are recorded, not run,
# so capturing them must not wait for budget (at 30 % they would cost 670 ms of it). Two
# blocks (one wave on 8 SMs): another signature than the 1 ms kernels, so its own estimate.
for _ in range(2):
    spin(20_000_000, blocks=2)
ok(cu.cuStreamSynchronize(stream))
t1 = time.perf_counter()
ok(cu.cuStreamBeginCapture(stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
for _ in range(10):
    spin(20_000_000, blocks=2)
graph = ok(cu.cuStreamEndCapture(stream))
captured = time.perf_counter() - t1
# The captured launches taught the limiter nothing (they did not run): 20 ms kernels still
# cost 20 ms each.
t2 = time.perf_counter()
for _ in range(6):
    spin(20_000_000, blocks=2)
ok(cu.cuStreamSynchronize(stream))
after = time.perf_counter() - t2
exe = ok(cu.cuGraphInstantiate(graph, 0))
t3 = time.perf_counter()
for _ in range(3):
    ok(cu.cuGraphLaunch(exe, stream))
ok(cu.cuStreamSynchronize(stream))
graphs = time.perf_counter() - t3
# No launch waits for an earlier launch's measurement: replays launched before the first
# one was measured go on an estimate, and what they really cost is a debt the next launch
# repays.
t4 = time.perf_counter()
spin(1_000_000)
ok(cu.cuStreamSynchronize(stream))
say(capture_s=captured, after_s=after, graphs_s=graphs, debt_s=time.perf_counter() - t4)
'''


def test_hami_run_gpu_cores_limits_cuda_python_and_captures_are_free(shim):
    out, _, _ = shim.run(LOOP, limit=None, extra=["--gpu-cores", "30"], timeout=60)
    loop, graphs = out
    recorder = BusyRecorder(Path(shim.env["HAMI_SIM_STATE"]), [0])
    recorder.poll()
    share = 100 * recorder.share(0, [loop["pid"]], loop["start"], loop["end"])
    assert 27.5 <= share <= 32.5, share
    assert graphs["capture_s"] < 0.2, graphs
    # Three replays of 200 ms of work at 30 %: at least about 0.6 s / 0.3 of wall time,
    # less the bucket's burst (30 ms) and the first replay's, before or after them.
    assert graphs["graphs_s"] + graphs["debt_s"] >= 1.2, graphs
    assert graphs["after_s"] >= 0.3, graphs  # 120 ms of work at 30 %, less the burst


def test_a_malformed_limit_fails_closed_with_one_line(shim):
    env = dict(shim.env, CUDA_DEVICE_SM_LIMIT="30%", LD_PRELOAD=str(lib_path()),
               CUDA_DEVICE_MEMORY_SHARED_CACHE=str(shim.cache))
    worker = Worker("batch", 5, env)
    out, err = worker.proc.communicate(timeout=30)
    assert worker.proc.returncode == 3 and "cuInit failed: 800" in err, (out, err)
    lines = [line for line in err.splitlines() if line.startswith("hami-vgpu:")]
    assert len(lines) == 1 and "CUDA_DEVICE_SM_LIMIT='30%' is not a percentage" in lines[0]
