"""The three ways into the driver all lead through the shim: direct linking (LD_PRELOAD),
dlopen + dlsym, and cuGetProcAddress with versions and the per-thread-stream flag; the shim
exports exactly its hook list, and every hooked CUDA symbol is a row of the versioned table."""
import json
import subprocess
import textwrap

from tests_shim_common import ROOT, hooked_symbols, table_symbols

MiB = 1 << 20


def test_the_library_exports_exactly_the_hook_list():
    lib = ROOT / "hami_node/shim/lib/libvgpu.so"
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines()}
    hooks = hooked_symbols()
    assert exported == set(hooks["cuda"] + hooks["nvml"]) | {"dlsym"}
    assert set(hooks["cuda"]) <= table_symbols()


def test_direct_linking_is_intercepted(shim, harness):
    out, _, _ = shim.run(cmd=[str(harness), "direct", str(2048 * MiB)])
    assert out == [{"alloc": 2, "info": 0, "free": 1024 * MiB, "total": 1024 * MiB,
                    "device_total": 1024 * MiB, "total_rc": 0}]


def test_a_library_constructor_can_call_the_driver_first(shim, tmp_path):
    source = tmp_path / "ctor.c"
    source.write_text(textwrap.dedent('''
        #include <stdio.h>
        #include "hami_cuda.h"
        __attribute__((constructor)) static void early(void)
        {
            CUcontext ctx; CUdeviceptr p; size_t free_b, total_b;
            cuInit(0);
            cuDevicePrimaryCtxRetain(&ctx, 0);
            cuCtxSetCurrent(ctx);
            int refused = cuMemAlloc_v2(&p, (size_t)2 << 30);
            cuMemGetInfo_v2(&free_b, &total_b);
            fprintf(stderr, "ctor refused=%d total=%zu\\n", refused, total_b);
        }
    '''))
    lib = tmp_path / "libctor.so"
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{ROOT}/c/include", str(source), "-o", str(lib),
                    f"-L{ROOT}/hami_sim/lib", "-lcuda"], check=True, timeout=60)
    env = dict(shim.env, LD_PRELOAD=str(lib))  # hami-run puts libvgpu.so in front
    _, err, _ = shim.run(cmd=["true"], env=env)
    assert f"ctor refused=2 total={1024 * MiB}" in err


DLSYM = '''
    lib = ctypes.CDLL("libcuda.so.1")
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    shim = ctypes.CDLL(os.environ["LD_PRELOAD"].split(":")[0])
    def addr(library, symbol):
        return ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
    hooked = ["cuMemAlloc_v2", "cuMemFree_v2", "cuLaunchKernel_ptsz", "cuGetProcAddress_v2"]
    say(hooked=[addr(lib, s) == addr(shim, s) for s in hooked],
        nvml=addr(nvml, "nvmlDeviceGetMemoryInfo_v2") == addr(shim, "nvmlDeviceGetMemoryInfo_v2"),
        passed=addr(lib, "cuMemcpyHtoD_v2") is not None and not hasattr(shim, "cuMemcpyHtoD_v2"))
    lib.cuInit(0)
    ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
    lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0); lib.cuCtxSetCurrent(ctx)
    say(big=lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(2 << 30)),
        small=lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)))
'''


def test_dlopen_and_dlsym_get_the_hooks(shim):
    out, _, _ = shim.run(DLSYM)
    assert out == [{"hooked": [True] * 4, "nvml": True, "passed": True},
                   {"big": 2, "small": 0}]


PROC_ADDRESS = '''
    lib = ctypes.CDLL("libcuda.so.1")
    shim = ctypes.CDLL(os.environ["LD_PRELOAD"].split(":")[0])
    def addr(library, symbol):
        return ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
    v2 = lib.cuGetProcAddress_v2
    v2.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                   ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
    v1 = lib.cuGetProcAddress
    v1.argtypes = v2.argtypes[:4]
    def lookup(api, version, flags=0, legacy=False):
        fn, status = ctypes.c_void_p(), ctypes.c_int(-1)
        rc = (v1(api.encode(), ctypes.byref(fn), version, flags) if legacy else
              v2(api.encode(), ctypes.byref(fn), version, flags, ctypes.byref(status)))
        return rc, fn.value, status.value
    cases = json.loads(os.environ["CASES"])
    results = []
    for api, version, flags, legacy, owner, symbol in cases:
        rc, fn, status = lookup(api, version, flags, legacy)
        want = addr(shim if owner == "shim" else lib, symbol) if symbol else None
        results.append([api, version, rc, fn == want, status])
    say(results=results)
'''

# api, version, flags, legacy entry point, who must answer, the symbol whose address it is
CASES = [
    ["cuCtxCreate", 3020, 0, False, "shim", "cuCtxCreate_v2"],
    ["cuCtxCreate", 11040, 0, False, "shim", "cuCtxCreate_v3"],
    ["cuCtxCreate", 12050, 0, False, "shim", "cuCtxCreate_v4"],
    ["cuMemAlloc", 12000, 0, False, "shim", "cuMemAlloc_v2"],
    ["cuMemAlloc", 12000, 0, True, "shim", "cuMemAlloc_v2"],
    ["cuLaunchKernel", 12000, 0, False, "shim", "cuLaunchKernel"],
    ["cuLaunchKernel", 12000, 2, False, "shim", "cuLaunchKernel_ptsz"],
    ["cuMemAllocAsync", 12000, 2, False, "shim", "cuMemAllocAsync_ptsz"],
    ["cuStreamSynchronize", 12000, 2, False, "shim", "cuStreamSynchronize_ptsz"],
    ["cuGraphLaunch", 12000, 2, False, "shim", "cuGraphLaunch_ptsz"],
    ["cuGetProcAddress", 12000, 0, False, "shim", "cuGetProcAddress_v2"],
    ["cuMemcpyHtoD", 12000, 2, False, "lib", "cuMemcpyHtoD_v2_ptds"],
    ["cuMemcpyHtoD", 12000, 0, False, "lib", "cuMemcpyHtoD_v2"],
    ["cuMemAllocAsync", 11000, 0, False, "lib", None],
    ["cuNoSuchThing", 13000, 0, False, "lib", None],
]


def test_cu_get_proc_address_answers_the_hook_for_each_version_and_stream_flavour(shim):
    env = dict(shim.env, CASES=json.dumps(CASES))
    out, _, _ = shim.run(PROC_ADDRESS, env=env)
    got = {(api, version, i): (rc, same, status)
           for i, (api, version, rc, same, status) in enumerate(out[0]["results"])}
    want = {}
    for i, (api, version, flags, legacy, owner, symbol) in enumerate(CASES):
        status = -1 if legacy else (0 if symbol else (2 if version == 11000 else 1))
        want[(api, version, i)] = (0 if symbol else 500, True, status)
    assert got == want



CTYPES_PATHS = '''
    from ctypes import byref, c_int, c_size_t, c_uint, c_uint64, c_void_p, Structure
    lib = ctypes.CDLL("libcuda.so.1")
    class Location(Structure):
        _fields_ = [("type", c_int), ("id", c_int)]
    class Prop(Structure):
        _fields_ = [("type", c_int), ("handles", c_int), ("location", Location),
                    ("win32", c_void_p), ("flags", ctypes.c_uint8 * 8)]
    class ArrayDesc(Structure):
        _fields_ = [("width", c_size_t), ("height", c_size_t), ("format", c_int),
                    ("channels", c_uint)]
    def used():
        free, total = c_size_t(), c_size_t()
        assert lib.cuMemGetInfo_v2(byref(free), byref(total)) == 0
        return total.value - free.value
    assert lib.cuInit(0) == 0
    ctx, p, pitch, h, arr = c_void_p(), c_uint64(), c_size_t(), c_uint64(), c_void_p()
    assert lib.cuDevicePrimaryCtxRetain(byref(ctx), 0) == 0 and lib.cuCtxSetCurrent(ctx) == 0
    steps = {}
    assert lib.cuMemAllocPitch_v2(byref(p), byref(pitch), c_size_t(1000), c_size_t(1000), 4) == 0
    steps["pitch"] = used()
    assert lib.cuMemAllocManaged(byref(p), c_size_t(3 * MiB), 1) == 0
    steps["managed"] = used()
    prop = Prop(1, 0, Location(1, 0))
    assert lib.cuMemCreate(byref(h), c_size_t(64 * MiB), byref(prop), c_uint64(0)) == 0
    steps["handle"] = used()
    assert lib.cuArrayCreate_v2(byref(arr), byref(ArrayDesc(1024, 1024, 0x20, 1))) == 0
    steps["array"] = used()
    assert lib.cuMemAllocAsync(byref(p), c_size_t(MiB), None) == 0
    steps["pool"] = used()
    steps["over"] = lib.cuMemCreate(byref(h), c_size_t(1024 * MiB), byref(prop), c_uint64(0))
    say(**steps)
'''


def test_every_counted_path_through_a_ctypes_harness(shim):
    out, _, _ = shim.run(CTYPES_PATHS)
    pitched = 2 * MiB  # 1000 KiB pitched, counted as the driver does: in whole 2 MiB pages
    assert out == [{"pitch": pitched, "managed": pitched + 4 * MiB,
                    "handle": pitched + 68 * MiB, "array": pitched + 72 * MiB,
                    "pool": pitched + 104 * MiB, "over": 2}]


def test_dlsym_hands_out_every_hook_the_driver_has(shim):
    names = hooked_symbols()["cuda"] + hooked_symbols()["nvml"]
    out, _, _ = shim.run(f'''
        lib, nvml = ctypes.CDLL("libcuda.so.1"), ctypes.CDLL("libnvidia-ml.so.1")
        shim = ctypes.CDLL(os.environ["LD_PRELOAD"].split(":")[0])
        def addr(library, symbol):
            return ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
        say(wrong=[s for s in {names!r}
                   if addr(nvml if s.startswith("nvml") else lib, s) != addr(shim, s)])
    ''')
    assert out == [{"wrong": []}]
