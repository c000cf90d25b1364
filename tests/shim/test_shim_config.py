"""The environment contract: the C shim and the Python side read sizes and variables the same
way, and a malformed value makes the shim fail closed with one line naming the variable."""
import subprocess

import pytest

from hami_node.shim import ShimConfigError, ShimSettings, parse_size
from tests_shim_common import ROOT

G, M, K = 1 << 30, 1 << 20, 1 << 10

# text -> bytes, or None when both parsers must refuse it
SIZES = [
    ("0", 0), ("1073741824", G), ("3000m", 3000 * M), ("3000M", 3000 * M), ("2g", 2 * G),
    ("2G", 2 * G), ("64k", 64 * K), ("64K", 64 * K), ("2GiB", 2 * G), ("2gib", 2 * G),
    ("512MiB", 512 * M), ("1KiB", K), ("007m", 7 * M), ("17179869183g", 17179869183 * G),
    ("18446744073709551615", (1 << 64) - 1),
    ("1gb", None), ("1GB", None), ("1.5g", None), ("1 g", None), (" 1g", None), ("1g ", None),
    ("-1", None), ("", None), ("g", None), ("1t", None), ("1TiB", None), ("0x10", None),
    ("1e9", None), ("garbage", None), ("17179869184g", None), ("18446744073709551616", None),
    ("1Gi", None), ("١٢", None),
]

PROBE = r'''
#include <stdio.h>
#include <stdint.h>
int vgpu_parse_size(const char *text, uint64_t *out);
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        uint64_t v = 0;
        if (vgpu_parse_size(argv[i], &v) == 0)
            printf("%llu\n", (unsigned long long)v);
        else
            printf("refused\n");
    }
    return 0;
}
'''


@pytest.fixture(scope="module")
def c_parse(tmp_path_factory):
    """The shim's own size parser (c/vgpu/env.c), compiled into a probe."""
    tmp = tmp_path_factory.mktemp("sizes")
    (tmp / "probe.c").write_text(PROBE)
    subprocess.run(["cc", "-std=gnu11", "-Wall", "-Werror", f"-I{ROOT}/c/include",
                    f"-I{ROOT}/c/vgpu", str(tmp / "probe.c"), str(ROOT / "c/vgpu/env.c"),
                    "-o", str(tmp / "probe")], check=True, timeout=60)

    def parse(texts):
        out = subprocess.run([str(tmp / "probe"), *texts], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        return [None if v == "refused" else int(v) for v in out[:len(texts)]]
    return parse


def python_parse(text):
    try:
        return parse_size(text)
    except ShimConfigError:
        return None


def test_c_and_python_read_every_size_alike(c_parse):
    texts = [t for t, _ in SIZES]
    assert c_parse(texts) == [v for _, v in SIZES]
    assert [python_parse(t) for t in texts] == [v for _, v in SIZES]


BAD = [
    ("CUDA_DEVICE_MEMORY_LIMIT", "1gb"), ("CUDA_DEVICE_MEMORY_LIMIT", "1.5g"),
    ("CUDA_DEVICE_MEMORY_LIMIT_1", "garbage"), ("CUDA_DEVICE_MEMORY_LIMIT_x", "1g"),
    ("CUDA_DEVICE_MEMORY_LIMIT_16", "1g"), ("CUDA_DEVICE_SM_LIMIT", "half"),
    ("CUDA_DEVICE_SM_LIMIT_0", "-5"), ("GPU_CORE_UTILIZATION_POLICY", "sometimes"),
    ("CUDA_TASK_PRIORITY", "high"), ("LIBCUDA_LOG_LEVEL", "9"),
    ("HAMI_VGPU_CONTEXT_OVERHEAD", "300mb"),
    ("HAMI_VGPU_DEVICE_A", "GPU-1,1gb,30"), ("HAMI_VGPU_DEVICE_A", "nouuid,1g,30"),
    ("HAMI_VGPU_DEVICE_A", "GPU-1,1g,half"), ("HAMI_VGPU_DEVICE_A", "GPU-1,1g"),
]


@pytest.mark.parametrize("name, value", BAD, ids=[f"{n}={v}" for n, v in BAD])
def test_a_bad_variable_fails_closed_with_one_line_naming_it(shim, harness, name, value):
    env = dict(shim.env, **{name: value})
    out, err, rc = shim.run(cmd=[str(harness), "startup"], env=env, limit=None, check=False)
    assert (out, rc) == ([{"error": "cuInit", "rc": 800}], 1)  # CUDA_ERROR_NOT_PERMITTED
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hami-vgpu: {name}") and value in lines[0]
    with pytest.raises(ShimConfigError, match=name):
        ShimSettings.from_env({name: value})


def test_after_refusing_every_later_call_fails_too(shim):
    env = dict(shim.env, CUDA_DEVICE_MEMORY_LIMIT="2gb")
    out, err, _ = shim.run('''
        import pynvml
        pynvml.nvmlInit()
        try:
            pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
            nvml = "answered"
        except pynvml.NVMLError as e:
            nvml = str(e)
        say(init=name(cu.cuInit(0)), count=name(cu.cuDeviceGetCount()),
            ctx=name(cu.cuDevicePrimaryCtxRetain(0)), alloc=name(cu.cuMemAlloc(1024)), nvml=nvml)
    ''', env=env, limit=None)
    assert out == [{"init": "CUDA_ERROR_NOT_PERMITTED", "count": "CUDA_ERROR_NOT_INITIALIZED",
                    "ctx": "CUDA_ERROR_NOT_PERMITTED", "alloc": "CUDA_ERROR_NOT_PERMITTED",
                    "nvml": "Insufficient Permissions"}]
    assert err.count("hami-vgpu:") == 1


def test_per_device_limits_and_the_nvml_view(shim):
    env = dict(shim.env, CUDA_DEVICE_MEMORY_LIMIT_1="512m")
    out, _, _ = shim.run('''
        import pynvml
        ok(cu.cuInit(0))
        totals = [ok(cu.cuDeviceTotalMem(ok(cu.cuDeviceGet(i)))) for i in range(2)]
        ctx = context(1)
        p = ok(cu.cuMemAlloc(100 * MiB))
        refused = name(cu.cuMemAlloc(500 * MiB))
        pynvml.nvmlInit()
        h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h[1])
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h[1], version=pynvml.nvmlMemory_v2)
        say(totals=totals, refused=refused, v1=[v1.total, v1.used, v1.free],
            v2=[v2.total, v2.used, v2.free, v2.reserved],
            physical=pynvml.nvmlDeviceGetMemoryInfo(h[0]).total)
    ''', env=env, limit=None)
    assert out == [{"totals": [4 * G, 512 * M], "refused": "CUDA_ERROR_OUT_OF_MEMORY",
                    "v1": [512 * M, 100 * M, 412 * M], "v2": [512 * M, 100 * M, 412 * M, 0],
                    "physical": 4 * G}]


def test_limits_by_uuid_win_over_ordinals_and_add_up(shim):
    uuids, _, _ = shim.run('''
        ok(cu.cuInit(0))
        say(uuids=["GPU-" + bytes(ok(cu.cuDeviceGetUuid(ok(cu.cuDeviceGet(i)))).bytes).hex()
                   for i in range(2)])
    ''', limit=None)
    raw = uuids[0]["uuids"][1]
    gpu1 = "-".join((raw[:12], raw[12:16], raw[16:20], raw[20:24], raw[24:]))
    # Two DRA devices (two shares of GPU 1 in one container) under their own tags; the ordinal
    # variable of the device plugin's form loses to them.
    env = dict(shim.env, CUDA_DEVICE_MEMORY_LIMIT_1="2g",
               HAMI_VGPU_DEVICE_claimA_0=f"{gpu1},256m,0",
               HAMI_VGPU_DEVICE_claimB_0=f"{gpu1},256m,0")
    out, _, _ = shim.run('''
        ok(cu.cuInit(0))
        totals = [ok(cu.cuDeviceTotalMem(ok(cu.cuDeviceGet(i)))) for i in range(2)]
        ctx = context(1)
        refused = name(cu.cuMemAlloc(600 * MiB))
        say(totals=totals, refused=refused)
    ''', env=env, limit=None)
    assert out == [{"totals": [4 * G, 512 * M], "refused": "CUDA_ERROR_OUT_OF_MEMORY"}]
    assert ShimSettings.from_env(env).uuid_limit(gpu1) == (512 * M, 0)
