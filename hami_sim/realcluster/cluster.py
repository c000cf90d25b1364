"""A real one-machine Kubernetes cluster around hami-py: etcd, kube-apiserver (TLS, RBAC,
service-account tokens), kube-controller-manager, kube-scheduler configured from deploy/
(our extender), containerd + runc + kubelet, and hami-control and hami-node as processes with
the ServiceAccount tokens of deploy/'s RBAC, over simulated GPUs.

    with RealCluster(step=print) as cluster:     # builds what is missing, starts, stops
        cluster.kubectl("get", "nodes")
        cluster.core_v1.list_node()

Every process runs in its own process group, listed in a file that a watchdog process reads
when this one dies: nothing is left running, whatever way the launcher ends (reaper.py).
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from hami_common.lifeline import child_options
from hami_sim.demo.cluster import (A100, T4, ClusterError, NodeSpec, SimNode, clean_base_env,
                                   published_gpus, tail)
from hami_sim.kubeconfig import write_kubeconfig
from hami_sim.launch import Startable
from hami_sim.realcluster import config as cfg
from hami_sim.realcluster.components import COMPONENTS, ensure_components
from hami_sim.realcluster.dra import DRA_GATES
from hami_sim.realcluster.pki import make_pki
from hami_sim.realcluster.reaper import reap

NODE = NodeSpec("node-a", (A100, A100, T4, T4))
# How hami-control and hami-node run: as processes with their ServiceAccounts' tokens, or as
# the chart's Deployment and DaemonSet installed with helm (installed.py).
INSTALL_MODES = ("processes", "helm")
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")   # fixed in kubelet
READY_TIMEOUT_S = 120.0
# One real cluster per machine at a time: kubelet's device plugin folder and our cgroup root
# are machine-wide. A second one waits for the first (e.g. two test runs at once).
MACHINE_LOCK = Path("/run/hami-k8s.lock")
MACHINE_LOCK_WAIT_S = 1800.0
Step = Callable[[str], None]


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_ip() -> str:
    """The address the host reaches the outside with (the API server advertises it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def wait_for(what: str, check: Callable[[], bool], timeout: float, log: Optional[Path] = None,
             alive: Callable[[], bool] = lambda: True) -> None:
    """Polls check until true; ClusterError naming what (and the end of its log) if not."""
    deadline = time.monotonic() + timeout
    while not check():
        if not alive() or time.monotonic() > deadline:
            why = "exited" if not alive() else f"not ready after {timeout:.0f} s"
            raise ClusterError(f"{what} {why}" + (f"; {log} ends:\n{tail(log)}" if log else ""))
        time.sleep(0.3)


class RealCluster(Startable):
    """The real cluster, started and stopped together (see the module's doc)."""

    def __init__(self, workdir=None, step: Step = lambda _m: None, keep: bool = False,
                 node: NodeSpec = NODE, scheduling_only: bool = False,
                 install: str = "processes", dra: bool = False):
        if install not in INSTALL_MODES:
            raise ClusterError(f"install must be one of {', '.join(INSTALL_MODES)}, "
                               f"not {install!r}")
        self.step, self.keep, self.spec, self.install = step, keep, node, install
        # Only what scheduling needs (benchmarks): no controller manager, no node.
        self.scheduling_only = scheduling_only
        self._own_root = workdir is None
        self.root = Path(workdir or tempfile.mkdtemp(prefix="hami-k8s-", dir="/tmp")).resolve()
        self.logs = self.root / "logs"
        self.bins: dict = {}
        self.procs: dict = {}                   # name -> Popen
        self.ports: dict = {}
        self.pki = None
        self.control = None
        self.node: Optional[SimNode] = None
        self.watchdog: Optional[subprocess.Popen] = None
        self._api_client = None
        self._machine_lock = None
        self.control_args: list = []             # more hami-control flags (benchmarks)
        # More KubeSchedulerConfiguration fields for both kube-schedulers (benchmarks), e.g.
        # {"percentageOfNodesToScore": 10}.
        self.scheduler_settings: dict = {}
        # The node's InternalIP: kubelet registers it, the API server reaches kubelet there.
        self.node_ip = host_ip()
        # DRA (dra.py): hami-node as a DRA kubelet plugin, containerd with CDI, and the
        # DRAConsumableCapacity gate in all four components (tests may turn it off).
        self.dra = dra
        self.feature_gates: dict = dict(DRA_GATES) if dra else {}

    @property
    def installed(self) -> bool:
        """Whether hami-control and hami-node run as the chart's Deployment and DaemonSet."""
        return self.install == "helm"

    @property
    def cgroup(self) -> str:
        """The kubelet's cgroup root, reaped at the end ('' without a node: the machine lock
        is not held, and another cluster's containers may live there)."""
        return "" if self.scheduling_only else cfg.CGROUP_ROOT

    # Paths --------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (client certificate in system:masters)."""
        return self.root / "admin.kubeconfig"

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket."""
        return self.root / "containerd" / "containerd.sock"

    @property
    def pod_logs(self) -> Path:
        """kubelet's container log folder (podLogsDir)."""
        return self.root / "pod-logs"

    @property
    def api_url(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def cdi_dir(self) -> Path:
        """containerd's CDI spec folder (DRA mode)."""
        return self.root / "cdi"

    @property
    def pgid_file(self) -> Path:
        """The process groups started, one per line (the watchdog's list)."""
        return self.root / "pgids"

    # Life cycle ---------------------------------------------------------------------------

    def _start(self) -> None:
        from hami_sim.realcluster import control_plane, node
        self.bins = ensure_components(COMPONENTS + (("helm",) if self.installed else ()),
                                      built_runtime=self.dra and not self.scheduling_only)
        if not self.scheduling_only:      # machine-wide: kubelet's plugin folder, cgroups
            self._lock_machine()
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self._start_watchdog()
        self.pki = make_pki(self.root / "pki", self.spec.name, self.node_ip)
        control_plane.start(self)
        if not self.scheduling_only:
            node.start(self)

    def _lock_machine(self) -> None:
        import fcntl
        self._machine_lock = lock = open(MACHINE_LOCK, "w")   # closing it releases it
        deadline = time.monotonic() + MACHINE_LOCK_WAIT_S
        told = False
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ClusterError(f"another real cluster has held {MACHINE_LOCK} for "
                                       f"{MACHINE_LOCK_WAIT_S:.0f} s; stop it first")
                if not told:
                    self.step(f"waiting for the real cluster already running on this machine "
                              f"({MACHINE_LOCK})")
                    told = True
                time.sleep(1.0)

    def _start_watchdog(self) -> None:
        self.watchdog = subprocess.Popen(
            [sys.executable, "-m", "hami_sim.realcluster.reaper", "--pgid-file",
             str(self.pgid_file), "--cgroup", self.cgroup, "--containerd-socket",
             str(self.containerd_socket), "--workdir", str(self.root)],
            start_new_session=True, **child_options(),
            # It holds the machine lock too: no new cluster starts before it has reaped.
            pass_fds=(self._machine_lock.fileno(),) if self._machine_lock else ())

    def spawn(self, name: str, argv: list, env: Optional[dict] = None) -> subprocess.Popen:
        """Starts a component in its own process group, output to logs/<name>.log."""
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env=env if env is not None else clean_base_env())
        self.adopt(name, proc)
        return proc

    def adopt(self, name: str, proc: subprocess.Popen) -> None:
        """Tracks a process started elsewhere (its own session) as component name."""
        self.procs[name] = proc
        with open(self.pgid_file, "a") as f:
            f.write(f"{proc.pid}\n")

    def stop_component(self, name: str) -> None:
        """Stops one component (its process group)."""
        from hami_sim.launch import stop_process
        proc = self.procs.pop(name, None)
        if proc is not None:
            stop_process(proc, grace=10.0)

    def stop(self) -> None:
        """Stops everything in reverse order, reaps containers and mounts, removes the work
        folder unless kept."""
        try:
            if self._api_client is not None:
                self._api_client.close()
                self._api_client = None
            for name in reversed(list(self.procs)):
                self.stop_component(name)
            if self.node is not None:
                self.node.stop()
        finally:
            reap(self.pgid_file, self.cgroup, str(self.containerd_socket), self.root)
            if self.watchdog is not None:
                self.watchdog.stdin.close()      # its reap finds nothing left; it exits
                self.watchdog.wait(timeout=60)
                self.watchdog = None
            if self._own_root and not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)
            if self._machine_lock is not None:
                self._machine_lock.close()
                self._machine_lock = None

    # Using it -----------------------------------------------------------------------------

    def kubectl(self, *args: str, input: Optional[str] = None, check: bool = True,
                kubeconfig: Optional[Path] = None, timeout: float = 60) -> str:
        """Runs kubectl against the cluster (admin unless kubeconfig); its stdout."""
        done = subprocess.run([self.bins["kubectl"], "--kubeconfig",
                               str(kubeconfig or self.kubeconfig), *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout if check else done.stdout + done.stderr

    def apply(self, docs: list, **kw) -> str:
        """kubectl apply of objects (JSON list)."""
        return self.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": docs}), **kw)

    @property
    def core_v1(self):
        """A CoreV1Api with admin credentials (one shared client)."""
        from kubernetes import client, config
        if self._api_client is None:
            self._api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        return client.CoreV1Api(self._api_client)

    def write_kubeconfig(self, path: Path, **user) -> Path:
        """A kubeconfig for this API server with our CA and the given user options."""
        return write_kubeconfig(path, self.api_url, ca_file=str(self.pki.ca), **user)

    def gpus(self) -> dict:
        """node name -> the GPUs its agent published (DeviceInfo list)."""
        raw = self.core_v1.list_node(_preload_content=False).data
        return {n["metadata"]["name"]: published_gpus(n) for n in json.loads(raw)["items"]}

    def problems(self, expected_restarts=None) -> list:
        """What stopped running, in words (empty: all well); expected_restarts: the installed
        mode's containers restarted on purpose, (pod, container) -> how often."""
        found = [f"{name} exited ({p.returncode}); its log ends:\n"
                 f"{tail(self.logs / (name + '.log'), 5)}"
                 for name, p in self.procs.items() if p.poll() is not None]
        if self.node is not None and self.node.agent is not None and not self.node.alive():
            found.append(f"hami-node exited; its log ends:\n{tail(self.node.agent_log, 5)}")
        if self.installed:
            from hami_sim.realcluster.installed import restarts
            found += restarts(self, expected_restarts)
        return found

    def new_node_agent(self) -> SimNode:
        """The node's hami-node over its simulated GPUs (not started)."""
        return SimNode(self.spec, self.root / "node", None, clean_base_env(),
                       plugin_dir=DEVICE_PLUGIN_DIR)

