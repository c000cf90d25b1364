"""The demo's container workloads: `python3 -m hami_sim.demo.workloads MODE [options]`.

They use only cuda-python's driver API (cuda.bindings.driver), so the same command runs against
the simulated driver and, unchanged, in a container on a real GPU:

    oom      allocate in chunks until the driver refuses; report what was held and the error
    compute  keep the GPU busy with a spin kernel for a while; report the share of wall time
             its kernels took (what `nvidia.com/gpucores` should hold it to)
    info     report the device the container sees (name, memory, SMs)
    hold     hold some device memory until stopped (a pod to `kubectl exec` into)

Each prints human lines, then one JSON line `{"hami-demo": {...}}` that the demo reads.
The spin kernel is PTX that busy-waits on %globaltimer for its nanoseconds parameter; the
simulated driver accepts any module image and runs its `spin` kernel for that long.
Imports nothing but the standard library and cuda-python.
"""
import argparse
import ctypes
import json
import os
import sys
import time

RESULT_KEY = "hami-demo"
MIB = 1 << 20

# One block per SM spins until %globaltimer has advanced by `ns`: one wave of `ns` on a real
# GPU, and exactly what the simulated `spin` kernel costs with grid = SM count.
SPIN_PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 ns)
{
    .reg .pred %p;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
SPIN:
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p, %rd4, %rd1;
    @%p bra SPIN;
    ret;
}
\0"""


class CudaFailure(RuntimeError):
    """A CUDA call the workload needs failed."""


def cuda_ok(ret):
    """The value(s) of a cuda-python driver call's (error, *values) answer; CudaFailure
    naming the error when it is not CUDA_SUCCESS."""
    from cuda.bindings import driver as cu
    err, *rest = ret
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaFailure(err.name)
    return rest[0] if len(rest) == 1 else rest


def _context():
    """Initialises the driver and makes a context on device 0; (ctx, device)."""
    from cuda.bindings import driver as cu
    cuda_ok(cu.cuInit(0))
    if cuda_ok(cu.cuDeviceGetCount()) < 1:
        raise CudaFailure("no GPU is visible to this container")
    dev = cuda_ok(cu.cuDeviceGet(0))
    return cuda_ok(cu.cuCtxCreate(None, 0, dev)), dev


def _device_info(dev) -> dict:
    from cuda.bindings import driver as cu
    name = cuda_ok(cu.cuDeviceGetName(64, dev)).split(b"\0", 1)[0].decode()
    sms = cuda_ok(cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    free, total = cuda_ok(cu.cuMemGetInfo())
    return {"name": name, "sms": int(sms), "total_mib": total // MIB, "free_mib": free // MIB}


def oom(chunk_mib: int) -> dict:
    """Allocates chunk_mib at a time until refused; frees everything at the end."""
    from cuda.bindings import driver as cu
    ctx, dev = _context()
    info = _device_info(dev)
    print(f"device: {info['name']}, the container sees {info['total_mib']} MiB")
    held, error = [], None
    while error is None:
        err, ptr = cu.cuMemAlloc(chunk_mib * MIB)
        if err == cu.CUresult.CUDA_SUCCESS:
            held.append(ptr)
        else:
            error = err.name
    free, total = cuda_ok(cu.cuMemGetInfo())
    used_mib = (total - free) // MIB  # the driver's count: the context and modules too
    print(f"allocated {len(held)} x {chunk_mib} MiB = {len(held) * chunk_mib} MiB "
          f"({used_mib} MiB in use with the context), then the next {chunk_mib} MiB: {error}")
    for ptr in held:
        cuda_ok(cu.cuMemFree(ptr))
    cuda_ok(cu.cuCtxDestroy(ctx))
    return dict(info, held_mib=len(held) * chunk_mib, used_mib=used_mib, chunk_mib=chunk_mib,
                error=error)


def compute(seconds: float, kernel_ms: float, in_flight: int, hold_mib: int) -> dict:
    """Holds hold_mib of device memory and spins for `seconds` with `in_flight` kernels
    queued; the share of wall time the kernels took, as the workload itself sees it."""
    from cuda.bindings import driver as cu
    ctx, dev = _context()
    info = _device_info(dev)
    buffer = cuda_ok(cu.cuMemAlloc(hold_mib * MIB)) if hold_mib else None
    module = cuda_ok(cu.cuModuleLoadData(SPIN_PTX))
    spin = cuda_ok(cu.cuModuleGetFunction(module, b"spin"))
    stream = cuda_ok(cu.cuStreamCreate(0))
    ns = ctypes.c_uint64(int(kernel_ms * 1e6))
    params = (ctypes.c_void_p * 1)(ctypes.addressof(ns))
    events = []
    start = time.monotonic_ns()
    deadline = start + int(seconds * 1e9)
    kernels = 0
    while time.monotonic_ns() < deadline:
        cuda_ok(cu.cuLaunchKernel(spin, info["sms"], 1, 1, 1, 1, 1, 0, stream,
                                  ctypes.addressof(params), 0))
        kernels += 1
        done = cuda_ok(cu.cuEventCreate(0))
        cuda_ok(cu.cuEventRecord(done, stream))
        events.append(done)
        if len(events) >= in_flight:       # keep a few queued, never an unbounded backlog
            cuda_ok(cu.cuEventSynchronize(events[0]))
            cuda_ok(cu.cuEventDestroy(events.pop(0)))
    cuda_ok(cu.cuStreamSynchronize(stream))
    end = time.monotonic_ns()
    for e in events:
        cuda_ok(cu.cuEventDestroy(e))
    if buffer is not None:
        cuda_ok(cu.cuMemFree(buffer))
    cuda_ok(cu.cuCtxDestroy(ctx))
    busy_ns = kernels * ns.value
    share = 100.0 * busy_ns / (end - start)
    print(f"device: {info['name']}; {kernels} kernels of {kernel_ms:g} ms in "
          f"{(end - start) / 1e9:.2f} s: {share:.1f} % of the GPU's time")
    return dict(info, kernels=kernels, kernel_ms=kernel_ms, start_ns=start, end_ns=end,
                share=round(share, 2), held_mib=hold_mib)


def info() -> dict:
    """What the container sees."""
    from cuda.bindings import driver as cu
    ctx, dev = _context()
    result = _device_info(dev)
    result["count"] = cuda_ok(cu.cuDeviceGetCount())
    # Every visible device as the container sees it (its memory is its limit under the shim).
    result["devices"] = [{"name": cuda_ok(cu.cuDeviceGetName(64, d)).split(b"\0", 1)[0]
                          .decode(), "total_mib": cuda_ok(cu.cuDeviceTotalMem(d)) // MIB}
                         for d in (cuda_ok(cu.cuDeviceGet(i)) for i in range(result["count"]))]
    cuda_ok(cu.cuCtxDestroy(ctx))
    print(f"device 0 of {result['count']}: {result['name']}, {result['total_mib']} MiB, "
          f"{result['sms']} SMs")
    return result


def hold(mib: int, ready_file: str) -> None:
    """Allocates mib of device memory, says so (then touches ready_file, if given) and keeps
    it until the process is stopped."""
    from cuda.bindings import driver as cu
    ctx, dev = _context()
    info = _device_info(dev)
    cuda_ok(cu.cuMemAlloc(mib * MIB))
    print(f"device: {info['name']}, the container sees {info['total_mib']} MiB; holding "
          f"{mib} MiB until stopped", flush=True)
    if ready_file:
        open(ready_file, "w").close()
    while True:
        time.sleep(3600)


def main(argv=None) -> int:
    """Runs one workload and prints its JSON result line."""
    p = argparse.ArgumentParser(prog="python3 -m hami_sim.demo.workloads", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    o = sub.add_parser("oom", help="allocate until out of memory")
    o.add_argument("--chunk-mib", type=int, default=64)
    c = sub.add_parser("compute", help="keep the GPU busy with spin kernels")
    c.add_argument("--seconds", type=float, default=3.0)
    c.add_argument("--kernel-ms", type=float, default=4.0)
    c.add_argument("--in-flight", type=int, default=3)
    c.add_argument("--hold-mib", type=int, default=512, help="device memory to hold meanwhile")
    sub.add_parser("info", help="show the visible device")
    h = sub.add_parser("hold", help="hold device memory until stopped")
    h.add_argument("--mib", type=int, default=512)
    h.add_argument("--ready-file", default="", help="touched once the memory is held")
    args = p.parse_args(argv)
    try:
        if args.mode == "hold":
            hold(args.mib, args.ready_file)       # until the process is stopped
            return 0
        if args.mode == "oom":
            result = oom(args.chunk_mib)
        elif args.mode == "compute":
            result = compute(args.seconds, args.kernel_ms, args.in_flight, args.hold_mib)
        else:
            result = info()
    except CudaFailure as e:
        print(f"workload {args.mode}: CUDA call failed: {e}", file=sys.stderr)
        print(json.dumps({RESULT_KEY: {"mode": args.mode, "failed": str(e)}}), flush=True)
        return 1
    result["mode"], result["pid"] = args.mode, os.getpid()
    print(json.dumps({RESULT_KEY: result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
