"""The libraries we mount into containers load under an old glibc.

libvgpu.so is preloaded (/etc/ld.so.preload) into every process of a GPU container, and the
simulated libcuda/libnvidia-ml stand where the NVIDIA toolkit mounts the real ones. A library
that needs a glibc symbol version newer than the image's makes the loader refuse it, and every
process of the container exits. c/compat/glibc_floor.h holds them to glibc 2.17; these tests read
the ELF files, then run a Debian bullseye image (glibc 2.31) with the shim preloaded.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

from hami_node.shim import lib_path
from hami_sim.gpu import lib_dir
from tests_shim_common import ROOT

FLOOR = (2, 17)
MiB = 1 << 20


def mounted_libraries():
    return {"libvgpu.so": lib_path(), "libcuda.so.1": lib_dir() / "libcuda.so.1",
            "libnvidia-ml.so.1": lib_dir() / "libnvidia-ml.so.1"}


def glibc_versions(path):
    """{version: [libraries it is required from]}, from the ELF's version references."""
    text = subprocess.run(["objdump", "-p", str(path)], check=True, capture_output=True,
                          text=True, timeout=60).stdout
    needed, library = {}, None
    for line in text.splitlines():
        if m := re.match(r"\s+required from (\S+):", line):
            library = m.group(1)
        elif m := re.search(r"\bGLIBC_(\d+)\.(\d+)(?:\.\d+)?$", line.strip()):
            needed.setdefault((int(m.group(1)), int(m.group(2))), []).append(library)
    return needed


@pytest.mark.parametrize("name", sorted(mounted_libraries()))
def test_a_mounted_library_needs_nothing_newer_than_glibc_2_17(name):
    needed = glibc_versions(mounted_libraries()[name])
    assert needed, f"{name}: no GLIBC version references found (objdump output changed?)"
    too_new = {f"GLIBC_{a}.{b}": libs for (a, b), libs in needed.items() if (a, b) > FLOOR}
    assert not too_new, (f"{name} needs {too_new}: pin the symbol in c/compat/glibc_floor.h "
                         "(or wrap it in glibc_floor.c)")


@pytest.fixture(scope="module")
def bullseye():
    """A cached Debian bullseye root filesystem (glibc 2.31), made by tools/rootfs/build.sh."""
    done = subprocess.run(["bash", str(ROOT / "tools/rootfs/build.sh"), "bullseye"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"tools/rootfs/build.sh failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


# A Python program in the image (ctypes, as a framework reaches the driver): allocate more than
# the cap and report the driver's answers.
PROBE = """
import ctypes, json
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
free, total = ctypes.c_size_t(), ctypes.c_size_t()
rc = [cu.cuInit(0), cu.cuDeviceGet(ctypes.byref(dev), 0),
      cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)]
alloc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(512 << 20))
cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
print(json.dumps({"setup": rc, "alloc": alloc, "total": total.value}))
"""


@pytest.fixture
def image(bullseye, tmp_path):
    """A private copy of the image with our libraries in /opt/hami and the shim preloaded,
    as Allocate's mounts and /etc/ld.so.preload put them."""
    root = tmp_path / "root"
    subprocess.run(["cp", "-a", bullseye, str(root)], check=True, timeout=300)
    opt = root / "opt/hami"
    opt.mkdir(parents=True)
    for name, path in mounted_libraries().items():
        shutil.copy(path, opt / name)
    (root / "etc/ld.so.preload").write_text("/opt/hami/libvgpu.so\n")
    return root


def in_image(root, *argv, **env):
    # Contexts and modules cost nothing here (as in the other shim tests): the cap's arithmetic
    # is exact, and a 256 MiB cap is not below what a context takes by itself.
    base = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/hami", "HAMI_SIM_GPUS": "4g",
            "HAMI_SIM_STATE": "/tmp/sim", "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu.cache",
            "HAMI_SIM_CTX_OVERHEAD": "0", "HAMI_SIM_MODULE_MEM": "0"}
    return subprocess.run(["chroot", str(root), "/usr/bin/env", "-i",
                           *[f"{k}={v}" for k, v in {**base, **env}.items()], *argv],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")
def test_every_process_of_an_old_image_starts_and_the_cap_holds(image):
    glibc = sorted((image / "lib/x86_64-linux-gnu").glob("libc-2.*.so"))
    assert [g.name for g in glibc] == ["libc-2.31.so"], "the image is not the glibc 2.31 one"
    shell = in_image(image, "/bin/sh", "-c", "echo started")
    assert (shell.returncode, shell.stdout, shell.stderr) == (0, "started\n", "")
    capped = in_image(image, "python3", "-c", PROBE, CUDA_DEVICE_MEMORY_LIMIT="256m")
    assert capped.returncode == 0, capped.stderr
    assert json.loads(capped.stdout) == {"setup": [0, 0, 0], "alloc": 2, "total": 256 * MiB}
