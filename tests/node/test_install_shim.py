"""`hami-node install-shim`: versioned file + atomic rename; a process that loaded the old
library keeps it while new processes get the new one."""
import os
import subprocess
import sys
from pathlib import Path

from hami_sim.gpu import lib_dir

from nodehelpers import wait_for

# Two different real shared libraries stand in for two versions of the shim.
V1, V2 = lib_dir() / "libnvidia-ml.so.1", lib_dir() / "libcuda.so.1"
HOLD = ("import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); print('loaded', flush=True); "
        "time.sleep(60)")


def install(host: Path, source: Path):
    return subprocess.run([sys.executable, "-m", "hami_node.plugin.cli", "install-shim",
                           "--source", str(source), "--shim-host-dir", str(host)],
                          capture_output=True, text=True, timeout=30)


def mapped_libvgpu(pid: int) -> set:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {line.split(None, 5)[5] for line in maps.splitlines()
            if len(line.split(None, 5)) == 6 and "libvgpu" in line}


def test_install_layout_and_idempotence(tmp_path):
    host = tmp_path / "vgpu"
    done = install(host, V1)
    assert done.returncode == 0, done.stderr
    link = host / "libvgpu.so"
    assert link.is_symlink() and (host / os.readlink(link)).read_bytes() == V1.read_bytes()
    assert (host / "ld.so.preload").read_text() == "/usr/local/vgpu/libvgpu.so\n"
    assert (host / "containers").is_dir()
    first = os.readlink(link)
    assert install(host, V1).returncode == 0
    assert os.readlink(link) == first, "same content, same version"
    assert sorted(p.name for p in host.iterdir() if p.name.startswith(".")) == [], \
        "no temporary files left"


def test_running_processes_keep_the_library_they_loaded(tmp_path):
    host = tmp_path / "vgpu"
    assert install(host, V1).returncode == 0
    old = host / os.readlink(host / "libvgpu.so")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(host / "libvgpu.so")],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == "loaded"
        assert mapped_libvgpu(holder.pid) == {str(old)}
        assert install(host, V2).returncode == 0
        new = host / os.readlink(host / "libvgpu.so")
        assert new != old and new.read_bytes() == V2.read_bytes()
        assert mapped_libvgpu(holder.pid) == {str(old)}, "the old mapping is untouched"
        assert old.read_bytes() == V1.read_bytes(), "the old version is kept on disk"
        assert holder.poll() is None
        fresh = subprocess.Popen([sys.executable, "-c", HOLD, str(host / "libvgpu.so")],
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert fresh.stdout.readline().strip() == "loaded"
            assert wait_for(lambda: mapped_libvgpu(fresh.pid)) == {str(new)}
        finally:
            fresh.kill()
            fresh.wait()
    finally:
        holder.kill()
        holder.wait()


def test_install_errors_say_what_to_do(tmp_path):
    done = install(tmp_path / "vgpu", tmp_path / "missing.so")
    assert done.returncode == 1
    assert "cannot read the shim library" in done.stderr and "--source" in done.stderr
    text = tmp_path / "not-a-lib.so"
    text.write_text("hello")
    done = install(tmp_path / "vgpu", text)
    assert done.returncode == 1 and "not a shared library" in done.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = install(blocker / "vgpu", V1)
    assert done.returncode == 1 and "cannot install into" in done.stderr
