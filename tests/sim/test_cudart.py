"""NVIDIA's CUDA runtime (libcudart 12 and 13 from PyPI, unchanged) on the simulated driver:
it starts (export tables, the driver's integrity answer, cuGetProcAddress), allocates and
copies, and runs a program's device code registered as nvcc registers it (a fat binary built
by hami_sim.gpu.fatbin, as a compiled program embeds it): kernels found by their mangled names,
launched and timed, globals copied to and from, code chosen per SM version, LZ4 payloads."""
import glob
import json
import os
import sys

import pytest

from hami_sim.gpu.fatbin import Global, Image, Kernel, cubin, fatbin

RUNTIMES = {
    "12": "nvidia/cuda_runtime/lib/libcudart.so.12",
    "13": "nvidia/cu13/lib/libcudart.so.13",
}


def runtime_path(major: str) -> str:
    """The runtime from the test extra's wheel (nvidia-cuda-runtime(-cu12))."""
    for prefix in {sys.prefix, sys.base_prefix}:
        found = glob.glob(f"{prefix}/lib/python3*/site-packages/{RUNTIMES[major]}")
        if found:
            return found[0]
    pytest.fail(f"libcudart {major} is missing: `make install` installs the test extra "
                "(nvidia-cuda-runtime, nvidia-cuda-runtime-cu12)")


KERNEL = "_Z10hami_probePfmi"  # hami_probe(float *, unsigned long, int)

PROGRAM = r'''
import ctypes, json, os
from hami_sim.gpu.fatbin import Global, Image, Kernel, cubin, fatbin

rt = ctypes.CDLL(os.environ["CUDART"])
rt.__cudaRegisterFatBinary.restype = ctypes.c_void_p
rt.__cudaRegisterFatBinary.argtypes = [ctypes.c_void_p]
rt.__cudaRegisterFunction.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] + [ctypes.c_void_p] * 5
rt.__cudaRegisterVar.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_size_t,
                                                         ctypes.c_int, ctypes.c_int]
rt.__cudaRegisterFatBinaryEnd.argtypes = [ctypes.c_void_p]

class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

class Wrapper(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_int), ("version", ctypes.c_int), ("data", ctypes.c_void_p),
                ("other", ctypes.c_void_p)]

rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_void_p]

def code(call):
    return int(call)

kernel = os.environ["KERNEL"]
images = [Image(int(sm), cubin([Kernel(kernel, (8, 8, 4), regs=40)],
                               [Global("g_table", bytes(range(64)))]),
                lz4=os.environ.get("LZ4") == "1")
          for sm in os.environ["SMS"].split(",")]
blob = ctypes.create_string_buffer(fatbin(images))
wrapper = Wrapper(0x466243B1, 1, ctypes.addressof(blob), None)
stub_buf = ctypes.create_string_buffer(1)      # the host-side handle of the kernel
table_buf = ctypes.create_string_buffer(64)    # the host shadow of g_table
stub = ctypes.c_void_p(ctypes.addressof(stub_buf))
table = ctypes.c_void_p(ctypes.addressof(table_buf))
handle = rt.__cudaRegisterFatBinary(ctypes.byref(wrapper))
# the runtime keeps these pointers (nvcc passes string literals): they must stay alive
lookup_name = ctypes.create_string_buffer(os.environ.get("LOOKUP", kernel).encode())
kernel_name = ctypes.create_string_buffer(kernel.encode())
var_name = ctypes.create_string_buffer(b"g_table")
rt.__cudaRegisterFunction(handle, stub, lookup_name, kernel_name, -1, None, None, None, None, None)
rt.__cudaRegisterVar(handle, table, var_name, var_name, 0, 64, 1, 0)
rt.__cudaRegisterFatBinaryEnd(handle)

out = {}
n = ctypes.c_int(-1)
out["count"] = (code(rt.cudaGetDeviceCount(ctypes.byref(n))), n.value)
v = ctypes.c_int()
rt.cudaDriverGetVersion(ctypes.byref(v)); out["driver"] = v.value
rt.cudaRuntimeGetVersion(ctypes.byref(v)); out["runtime"] = v.value
attrs = {}
for name, attr in (("sms", 16), ("major", 75), ("minor", 76), ("warp", 10)):
    rt.cudaDeviceGetAttribute(ctypes.byref(v), attr, 0)
    attrs[name] = v.value
out["attrs"] = attrs
free, total = ctypes.c_size_t(), ctypes.c_size_t()
out["meminfo"] = (code(rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))),
                  free.value, total.value)
p = ctypes.c_void_p()
size = 8 << 20
out["malloc"] = code(rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)))
src = bytes(range(256)) * (size // 256)
back = ctypes.create_string_buffer(size)
rt.cudaMemcpy(p, src, ctypes.c_size_t(size), 1)
rt.cudaMemcpy(back, p, ctypes.c_size_t(size), 2)
out["round_trip"] = back.raw == src
rt.cudaMemset(p, 7, ctypes.c_size_t(16))
rt.cudaMemcpy(back, p, ctypes.c_size_t(16), 2)
out["memset"] = back.raw[:16] == b"\x07" * 16

a, b, c = ctypes.c_void_p(p.value), ctypes.c_uint64(1 << 20), ctypes.c_int(3)
args = (ctypes.c_void_p * 3)(ctypes.addressof(a), ctypes.addressof(b), ctypes.addressof(c))
start, end = ctypes.c_void_p(), ctypes.c_void_p()
rt.cudaEventCreate(ctypes.byref(start)); rt.cudaEventCreate(ctypes.byref(end))
rt.cudaEventRecord(start, None)
out["launch"] = code(rt.cudaLaunchKernel(stub, Dim3(4096, 1, 1), Dim3(256, 1, 1),
                                         args, 0, None))
rt.cudaEventRecord(end, None)
out["sync"] = code(rt.cudaDeviceSynchronize())
ms = ctypes.c_float()
rt.cudaEventElapsedTime(ctypes.byref(ms), start, end)
out["kernel_ms"] = ms.value
out["too_big_block"] = code(rt.cudaLaunchKernel(stub, Dim3(1, 1, 1),
                                                Dim3(2048, 1, 1), args, 0, None))
rt.cudaGetLastError()
attr = ctypes.create_string_buffer(256)
out["func_attrs"] = code(rt.cudaFuncGetAttributes(attr, stub))
out["regs"], out["max_threads"] = (int.from_bytes(attr.raw[28:32], "little"),
                                   int.from_bytes(attr.raw[24:28], "little"))
mine = bytes(range(100, 164))
out["to_symbol"] = code(rt.cudaMemcpyToSymbol(table, mine, ctypes.c_size_t(64),
                                              ctypes.c_size_t(0), 1))
back2 = ctypes.create_string_buffer(64)
rt.cudaMemcpyFromSymbol(back2, table, ctypes.c_size_t(64), ctypes.c_size_t(0), 2)
out["symbol_round_trip"] = back2.raw == mine
stream = ctypes.c_void_p()
rt.cudaStreamCreate(ctypes.byref(stream))
q = ctypes.c_void_p()
out["malloc_async"] = (code(rt.cudaMallocAsync(ctypes.byref(q), ctypes.c_size_t(1 << 20), stream)),
                       code(rt.cudaFreeAsync(q, stream)), code(rt.cudaStreamSynchronize(stream)))
out["free"] = code(rt.cudaFree(p))
print(json.dumps(out), flush=True)
'''


def run_program(sim, major, **env):
    child_env = dict(sim.env, CUDART=runtime_path(major), KERNEL=KERNEL, SMS="80")
    child_env.update({k: str(v) for k, v in env.items()})
    out, _ = sim.run(PROGRAM, env=child_env, timeout=60)
    return out[-1]


@pytest.mark.parametrize("major", ["12", "13"])
def test_the_runtime_starts_allocates_copies_and_runs_registered_kernels(make_sim, major):
    sim = make_sim("40g/108/NVIDIA A100-SXM4-40GB,15g/40/Tesla T4")
    got = run_program(sim, major)
    assert got["count"] == [0, 2]
    assert got["driver"] == 13000 and got["runtime"] // 1000 == int(major)
    assert got["attrs"] == {"sms": 108, "major": 8, "minor": 0, "warp": 32}
    assert got["meminfo"][0] == 0 and got["meminfo"][2] == 40 << 30
    assert got["malloc"] == 0 and got["round_trip"] and got["memset"]
    assert (got["launch"], got["sync"]) == (0, 0)
    # 4096 blocks of 256 threads at 40 registers: 6 blocks per SM, 7 waves of 10 us
    assert 0.06 <= got["kernel_ms"] < 5, got
    assert got["too_big_block"] != 0  # 2048 threads: a real GPU refuses the launch too
    assert (got["func_attrs"], got["regs"], got["max_threads"]) == (0, 40, 1024)
    assert got["to_symbol"] == 0 and got["symbol_round_trip"]
    assert got["malloc_async"] == [0, 0, 0] and got["free"] == 0


def test_lz4_compressed_code_loads(make_sim):
    got = run_program(make_sim("40g/108/NVIDIA A100-SXM4-40GB"), "13", LZ4=1, SMS="75,80")
    assert (got["launch"], got["sync"], got["regs"]) == (0, 0, 40), got


def test_no_code_for_the_device_is_refused_as_on_a_real_gpu(make_sim):
    """Cubins run only on devices of their major version at or above their minor one: code
    built for sm_80 fails on a T4 (sm_75) with cudaErrorNoKernelImageForDevice (209) and on
    an H100 (sm_90), and runs on an A10 (sm_86)."""
    t4 = run_program(make_sim("15g/40/Tesla T4", name="t4"), "13", SMS="80")
    assert t4["launch"] == 209, t4
    h100 = run_program(make_sim("80g/132/NVIDIA H100 80GB HBM3", name="h100"), "13", SMS="80")
    assert h100["launch"] == 209, h100
    a10 = run_program(make_sim("24g/72/NVIDIA A10", name="a10"), "13", SMS="75,80")
    assert a10["launch"] == 0, a10


def test_a_kernel_the_code_lacks_is_not_found(make_sim):
    """The runtime looks kernels up by name: a name missing from the cubin fails the launch
    (a real driver answers CUDA_ERROR_NOT_FOUND), it is not silently accepted."""
    got = run_program(make_sim("40g/108/NVIDIA A100-SXM4-40GB"), "13",
                      LOOKUP="_Z9not_therev")
    assert got["launch"] != 0 and got["func_attrs"] != 0, got
