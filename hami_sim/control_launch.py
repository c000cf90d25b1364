"""Start hami-control from Python, in this process (threads) or as a real `hami-control`
process, and stop it again. Used by the tests, the benchmarks, the replay and the demo.

    ctl = start_control(kubeconfig)                   # or process=True, tls=(cert, key, ca)
    ctl.client.filter(pod, nodes); ctl.stop()
"""
from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable

from hami_common.lifeline import child_options
from hami_sim.extender_client import ExtenderClient

START_TIMEOUT_S = 30.0


class ControlLaunchError(RuntimeError):
    """hami-control did not start; carries what it printed."""


@dataclass
class RunningControl:
    """A started hami-control: its URL, a client for it, and how to stop it."""

    url: str
    stop: Callable[[], None]
    client: ExtenderClient
    plane: object | None = None              # the ControlPlane when in-process
    process: subprocess.Popen | None = None
    stderr: list = field(default_factory=list)


def _args(kubeconfig, listen: str, tls, extra_args) -> list:
    args = ["--listen", listen, "--kubeconfig", str(kubeconfig)]
    if tls:
        args += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
    return args + [str(a) for a in extra_args]


def start_control(kubeconfig, process: bool = False, *, tls: tuple | None = None,
                  listen: str = "127.0.0.1:0", extra_args=(), wait_ready: float = 20.0,
                  env: dict | None = None) -> RunningControl:
    """Starts hami-control against the cluster of `kubeconfig`.

    tls is (cert, key, ca_file). Waits (up to wait_ready s, 0: not at all) until /readyz says
    ready. extra_args go to the command line (e.g. "--no-leader-elect")."""
    args = _args(kubeconfig, listen, tls, extra_args)
    ca_file = str(tls[2]) if tls and len(tls) > 2 else None
    if process:
        running = _start_process(args, ca_file, env)
    else:
        from hami_control.cluster.kube import KubeApi, make_api_client
        from hami_control.config import from_args
        from hami_control.service import ControlPlane
        config = from_args(args)
        api = KubeApi(make_api_client(config.kubeconfig))
        plane = ControlPlane(config, api).start()

        def stop():
            plane.stop()
            api.close()
        running = RunningControl(plane.url, stop, ExtenderClient(plane.url, ca_file),
                                 plane=plane)
    if wait_ready and not wait_until_ready(running, wait_ready):
        running.stop()
        raise ControlLaunchError(f"hami-control at {running.url} not ready after {wait_ready} s; "
                                 f"stderr: {''.join(running.stderr)[-2000:]}")
    return running


def wait_until_ready(running: RunningControl, timeout: float, leader: bool = True) -> bool:
    """Polls /readyz until it answers 200 and, with leader, says this replica leads (so that
    it filters and binds; readiness alone means it can serve the webhook)."""
    import json
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status, body = running.client.request("GET", "/readyz")
            if status == 200 and (not leader or json.loads(body).get("leader")):
                return True
        except OSError:
            running.client.close()
        time.sleep(0.05)
    return False


def _start_process(args: list, ca_file, env) -> RunningControl:
    from hami_sim.launch import read_first_line, stop_process
    proc = subprocess.Popen([sys.executable, "-m", "hami_control.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **child_options(env))
    line = read_first_line(proc, START_TIMEOUT_S)
    if not line.startswith("serving "):
        stop_process(proc)
        raise ControlLaunchError(f"hami-control did not start (first line {line!r}); stderr: "
                                 f"{proc.stderr.read()[-2000:]}")
    stderr: list = []

    def drain():        # keep reading so the child never blocks on a full pipe
        for text in proc.stderr:
            stderr.append(text)
            del stderr[:-200]
    threading.Thread(target=drain, daemon=True).start()
    url = line.split()[1]
    return RunningControl(url, lambda: stop_process(proc), ExtenderClient(url, ca_file),
                          process=proc, stderr=stderr)
