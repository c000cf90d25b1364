"""Shim tier: real processes under `hami-run --sim` (cuda-python, ctypes, a C program linked
with -lcuda), each test with its own simulated GPUs and its own shared accounting file.

Every child runs in its own session and is killed (whole process group) when the test ends,
also when it fails.
"""
import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from hami_node.shim import lib_path, read_usage
from hami_sim.gpu import lib_dir, sim_env
from tests_shim_common import PRELUDE

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
GPUS = "4g/8/NVIDIA A100-SXM4-40GB,2g/4/Tesla T4"


class Shim:
    """Runs children under hami-run --sim against private simulated GPUs and one cache file."""

    def __init__(self, tmp_path: Path, gpus: str = GPUS):
        self.tmp = tmp_path
        self.cache = tmp_path / "vgpu.cache"
        # Contexts and modules cost nothing here unless a test sets HAMI_SIM_CTX_OVERHEAD /
        # HAMI_SIM_MODULE_MEM itself: most tests check the arithmetic of allocations exactly
        # (test_memory_truth.py runs with realistic context costs).
        self.env = sim_env(gpus=gpus, state_dir=tmp_path / "sim", ctx_overhead="0",
                           module_memory="0")
        self.children = []

    def hami_run(self, cmd, limit="1g", extra=()):
        """The argv of `hami-run --sim` around `cmd`."""
        limits = ["--gpu-mem", limit] if limit else []
        return [sys.executable, "-m", "hami_node.shim.run", "--sim", "--cache", str(self.cache),
                *limits, *extra, "--", *cmd]

    def spawn(self, code=None, cmd=None, limit="1g", extra=(), env=None, **kw):
        """Starts a child (Python `code`, or `cmd`) under hami-run in its own session."""
        argv = cmd if cmd else [sys.executable, "-c", PRELUDE + textwrap.dedent(code)]
        proc = subprocess.Popen(self.hami_run(argv, limit, extra), env=env or self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, cwd=ROOT, **kw)
        self.children.append(proc)
        return proc

    def watch(self, code=None, cmd=None, limit="1g", extra=(), env=None, **kw):
        """spawn(), with stdout read line by line in the background: use next_line()."""
        proc = self.spawn(code, cmd, limit, extra, env, **kw)
        proc.lines = queue.Queue()

        def pump():
            for line in proc.stdout:
                proc.lines.put(line)
            proc.lines.put("")

        threading.Thread(target=pump, daemon=True).start()
        return proc

    @staticmethod
    def next_line(proc, timeout=30):
        """The next JSON line of a watched child; a failure when it says nothing in time."""
        try:
            line = proc.lines.get(timeout=timeout)
        except queue.Empty:
            line = ""
        if not line:
            raise AssertionError(f"child {proc.args[-1][-60:]!r} said nothing more")
        return json.loads(line)

    def run(self, code=None, cmd=None, limit="1g", extra=(), env=None, timeout=60, check=True):
        """Runs a child to its end: (JSON lines of stdout, stderr, exit status)."""
        proc = self.spawn(code, cmd, limit, extra, env)
        out, err = proc.communicate(timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"child failed ({proc.returncode}):\n{out}\n{err}")
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")], err, \
            proc.returncode

    def usage(self):
        """The container's view from the shared file."""
        return read_usage(self.cache)

    def kill(self, proc):
        """SIGKILL a child's whole process group (hami-run and what it started)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self):
        for proc in self.children:
            self.kill(proc)
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream:
                    stream.close()


@pytest.fixture
def shim(tmp_path):
    """Two small simulated GPUs (4 GiB A100, 2 GiB T4), a private cache file."""
    s = Shim(tmp_path)
    yield s
    s.close()


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    """tests/shim/harness.c linked against the simulated libcuda (-lcuda)."""
    out = tmp_path_factory.mktemp("harness") / "harness"
    subprocess.run(["cc", "-O2", "-std=gnu11", "-pthread", f"-I{ROOT}/c/include",
                    str(ROOT / "tests/shim/harness.c"), "-o", str(out), f"-L{lib_dir()}",
                    "-lcuda"], check=True, timeout=120)
    lib_path()  # fails clearly when libvgpu.so is not built
    return out
