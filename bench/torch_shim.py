"""PyTorch under the shim, on the simulated GPU (or a real one with --real): three figures.

1. Out of memory at the cap, per allocator backend (caching, expandable_segments:True,
   backend:cudaMallocAsync): PyTorch's allocated bytes and the driver's own count of the
   process (NVML: context and modules included) when the OutOfMemoryError came, against the
   cap (64 MiB chunks; the ratio driver/cap must stay <= 1).
2. The compute limit on PyTorch loops: a 4096 x 4096 FP32 matmul loop and a CUDA graph replay
   loop at a 30 % limit, their throughput against the same loop unlimited, in one run (the
   target: 0.30, the error in points).
3. What the shim costs a PyTorch training step (a small MLP: forward, backward, Adam) with a
   memory cap and no compute limit: steps per second with and without the shim, same run.

Children run PyTorch from the project's environment (`make torch`: .venv/torch) or, with
--python, any interpreter that has it.

usage: python bench/torch_shim.py [--real] [--python PY] [--seconds S] [--cap SIZE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import print_machine, ratio
from hami_node.shim import ShimSettings, shim_env
from hami_node.shim.sizes import parse_size

ROOT = Path(__file__).resolve().parents[1]

FILL = r'''
import json, os, pynvml, torch
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
def driver():
    return sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
               if p.pid == os.getpid())
held = []
try:
    while len(held) < 100000:
        held.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError:
    pass
print(json.dumps(dict(allocated=torch.cuda.memory_allocated(), driver=driver())))
'''

LOOP = r'''
import json, sys, time, torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 4096, device="cuda"); b, c = torch.randn_like(a), torch.empty_like(a)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        torch.mm(a, b, out=c)
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    for _ in range(10):
        torch.mm(a, b, out=c)
def rate(step, per, seconds):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0, n = time.monotonic(), 0
    while time.monotonic() < t0 + seconds:
        step(); step(); torch.cuda.synchronize(); n += 2 * per
    return n / (time.monotonic() - t0)
s = float(sys.argv[1])
print(json.dumps(dict(matmul=rate(lambda: torch.mm(a, b, out=c), 1, s), graph=rate(graph.replay, 10, s))))
'''

STEPS = r'''
import json, sys, time, torch
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(256, 512, device="cuda"), torch.randint(0, 10, (256,), device="cuda")
def step():
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
for _ in range(20):
    step()
torch.cuda.synchronize()
t0, n = time.monotonic(), 0
while time.monotonic() < t0 + float(sys.argv[1]):
    for _ in range(10):
        step()
    torch.cuda.synchronize(); n += 10
print(json.dumps(dict(steps=n / (time.monotonic() - t0))))
'''


def child(python, script, env, *args, timeout=600):
    done = subprocess.run([python, "-c", script, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode:
        raise SystemExit(f"child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def base_env(real: bool, state: Path) -> dict:
    """The GPU of this run: the real driver, or the simulator with the GPU tier's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_DEVICE", "HAMI_SIM"))}
    env.pop("LD_PRELOAD", None)
    if real:
        return env
    from hami_sim.gpu import sim_env  # the simulated GPU only without --real
    # 250 us per wave of blocks, as the GPU tier: PyTorch loops keep the device busy
    return dict(sim_env(gpus=["40g/108/NVIDIA A100-SXM4-40GB"], state_dir=state, base=env),
                HAMI_SIM_WAVE_NS="250000")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--real", action="store_true", help="the real GPU instead of the simulator")
    p.add_argument("--python", default=str(ROOT / ".venv/torch/bin/python"))
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--cap", default="2g")
    args = p.parse_args()
    cap = parse_size(args.cap, "--cap")
    print_machine()
    print(f"gpu: {'real' if args.real else 'simulated A100-SXM4-40GB'}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = base_env(args.real, tmp / "state")

        def boxed(name, **kw):
            return shim_env(ShimSettings(cache_path=str(tmp / f"{name}.cache"), **kw), base=env)

        print("\n1. out of memory at the cap, 64 MiB chunks")
        for conf in ("", "expandable_segments:True", "backend:cudaMallocAsync"):
            got = child(args.python, FILL, dict(boxed(f"fill{len(conf)}", memory_limit=cap),
                                                PYTORCH_CUDA_ALLOC_CONF=conf))
            label = conf or "caching"
            print(f"{label:26} allocated {got['allocated'] >> 20:5} MiB   driver's count "
                  f"{got['driver'] >> 20:5} MiB   cap {cap >> 20} MiB")
            ratio(f"oom_driver_vs_cap_{label.split(':')[0]}", got["driver"], cap,
                  "the driver's count at OOM", "the cap")
        print("\n2. the compute limit on PyTorch loops (30 %)")
        free = child(args.python, LOOP, boxed("free"), args.seconds)
        limited = child(args.python, LOOP, boxed("limited", sm_limit=30), args.seconds)
        for name in ("matmul", "graph"):
            r = ratio(f"limit30_{name}", limited[name], free[name], "/s at 30 %", "/s unlimited")
            print(f"{name}: {100 * r:.1f} % of unlimited, error {100 * r - 30:+.1f} points")
        print("\n3. the shim's cost on a training step (MLP 512-1024-10, batch 256, Adam)")
        bare = child(args.python, STEPS, env, args.seconds)
        shimmed = child(args.python, STEPS, boxed("steps", memory_limit=cap), args.seconds)
        ratio("steps_with_shim", shimmed["steps"], bare["steps"], "steps/s with the shim",
              "steps/s without")
    return 0


if __name__ == "__main__":
    sys.exit(main())
