"""The compute limit with PyTorch: a matmul loop limited to 30 % runs at 30 % of its unlimited
throughput (+- 2 points), containers at 10 % and 90 % both saturating the GPU split the work
1:9 (within 10 %), and a CUDA graph replay loop is limited too.

Only the standard library and pytest here; PyTorch runs in children with libvgpu.so preloaded
(built with `make -C c` when missing). Each child starts up, says it is ready, and measures its
throughput itself, between two synchronisations inside an absolute CLOCK_MONOTONIC window the
test gives it once every child is ready, so that children measure the same stretch of time
however long their start-up took.
"""
import pytest

from gpuhelpers import child, run_together

SETTLE_S = 3.0  # after every child is ready: the loops run unmeasured (the limiter settles)
WINDOW_S = 4.0

LOOP = r'''
import json, os, sys, time, torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 4096, device="cuda")
b, c = torch.randn_like(a), torch.empty_like(a)

def mm():
    torch.mm(a, b, out=c)

side = torch.cuda.Stream()  # warm up off the capturing stream, as PyTorch asks
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        mm()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    for _ in range(10):
        mm()

def rate(step, per_step, start, end):
    """Matmuls per second done between the first synchronisation after `start` and the
    last one before `end` (work is queued asynchronously: only a sync says it is done). 40
    matmuls are queued per sync, so a process that waits for a CPU after each sync (a loaded
    machine) still keeps the device busy, as a training loop does."""
    while time.monotonic() < start:
        step()
        torch.cuda.synchronize()
    first = last = None
    done = 0
    while True:
        for _ in range(40 // per_step):
            step()
        torch.cuda.synchronize()
        done += 40
        now = time.monotonic()
        if first is None:
            first = (now, done)
        elif now < end:
            last = (now, done)
        else:
            break
    if last is None:
        sys.exit(f"{step} did not synchronise twice within the window: lengthen WINDOW_S")
    return (last[1] - first[1]) / (last[0] - first[0])

print("ready", flush=True)
out = {}
for phase in sys.stdin.readline().split(","):
    name, start, end = phase.split(":")
    step, per_step = (graph.replay, 10) if name == "graph" else (mm, 1)
    out[name] = rate(step, per_step, float(start), float(end))
print(json.dumps(out), flush=True)
'''


@pytest.fixture
def container(gpu_env, libvgpu, tmp_path):
    """The environment of a container: the shim preloaded, its own shared file, a limit."""
    def make(name, sm_limit=None):
        env = dict(gpu_env, LD_PRELOAD=str(libvgpu),
                   CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / f"{name}.cache"))
        if sm_limit is not None:
            env["CUDA_DEVICE_SM_LIMIT"] = str(sm_limit)
        return env
    return make


def phases(names):
    """The children's go line: one WINDOW_S window per phase, SETTLE_S after they are ready."""
    def go(now):
        start, parts = now + SETTLE_S, []
        for name in names:
            parts.append(f"{name}:{start}:{start + WINDOW_S}")
            start += WINDOW_S + 1
        return ",".join(parts)
    return go


def measure(envs, names):
    """One child per environment, measured together; their rates, in order."""
    return run_together([(child(env, "-c", LOOP), env) for env in envs], phases(names))


def test_matmul_and_graph_replay_run_at_30_percent_of_unlimited(container):
    # unlimited before and after the limited run, averaged: a host whose load drifts over
    # the minute (a busy CI machine) moves both halves of the ratio alike
    (before,) = measure([container("free")], ["matmul", "graph"])
    (limited,) = measure([container("limited", 30)], ["matmul", "graph"])
    (after,) = measure([container("free-after")], ["matmul", "graph"])
    free = {name: (before[name] + after[name]) / 2 for name in before}
    for name in ("matmul", "graph"):
        ratio = limited[name] / free[name]
        assert 0.28 <= ratio <= 0.32, (name, limited[name], before[name], after[name])


def test_ten_and_ninety_percent_split_the_work_one_to_nine(container):
    # On a loaded 2-core host the 10 % child may wait for a CPU after its syncs and fall
    # short (CI: 10.2 once); a second window tells that apart from a limiter that is off,
    # which misses in both.
    seen = []
    for attempt in range(2):
        low, high = measure([container(f"low{attempt}", 10), container(f"high{attempt}", 90)],
                            ["matmul"])
        seen.append((round(high["matmul"] / low["matmul"], 2), low, high))
        if 9 * 0.9 <= seen[-1][0] <= 9 * 1.1:
            break
    assert 9 * 0.9 <= seen[-1][0] <= 9 * 1.1, seen
