"""The shared file: one layout on both sides; a truncated, corrupt or other-version file is
reported in one line and rebuilt when nobody uses it, refused while a live process does; and
non-root users get working files and folders."""
import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from hami_common.cmirror import compare_layout
from hami_node.shim import layout, read_usage
from tests_shim_common import ROOT

MIRRORS = {layout.VgpuComputeFigures: "vgpu_compute_figures", layout.VgpuCompute: "vgpu_compute",
           layout.VgpuProc: "vgpu_proc", layout.VgpuDevice: "vgpu_device",
           layout.VgpuHeader: "vgpu_header", layout.VgpuShared: "vgpu_shared"}


@pytest.mark.parametrize("struct, field, value", layout.LAYOUT,
                         ids=[f"{s.__name__}.{f or 'size'}" for s, f, _ in layout.LAYOUT])
def test_python_mirror_has_the_asserted_layout(struct, field, value):
    assert (getattr(struct, field).offset if field else ctypes.sizeof(struct)) == value


def test_every_field_matches_the_c_header(tmp_path):
    from_c, from_python = compare_layout(MIRRORS, "vgpu_shared.h", [ROOT / "c/vgpu"], tmp_path,
                                         constants=["VGPU_MAGIC", "VGPU_VERSION"])
    assert from_c == from_python + [layout.MAGIC, layout.VERSION]


def other_version(path: Path):
    data = bytearray(path.read_bytes())
    data[8:12] = (2).to_bytes(4, "little")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, reason", [
    (lambda p: p.write_bytes(b"garbage"), "has size 7, expected 270848 (truncated or another layout)"),
    (lambda p: p.write_bytes(b"\1" * layout.FILE_SIZE), "has a bad magic number (not a hami-vgpu file, or corrupt)"),
    (other_version, "is version 2, this shim uses version 1"),
], ids=["truncated", "corrupt", "other-version"])
def test_a_bad_file_nobody_uses_is_reported_once_and_rebuilt(shim, harness, damage, reason):
    shim.run(cmd=[str(harness), "startup"])
    damage(shim.cache)
    out, err, _ = shim.run(cmd=[str(harness), "direct", str(1 << 20)])
    assert out[0]["alloc"] == 0
    lines = err.strip().splitlines()
    assert lines == [f"hami-vgpu: shared file {shim.cache} {reason}; rebuilt it, as no live "
                     "process was using it"]
    assert read_usage(shim.cache).version == 1


def test_a_bad_file_a_live_process_uses_is_refused_not_split(shim, harness):
    holder = shim.watch('''
        ctx = context(0)
        p = ok(cu.cuMemAlloc(100 * MiB))
        say(held=True)
        sys.stdin.readline()
    ''', stdin=subprocess.PIPE)
    assert holder.lines.get(timeout=30).strip() == '{"held": true}'
    other_version(shim.cache)
    out, err, rc = shim.run(cmd=[str(harness), "startup"], check=False)
    assert (out, rc) == ([{"error": "cuInit", "rc": 800}], 1)
    assert err.count("hami-vgpu:") == 1 and "cannot be rebuilt while live processes use it" in err
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0
    out, err, _ = shim.run(cmd=[str(harness), "startup"])
    assert out == [{"started": True}] and "rebuilt it" in err


def test_an_empty_file_is_simply_initialised(shim, harness):
    shim.cache.write_bytes(b"")
    out, err, _ = shim.run(cmd=[str(harness), "startup"])
    assert out == [{"started": True}] and err == ""


@pytest.fixture
def open_dir():
    """A folder every user can enter and write (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="hami-shim-test-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_non_root_users_get_private_defaults_and_can_share_an_explicit_file(harness, open_dir):
    from hami_sim.gpu import lib_dir, sim_env
    exe = open_dir / "harness"
    shutil.copy(harness, exe)
    exe.chmod(0o755)
    nobody = 65534
    # The libraries travel with the harness: a checkout under a private (0700) folder, as a
    # clone in root's home or in `mktemp -d` is, cannot be read by user nobody.
    libs = open_dir / "lib"
    shutil.copytree(lib_dir(), libs)
    shim_lib = libs / "libvgpu.so"
    shutil.copy(ROOT / "hami_node/shim/lib/libvgpu.so", shim_lib)

    def as_nobody(**extra):
        env = sim_env(gpus="4g", state_dir=open_dir / "sim")
        env.update(TMPDIR=str(open_dir), LD_PRELOAD=str(shim_lib),
                   LD_LIBRARY_PATH=f"{libs}:{env['LD_LIBRARY_PATH']}", **extra)
        env.pop("CUDA_DEVICE_MEMORY_SHARED_CACHE", None)
        return subprocess.run([str(exe), "startup"], env=env, capture_output=True, text=True,
                              timeout=60, user=nobody, group=nobody)

    done = as_nobody()
    assert done.returncode == 0, done.stderr
    private = open_dir / f"hami-vgpu-{nobody}" / "vgpu.cache"
    assert private.stat().st_uid == nobody
    assert (private.stat().st_mode & 0o777, private.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    shared = open_dir / "container" / "vgpu.cache"  # made by root first, then used by nobody
    env = dict(sim_env(gpus="4g", state_dir=open_dir / "sim-root"),
               LD_PRELOAD=str(ROOT / "hami_node/shim/lib/libvgpu.so"),
               CUDA_DEVICE_MEMORY_SHARED_CACHE=str(shared))
    subprocess.run([str(exe), "startup"], env=env, check=True, capture_output=True, timeout=60)
    assert shared.stat().st_mode & 0o777 == 0o666
    done = as_nobody(CUDA_DEVICE_MEMORY_SHARED_CACHE=str(shared))
    assert done.returncode == 0, done.stderr
