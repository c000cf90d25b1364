"""Start the simulated cluster's pieces from Python, in this process (threads) or as real
processes, and stop them again. Used by the test fixtures (hami_sim.testing) and the demo.

    api = start_apiserver()                 # or process=True, tls=True, nodes=["n1"], ...
    kubelet = start_kubelet("n1", plugin_dir, api)   # or process=True
    ...
    kubelet.stop(); api.stop()
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hami_common.lifeline import child_options

from .kubeconfig import write_kubeconfig

START_TIMEOUT_S = 20.0


class LaunchError(RuntimeError):
    """A piece did not start; carries what it printed."""


@dataclass
class RunningApiServer:
    """A started API server double: its URL, a kubeconfig for it, and how to stop it."""

    url: str
    kubeconfig: Path
    stop: Callable[[], None]
    ca_file: str | None = None
    server: object | None = None  # the ApiServer when in-process
    process: subprocess.Popen | None = None

    def api_client(self):
        """A kubernetes ApiClient for this server (a new one per call)."""
        from .kubeconfig import api_client_for
        return api_client_for(self.url, self.ca_file)

    def _admin(self, method: str, path: str, body: dict | None = None) -> dict:
        import ssl
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
        ctx = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return json.loads(resp.read())

    def set_faults(self, **spec) -> dict:
        """POST /_sim/faults (latency_ms, error_rate, rules, watch_drop_after, drop_watches...)."""
        return self._admin("POST", "/_sim/faults", spec)

    def clear_faults(self) -> dict:
        """DELETE /_sim/faults."""
        return self._admin("DELETE", "/_sim/faults")

    def drop_watches(self) -> int:
        """Closes every open watch now; returns how many."""
        return self._admin("POST", "/_sim/watches/drop", {})["dropped"]


class Startable:
    """A set of processes started together: start() runs _start() and, when that fails,
    stop() (which must cope with a partial start) before re-raising; a context manager."""

    def _start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def start(self):
        """Starts every piece in order; stops what started if one fails."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def read_first_line(proc: subprocess.Popen, timeout: float) -> str:
    """The child's first stdout line, stripped; '' if none came within timeout seconds (a
    thread reads it, so a child that hangs silently cannot hang us)."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0].strip() if box else ""


def _spawn(args: list[str], expect: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "hami_sim.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **child_options(env))      # ends when this process does
    line = read_first_line(proc, START_TIMEOUT_S)
    if not line.startswith(expect):
        stop_process(proc)
        raise LaunchError(f"hami-sim {args[0]} did not start (first line {line!r}); "
                          f"stderr: {proc.stderr.read()[-2000:]}")
    # Keep draining stderr so a chatty child never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, line


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 5.0) -> None:
    """Stops a child started in its own session: its whole process group, SIGKILL if needed."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace)
        except ProcessLookupError:
            pass  # already gone
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream:
            stream.close()


def start_apiserver(process: bool = False, *, tls: bool = False, workdir=None, nodes=(),
                    faults: dict | None = None, extra_args=(), **options) -> RunningApiServer:
    """Starts an API server double on a free loopback port.

    In-process options are ApiServer keyword arguments (history, watch_queue, bookmark_interval,
    state_file, ...); with process=True, extra_args are passed to `hami-sim apiserver`.
    tls=True makes a CA and server certificate in workdir and serves HTTPS.
    """
    workdir = Path(workdir or tempfile.mkdtemp(prefix="hami-apiserver-"))
    kubeconfig = workdir / "kubeconfig"
    ca_file = cert = key = None
    if tls:
        from .certs import make_server_certs
        certs = make_server_certs(workdir / "certs")
        ca_file, cert, key = str(certs.ca_cert), str(certs.cert), str(certs.key)
    if not process:
        from .apiserver import ApiServer
        server = ApiServer(tls_cert=cert, tls_key=key, nodes=nodes, faults=faults,
                           **options).start()
        write_kubeconfig(kubeconfig, server.url, ca_file=ca_file)
        return RunningApiServer(server.url, kubeconfig, server.stop, ca_file, server=server)
    args = ["apiserver", "--listen", "127.0.0.1:0", "--kubeconfig-out", str(kubeconfig)]
    if tls:
        args += ["--tls-cert", cert, "--tls-key", key, "--ca-file", ca_file]
    for node in nodes:
        args += ["--node", node if isinstance(node, str) else node["name"]]
    env = dict(os.environ)
    if faults:
        env["HAMI_SIM_APISERVER_FAULTS"] = json.dumps(faults)
    proc, line = _spawn(args + list(extra_args), "serving ", env)
    return RunningApiServer(line.split()[1], kubeconfig, lambda: stop_process(proc), ca_file,
                            process=proc)


@dataclass
class RunningKubelet:
    """A started kubelet double; `kubelet` is the KubeletDouble when in-process."""

    node_name: str
    plugin_dir: Path
    record_dir: Path
    stop: Callable[[], None]
    restart: Callable[[], None]
    kubelet: object | None = None
    process: subprocess.Popen | None = None
    extra: dict = field(default_factory=dict)

    def allocation_files(self) -> list[Path]:
        """Every dumped container allocation (<ns>/<pod>/<container>.json)."""
        return sorted(p for p in self.record_dir.glob("*/*/*.json") if p.name != "failure.json")


def start_kubelet(node_name: str, plugin_dir, apiserver: RunningApiServer,
                  process: bool = False, record_dir=None, **options) -> RunningKubelet:
    """Starts a kubelet double for node_name serving kubelet.sock in plugin_dir.

    In-process options are KubeletDouble keyword arguments (sync_interval, retry_base, ...).
    """
    plugin_dir = Path(plugin_dir)
    record_dir = Path(record_dir or tempfile.mkdtemp(prefix="hami-kubelet-records-"))
    if not process:
        from .kubelet import KubeletDouble
        kubelet = KubeletDouble(node_name, plugin_dir, apiserver.api_client(),
                                record_dir=record_dir, **options).start()
        return RunningKubelet(node_name, plugin_dir, record_dir, kubelet.stop, kubelet.restart,
                              kubelet=kubelet)
    args = ["kubelet", "--node-name", node_name, "--plugin-dir", str(plugin_dir),
            "--kubeconfig", str(apiserver.kubeconfig), "--record-dir", str(record_dir)]
    for key, value in options.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    proc, _ = _spawn(args, "ready")
    return RunningKubelet(node_name, plugin_dir, record_dir, lambda: stop_process(proc),
                          lambda: os.killpg(proc.pid, signal.SIGHUP), process=proc)


def short_tempdir(prefix: str = "hami-dp-") -> Path:
    """A directory with a short path (Unix socket paths must stay under 108 bytes)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
