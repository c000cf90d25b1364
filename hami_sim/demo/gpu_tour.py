"""A short tour of the simulated GPUs, seen through cuda-python and pynvml in a child process:
the devices as NVML lists them, a timed spin-kernel run, and an allocation past capacity."""
import argparse
import subprocess
import sys
import tempfile
import time
from typing import List

from hami_sim.demo.workloads import cuda_ok
from hami_sim.gpu import SimGpuError, sim_env

DEMO_GPUS = "16g/108/NVIDIA A100-SXM4-40GB,15g/40/Tesla T4"


def _show_devices() -> None:
    import pynvml
    pynvml.nvmlInit()
    print(f"NVML: driver {pynvml.nvmlSystemGetDriverVersion()}, "
          f"CUDA {pynvml.nvmlSystemGetCudaDriverVersion()}")
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
        print(f"  GPU {i}: {pynvml.nvmlDeviceGetName(h)}  {pynvml.nvmlDeviceGetUUID(h)}  "
              f"{mem.total / 2**30:.0f} GiB  compute {major}.{minor}")
    pynvml.nvmlShutdown()


def _spin_run(kernels: int, ms: int) -> None:
    import ctypes
    from cuda.bindings import driver as cu
    module = cuda_ok(cu.cuModuleLoadData(b"the simulator accepts any image"))
    spin = cuda_ok(cu.cuModuleGetFunction(module, b"spin"))
    stream = cuda_ok(cu.cuStreamCreate(0))
    t0 = time.perf_counter()
    for _ in range(kernels):
        cuda_ok(cu.cuLaunchKernel(spin, 108, 1, 1, 1, 1, 1, 0, stream,
                                  ((ms * 1_000_000,), (ctypes.c_uint64,)), 0))
    queued = time.perf_counter()
    cuda_ok(cu.cuStreamSynchronize(stream))
    done = time.perf_counter()
    print(f"spin: {kernels} kernels of {ms} ms (108 blocks = 1 wave on 108 SMs) queued in "
          f"{(queued - t0) * 1e3:.2f} ms, finished after {(done - t0) * 1e3:.1f} ms "
          f"(expected {kernels * ms} ms)")


def _past_capacity() -> None:
    from cuda.bindings import driver as cu
    free, total = cuda_ok(cu.cuMemGetInfo())
    held = cuda_ok(cu.cuMemAlloc(12 << 30))
    print(f"memory: allocated 12 GiB of {total / 2**30:.0f} GiB")
    err, _ = cu.cuMemAlloc(8 << 30)
    print(f"memory: another 8 GiB -> {err.name}")
    cuda_ok(cu.cuMemFree(held))


def child() -> int:
    """The tour itself; runs in a process that sees the simulated driver."""
    from cuda.bindings import driver as cu
    _show_devices()
    cuda_ok(cu.cuInit(0))
    ctx = cuda_ok(cu.cuCtxCreate(None, 0, cuda_ok(cu.cuDeviceGet(0))))
    _spin_run(kernels=20, ms=5)
    _past_capacity()
    cuda_ok(cu.cuCtxDestroy(ctx))
    return 0


def main(argv: List[str]) -> int:
    """Runs the tour in a child process against freshly configured simulated GPUs."""
    p = argparse.ArgumentParser(prog="hami-sim demo", description=__doc__)
    p.add_argument("--gpus", default=DEMO_GPUS, help=f"HAMI_SIM_GPUS (default {DEMO_GPUS!r})")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child()
    with tempfile.TemporaryDirectory(prefix="hami-sim-demo-") as state:
        try:
            env = sim_env(gpus=args.gpus, state_dir=state)
        except SimGpuError as e:
            print(f"hami-sim demo: {e}", file=sys.stderr)
            return 2
        print(f"simulated GPUs: HAMI_SIM_GPUS={args.gpus!r}")
        cmd = [sys.executable, "-m", "hami_sim.demo.gpu_tour", "--child"]
        return subprocess.run(cmd, env=env, timeout=120).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
