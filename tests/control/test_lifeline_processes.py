"""Servers started by the launchers end when the process that started them is killed
(SIGKILL: no clean-up code runs), instead of living on as orphans."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

PARENT = textwrap.dedent("""
    import time
    from hami_sim.control_launch import start_control
    from hami_sim.launch import start_apiserver
    api = start_apiserver(process=True)
    control = start_control(str(api.kubeconfig), process=True,
                            extra_args=["--no-leader-elect", "--handshake-interval", "0"])
    print(api.process.pid, control.process.pid, flush=True)
    time.sleep(120)
""")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_apiserver_and_control_end_when_their_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    children = []
    try:
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(children) == 2, "the parent did not start both servers"
        assert not any(_gone(pid) for pid in children)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not all(_gone(pid) for pid in children):
            time.sleep(0.1)
        assert all(_gone(pid) for pid in children), \
            f"servers outlived their parent: {[p for p in children if not _gone(p)]}"
    finally:
        parent.kill()
        parent.wait()
        for pid in children:
            if not _gone(pid):
                os.killpg(pid, signal.SIGKILL)
