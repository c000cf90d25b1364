"""PID namespaces: NVML names a process to its caller by the PID the caller's namespace gives
it and leaves out the processes the caller cannot see, as the kernel driver translates each
client's PID for the caller; the liveness checks translate too, so a process in a namespace
the checker cannot see into is not taken for dead."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_shared_memory import NVML, nvml, read_line

MiB = 1 << 20
OWN_NAMESPACE = ("unshare", "--pid", "--fork", "--kill-child", "--mount-proc")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root and unshare for a PID namespace")


def test_a_process_in_its_own_namespace_is_named_by_the_callers_pid(sim):
    holder = sim.spawn('''
        ctx = context(0)
        ptr = ok(cu.cuMemAlloc(64 << 20))
        say(pid=os.getpid())
        sys.stdin.readline()
    ''', prefix=OWN_NAMESPACE, stdin=subprocess.PIPE)
    assert read_line(holder) == {"pid": 1}                   # PID 1 of its namespace
    children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text().split()
    host_pid = int(children[0])                              # the same process, from here
    assert nvml(sim) == ({host_pid: 64 * MiB}, 64 * MiB)
    out, _ = sim.run(NVML, prefix=OWN_NAMESPACE)             # a neighbouring namespace
    assert out == [{"procs": {}, "used": 64 * MiB}]          # cannot see it, nor reap it
    assert nvml(sim) == ({host_pid: 64 * MiB}, 64 * MiB)
    holder.kill()
    holder.wait()
    assert nvml(sim) == ({}, 0)                              # gone: reaped from here
