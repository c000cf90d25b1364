"""A simulated GPU cluster on this machine, every piece real: the API server double (HTTPS),
hami-control (HTTPS, with a generated certificate), and per GPU node its own simulated GPUs,
a `hami-node` process and a kubelet double.

    with SimCluster(step=print) as cluster:      # starts everything; stops it all on exit
        cluster.core_v1.list_node()
        cluster.control.client.filter(pod, cluster.node_names)

Processes run in their own sessions and are stopped by process group, also when start-up
fails halfway or the caller is interrupted; the work directory is removed unless kept.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from hami_common import constants as C
from hami_common import node_register
from hami_common.errors import HamiFormatError
from hami_common.lifeline import child_options
from hami_sim.dashboard_launch import dashboard_args, dashboard_url, write_node_metrics
from hami_sim.gpu import sim_env
from hami_sim.kubeconfig import write_kubeconfig
from hami_sim.launch import (START_TIMEOUT_S, Startable, read_first_line, start_apiserver,
                             start_kubelet, stop_process)

READY_TIMEOUT_S = 45.0
USER_TOKEN = "hami-sim-user"
Step = Callable[[str], None]
AGENT = [sys.executable, "-m", "hami_node.plugin.cli"]


class ClusterError(RuntimeError):
    """A piece of the simulated cluster did not start or stopped working."""


@dataclass(frozen=True)
class NodeSpec:
    """One simulated GPU node: its name and its GPUs (HAMI_SIM_GPUS entries)."""

    name: str
    gpus: tuple
    split: int = 10

    @property
    def sim_gpus(self) -> str:
        """The HAMI_SIM_GPUS value."""
        return ",".join(self.gpus)


A100 = "40g/108/NVIDIA A100-SXM4-40GB"
T4 = "15g/40/Tesla T4"
DEFAULT_NODES = (NodeSpec("node-a", (A100, A100)), NodeSpec("node-b", (T4, T4)))

# Inherited variables that would configure a node agent behind the demo's back.
_AGENT_ENV_PREFIXES = ("HAMI_NODE_", "HAMI_SIM_", "CUDA_DEVICE_", "NVIDIA_VISIBLE_DEVICES",
                       "CUDA_VISIBLE_DEVICES", "LD_PRELOAD")
_AGENT_ENV_NAMES = ("NODE_NAME", "KUBECONFIG")


def clean_base_env(env=None) -> dict:
    """The environment every simulated node starts from: ours, minus what would configure an
    agent, the simulator or the shim."""
    return {k: v for k, v in (os.environ if env is None else env).items()
            if k not in _AGENT_ENV_NAMES and not k.startswith(_AGENT_ENV_PREFIXES)}


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file ('' when it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class SimNode:
    """One GPU node: simulated GPUs, the shim installed, a kubelet double and hami-node."""

    def __init__(self, spec: NodeSpec, root: Path, apiserver, base_env: dict,
                 plugin_dir: Optional[Path] = None):
        self.spec, self.name, self.root = spec, spec.name, root
        self.plugin_dir = plugin_dir or root / "dp"    # short: plugin sockets live here
        self.shim_dir = root / "vgpu"
        self.state_dir = root / "gpu-state"
        self.record_dir = root / "kubelet-records"
        self.agent_log = root / "hami-node.log"
        self.kubelet_log = root / "kubelet.log"
        self.env = sim_env(gpus=spec.sim_gpus, state_dir=self.state_dir, uuid_seed=spec.name,
                           base=base_env)
        self._apiserver = apiserver
        self.kubelet = None
        self.agent: Optional[subprocess.Popen] = None
        self.metrics_url = ""
        self.devices: list = []          # what the agent published (DeviceInfo)
        self.gpu_index: dict = {}        # GPU UUID -> physical index on this node
        self.recorder = None             # BusyRecorder of the simulated GPUs, when recording
        self._logs: list = []

    def start(self) -> None:
        """Installs the shim, starts the kubelet double and the agent (does not wait for it)."""
        self.install_shim()
        kubelet_log = open(self.kubelet_log, "a", buffering=1)
        self._logs.append(kubelet_log)
        self.kubelet = start_kubelet(self.name, self.plugin_dir, self._apiserver,
                                     record_dir=self.record_dir, sync_interval=0.2,
                                     retry_base=0.5, retry_max=5,
                                     log=lambda m: kubelet_log.write(m + "\n"))
        self.start_agent(self._apiserver.kubeconfig)

    def install_shim(self) -> None:
        """`hami-node install-shim` into this node's shim folder."""
        self.root.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(AGENT + ["install-shim", "--shim-host-dir", str(self.shim_dir)],
                              env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise ClusterError(f"{self.name}: hami-node install-shim failed: "
                               f"{done.stderr.strip()[-1000:]}")

    def start_agent(self, kubeconfig, extra_args=()) -> None:
        """Starts hami-node against the API server of kubeconfig (does not wait for it)."""
        agent_log = open(self.agent_log, "ab")
        self._logs.append(agent_log)
        self.agent = subprocess.Popen(
            AGENT + ["--node-name", self.name, "--device-plugin-dir", str(self.plugin_dir),
                     "--kubeconfig", str(kubeconfig),
                     "--shim-host-dir", str(self.shim_dir), "--metrics-address", "127.0.0.1:0",
                     "--device-split-count", str(self.spec.split), "--annotation-interval", "1",
                     *extra_args],
            stdout=subprocess.PIPE, stderr=agent_log, text=True, start_new_session=True,
            **child_options(self.env))        # the agent ends when the demo does

    def read_ready_line(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Waits for the agent's `ready` line; notes its metrics URL."""
        line = read_first_line(self.agent, timeout)
        if not line.startswith("ready "):
            raise ClusterError(f"{self.name}: hami-node did not start (first line {line!r}); "
                               f"its log ends:\n{tail(self.agent_log)}")
        fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
        self.metrics_url = fields.get("metrics", "")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Waits for the agent's `ready` line and for kubelet to see every virtual device."""
        self.read_ready_line(timeout)
        devices = self.spec.split * len(self.spec.gpus)
        try:
            self.kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=devices, timeout=timeout)
        except TimeoutError as e:
            raise ClusterError(f"{self.name}: kubelet never saw {devices} {C.RESOURCE_GPU} "
                               f"devices: {e}; hami-node's log ends:\n{tail(self.agent_log)}") \
                from e

    def published(self, devices: list, record_busy: bool) -> None:
        """Takes note of the GPUs the agent published; starts recording their timeline."""
        from hami_sim.gpu.timeline import BusyRecorder
        self.devices = list(devices)
        self.gpu_index = {d.id: d.index for d in devices}
        if record_busy:
            self.recorder = BusyRecorder(self.state_dir, range(len(self.spec.gpus)))
            self.recorder.poll()

    def alive(self) -> bool:
        """Whether the agent process still runs."""
        return self.agent is not None and self.agent.poll() is None

    def stop(self) -> None:
        """Stops the agent (process group) and the kubelet double."""
        if self.kubelet is not None:        # first, so the agent's going is no news to it
            self.kubelet.stop()
        if self.agent is not None:
            stop_process(self.agent)
        for f in self._logs:
            f.close()
        self._logs.clear()


def published_gpus(node: dict) -> list:
    """The GPUs a node object's agent registered (node_register.DeviceInfo), [] if none."""
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(C.ANNO_NODE_REGISTER)
    if not value:
        return []
    try:
        return node_register.decode(value)
    except HamiFormatError:
        return []


def control_nodes(control) -> int:
    """How many GPU nodes hami-control's view holds (its /metrics; 0 when unanswered)."""
    status, body = control.client.request("GET", "/metrics")
    if status != 200:
        return 0
    for line in body.decode().splitlines():
        if line.startswith("hami_control_nodes "):
            return int(float(line.split()[1]))
    return 0


class SimCluster(Startable):
    """API server double + hami-control + simulated GPU nodes, started and stopped together."""

    def __init__(self, nodes: Sequence[NodeSpec] = DEFAULT_NODES, workdir=None,
                 step: Step = lambda _m: None, keep: bool = False, record_busy: bool = False,
                 dashboard: bool = False):
        self.specs, self.step, self.keep = tuple(nodes), step, keep
        self.dashboard = dashboard
        self.dashboard_url = ""
        self.record_busy = record_busy
        self._own_root = workdir is None
        self.root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="hami-demo-",
                                                                        dir="/tmp"))
        self.apiserver = None
        self.control = None
        self.nodes: list = []
        self._stack = contextlib.ExitStack()
        self._api_client = None

    # Life cycle ---------------------------------------------------------------------------

    def _start(self) -> None:
        from hami_sim.certs import make_server_certs
        from hami_sim.control_launch import start_control
        from hami_sim.demo.admission import register_webhook
        self.root.mkdir(parents=True, exist_ok=True)
        # Frequent bookmarks: a watcher checks whether it should stop at each event, so the
        # watch threads of the kubelet doubles and the demo's loops end within half a second.
        self.apiserver = start_apiserver(process=True, tls=True, workdir=self.root / "apiserver",
                                         extra_args=["--bookmark-interval", "0.5"])
        self._stack.callback(self.apiserver.stop)
        # kubectl prompts for a user name when the kubeconfig's user has no credentials; the
        # double accepts any token.
        write_kubeconfig(self.kubeconfig, self.apiserver.url, ca_file=self.apiserver.ca_file,
                         token=USER_TOKEN)
        self.step(f"API server double serving {self.apiserver.url} (kubeconfig "
                  f"{self.kubeconfig})")
        base = clean_base_env()
        for spec in self.specs:
            node = SimNode(spec, self.root / spec.name, self.apiserver, base)
            self.nodes.append(node)
            self._stack.callback(node.stop)
            node.start()
        certs = make_server_certs(self.root / "control-certs")
        extra = dashboard_args(self.root) if self.dashboard else []
        self.control = start_control(self.apiserver.kubeconfig, process=True,
                                     tls=(certs.cert, certs.key, certs.ca_cert),
                                     extra_args=["--log-level", "warning", *extra],
                                     wait_ready=START_TIMEOUT_S)
        self._stack.callback(self._stop_control)
        if self.dashboard:
            self.dashboard_url = dashboard_url(self.control)
        register_webhook(self.core_v1.api_client, self.control.url, certs.ca_cert.read_text())
        self.step(f"hami-control serving {self.control.url} (webhook, filter, bind; TLS with a "
                  "generated CA); the API server double calls its webhook at pod creation")
        for node in self.nodes:
            node.wait_ready()
            gpus = ", ".join(f"{g.split('/')[-1]}" for g in node.spec.gpus)
            self.step(f"{node.name}: hami-node ready with {len(node.spec.gpus)} simulated GPUs "
                      f"({gpus}), kubelet double sees {node.spec.split * len(node.spec.gpus)} "
                      f"x {C.RESOURCE_GPU}")
        if self.dashboard:
            write_node_metrics(self.root, {n.name: n.metrics_url for n in self.nodes})
        self._wait_control_sees_nodes()
        published = self.gpus()
        for node in self.nodes:
            node.published(published.get(node.name, []), self.record_busy)

    def _wait_control_sees_nodes(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        want = len(self.nodes)
        while True:
            seen = self._control_nodes()
            if seen >= want:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"hami-control sees {seen} of {want} GPU nodes after "
                                   f"{timeout:.0f} s; its log ends:\n{self.control_log_tail()}")
            time.sleep(0.1)

    def _control_nodes(self) -> int:
        return control_nodes(self.control)

    def _stop_control(self) -> None:
        self.control.stop()
        (self.root / "hami-control.log").write_text("".join(self.control.stderr))

    def stop(self) -> None:
        """Stops everything (reverse order) and removes the work directory unless kept."""
        try:
            if self._api_client is not None:
                self._api_client.close()
                self._api_client = None
            self._stack.close()
        finally:
            if self._own_root and not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)

    # Reading it ---------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """A kubeconfig for the API server double (HTTPS, its CA, a token), for users."""
        return self.root / "kubeconfig"

    @property
    def core_v1(self):
        """A CoreV1Api on one shared client."""
        from kubernetes import client
        if self._api_client is None:
            self._api_client = self.apiserver.api_client()
        return client.CoreV1Api(self._api_client)

    @property
    def node_names(self) -> list:
        """The GPU nodes' names."""
        return [n.name for n in self.nodes]

    def node(self, name: str) -> Optional[SimNode]:
        """The SimNode called name, or None."""
        return next((n for n in self.nodes if n.name == name), None)

    def gpus(self) -> dict:
        """node name -> the GPUs its agent published (DeviceInfo list)."""
        raw = self.core_v1.list_node(_preload_content=False).data
        return {n["metadata"]["name"]: published_gpus(n) for n in json.loads(raw)["items"]}

    def problems(self) -> list:
        """What stopped running or reports itself unhealthy, in words (empty: all well)."""
        found = [f"hami-node on {n.name} exited ({n.agent.poll()}); its log ends:\n"
                 f"{tail(n.agent_log, 5)}" for n in self.nodes if not n.alive()]
        if self.apiserver.process is not None and self.apiserver.process.poll() is not None:
            found.append("the API server double exited")
        if self.control.process is not None and self.control.process.poll() is not None:
            found.append(f"hami-control exited; its log ends:\n{self.control_log_tail(5)}")
            return found
        try:
            status, body = self.control.client.request("GET", "/healthz")
        except OSError as e:
            status, body = 0, str(e).encode()
        if status != 200:
            found.append(f"hami-control /healthz answers {status} {body.decode(errors='replace')}"
                         f"; its log ends:\n{self.control_log_tail(8)}")
        return found

    def control_log_tail(self, lines: int = 15) -> str:
        """The end of hami-control's log."""
        return "\n".join("".join(self.control.stderr).splitlines()[-lines:])

    def metrics(self, url: str) -> str:
        """One scrape of a /metrics URL."""
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()
