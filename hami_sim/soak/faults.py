"""The soak's faults on a RealCluster, each injected and then watched until the cluster has
recovered from it; the time to recover is measured from the moment the fault ends (the kill,
the resume, the restored configuration) until what it broke works again. Faults here are the
processes mode's (hami-control and hami-node as host processes); installed_faults.py has the
installed mode's (the chart's pods), and the two kinds only that mode has."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from hami_common import constants as C
from hami_sim.realcluster import config as cfg
from hami_sim.realcluster import control_plane
from hami_sim.realcluster.cluster import free_port
from hami_sim.realcluster.node import allocatable, spawn_kubelet

RECOVERY_TIMEOUT_S = 240.0
ETCD_PAUSE_S = 4.0
WEBHOOK_DOWN_S = 8.0
XID = 79                         # fallen off the bus: critical
GAP_SLACK_S = 2.0                # managedFields' times have whole seconds
LEASE_NS, CONTROL_LEASE, SCHEDULER_LEASE = "hami-system", "hami-control", "hami-scheduler"


class FaultError(RuntimeError):
    """The cluster did not recover from a fault in time (the message says from what)."""


@dataclass
class FaultResult:
    """One fault injected: when (seconds into the soak), and its recovery or what failed."""

    kind: str
    at: float
    recovered_s: float = -1.0
    error: str = ""


def until(check: Callable[[], object], what: str, timeout: float = RECOVERY_TIMEOUT_S,
          interval: float = 0.5):
    """Polls check until truthy (its value); FaultError naming what after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except Exception:           # the API server itself may be down meanwhile
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise FaultError(f"{what} not within {timeout:.0f} s")
        time.sleep(interval)


class Gaps:
    """Spans of wall time a fault opened, [kind, start, end or None]. Kept: when
    kubelet had no device plugin connected (hami-node killed, kubelet restarted; until
    hami-node registered again: kubelet refuses every GPU pod it admits then, as on any
    Kubernetes node whose device plugin restarts), and when a GPU had just failed (an XID,
    until hami-node published it unhealthy: a pod bound to it a moment before is refused at
    Allocate, as a pod starting on a GPU that falls off the bus fails on any node). A third:
    while containerd restarted (a container that ends then may have its exit status lost:
    kubelet reports exit 255, reason Unknown)."""

    def __init__(self):
        self.gaps: list = []

    def open(self, kind: str) -> list:
        """A gap starting now (set its [2] to time.time() when it ends)."""
        gap = [kind, time.time(), None]
        self.gaps.append(gap)
        return gap

    def at(self, t: float) -> str:
        """The fault kind of the gap around wall time t (give or take GAP_SLACK_S; one still
        open lasts until now), '' if none."""
        for kind, start, end in list(self.gaps):
            if start - GAP_SLACK_S <= t <= (end or time.time()) + GAP_SLACK_S:
                return kind
        return ""


class Faults:
    """Injects faults into one RealCluster (processes mode); one lock per component, so a
    fault never hits a component another fault is still restarting (faults of different kinds
    overlap)."""

    # kind -> the component it hits, where kinds share one (default: the kind's own).
    COMPONENTS: dict = {}

    def __init__(self, cluster):
        self.c = cluster
        self.locks = {self.component(k): threading.Lock() for k in KINDS}
        self.want = cluster.spec.split * len(cluster.spec.gpus)
        self.plugin_gaps = Gaps()
        self.gpu_failures = Gaps()
        self.runtime_restarts = Gaps()       # containerd down (it may lose an exit status)

    def component(self, kind: str) -> str:
        """What a fault of kind hits (one fault at a time per component)."""
        return self.COMPONENTS.get(kind, kind)

    def problems(self) -> list:
        """What stopped running, in words (the cluster's own list)."""
        return self.c.problems()

    def restarts_apart(self) -> list:
        """Component restarts that Kubernetes' own design makes, in words (none here: the
        processes mode runs kube-scheduler without leader election)."""
        return []

    # Probes ----------------------------------------------------------------------------

    def _kubectl_json(self, *args) -> dict:
        out = self.c.kubectl(*args, "-o", "json", check=False, timeout=15)
        return json.loads(out) if out.strip().startswith("{") else {}

    def lease_holder(self, name: str) -> str:
        """The holder of a Lease in hami-system ('' if none or unreadable)."""
        lease = self._kubectl_json("get", "lease", name, "-n", LEASE_NS)
        return (lease.get("spec") or {}).get("holderIdentity") or ""

    def api_ready(self) -> bool:
        """Whether the API server says it is ready (etcd included)."""
        return self.c.kubectl("get", "--raw", "/readyz", check=False, timeout=10).strip() == "ok"

    def webhook_admits(self) -> bool:
        """Whether a GPU pod passes our webhook now (a server-side dry run: nothing stored)."""
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "soak-probe"},
               "spec": {"containers": [{"name": "main", "image": "probe", "resources": {
                   "limits": {C.RESOURCE_GPU: "1", C.RESOURCE_MEM: "64"}}}]}}
        out = self.c.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                             input=json.dumps(pod), check=False, timeout=20)
        try:
            return json.loads(out)["spec"]["schedulerName"] == C.SCHEDULER_NAME
        except (ValueError, KeyError):
            return False

    def node_serving(self) -> bool:
        """Node Ready and every virtual GPU offered by kubelet."""
        from hami_sim.realcluster.node import node_ready
        return node_ready(self.c) and allocatable(self.c) == self.want

    def registrations(self) -> int:
        """Device plugin registrations kubelet has logged (every kubelet's log is kept)."""
        return (self.c.logs / "kubelet.log").read_text(errors="replace").count(
            "Got registration request from device plugin")

    def gpu_healthy(self, index: int) -> bool:
        """Whether the node's register annotation says GPU index is healthy."""
        gpus = self.c.gpus().get(self.c.spec.name) or []
        return any(d.index == index and d.health for d in gpus)

    # The faults ------------------------------------------------------------------------

    def _restart_same(self, name: str, env=None) -> None:
        argv = list(self.c.procs[name].args)
        self.c.stop_component(name)
        self.c.spawn(name, argv, env=env)

    def hami_node_killed(self) -> float:
        """SIGKILL hami-node, start it again a second later (its service manager would)."""
        before = self.registrations()
        gap = self.plugin_gaps.open("hami-node-killed")
        os.killpg(self.c.node.agent.pid, signal.SIGKILL)
        self.c.node.agent.wait(timeout=10)
        time.sleep(1.0)
        start = time.monotonic()
        # spawn_agent's own wait also asks hami-control, which another fault may have down.
        node = self.c.node
        node.start_agent(self.c.root / "hami-node.kubeconfig", ["--pass-device-specs", "false"])
        with open(self.c.pgid_file, "a") as f:
            f.write(f"{node.agent.pid}\n")
        node.read_ready_line()
        until(lambda: self.registrations() > before, "hami-node registered with kubelet")
        gap[2] = time.time()
        until(self.node_serving, "kubelet offering every GPU again")
        return time.monotonic() - start

    def control_leader_killed(self) -> float:
        """SIGKILL hami-control (the leader: the only replica here), start a new one; until
        the new one holds the Lease and the webhook answers."""
        old = self.lease_holder(CONTROL_LEASE)
        proc = self.c.procs.pop("hami-control")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        start = time.monotonic()
        control_plane.start_control(self.c)
        until(lambda: self.lease_holder(CONTROL_LEASE) not in ("", old),
              "a new hami-control holding the Lease")
        until(self.webhook_admits, "the webhook admitting GPU pods")
        return time.monotonic() - start

    def scheduler_restarted(self) -> float:
        """kube-scheduler (deploy/'s, with our extender) stopped and started; until a new
        instance holds its Lease."""
        old = self.lease_holder(SCHEDULER_LEASE)
        self._restart_same("kube-scheduler")
        start = time.monotonic()
        until(lambda: self.lease_holder(SCHEDULER_LEASE) not in ("", old),
              "the new kube-scheduler holding its Lease")
        return time.monotonic() - start

    def kubelet_restarted(self) -> float:
        """kubelet stopped and started (the containers keep running); until hami-node has
        registered with the new one and every GPU is offered (the node's Ready condition
        alone is the old kubelet's for a while)."""
        before = self.registrations()
        gap = self.plugin_gaps.open("kubelet-restarted")
        self.c.stop_component("kubelet")
        start = time.monotonic()
        spawn_kubelet(self.c)
        until(lambda: self.registrations() > before, "hami-node registered with the new kubelet")
        gap[2] = time.time()
        until(self.node_serving, "kubelet offering every GPU again")
        return time.monotonic() - start

    def apiserver_restarted(self) -> float:
        """kube-apiserver stopped and started."""
        self._restart_same("kube-apiserver")
        start = time.monotonic()
        until(self.api_ready, "kube-apiserver ready")
        return time.monotonic() - start

    def etcd_paused(self) -> float:
        """etcd stopped (SIGSTOP) for a few seconds, then continued."""
        pid = self.c.procs["etcd"].pid
        os.killpg(pid, signal.SIGSTOP)
        try:
            time.sleep(ETCD_PAUSE_S)
        finally:
            os.killpg(pid, signal.SIGCONT)
        start = time.monotonic()
        until(self.api_ready, "kube-apiserver ready (etcd back)")
        return time.monotonic() - start

    def containerd_restarted(self) -> float:
        """containerd stopped and started (the containers keep running under their shims)."""
        from hami_sim.demo.cluster import clean_base_env
        env = clean_base_env()
        env["PATH"] = f"{os.path.dirname(self.c.bins['containerd'])}:" \
                      f"{env.get('PATH', '/usr/bin:/bin')}"
        down = self.runtime_restarts.open("containerd-restarted")
        self._restart_same("containerd", env=env)
        start = time.monotonic()
        try:
            until(lambda: subprocess.run([self.c.bins["ctr"], "--address",
                                          str(self.c.containerd_socket), "version"],
                                         capture_output=True, timeout=10).returncode == 0,
                  "containerd answering")
        finally:
            down[2] = time.time()
        until(self.node_serving, "the node Ready")
        return time.monotonic() - start

    def webhook_unreachable(self) -> float:
        """The webhook configuration pointed at a port nobody listens on for a while (GPU
        pods are refused meanwhile: failurePolicy Fail), then restored."""
        c = self.c
        dead = cfg.webhook_config(f"https://127.0.0.1:{free_port()}", c.pki.ca.read_bytes())
        c.apply([dead])
        try:
            time.sleep(WEBHOOK_DOWN_S)
        finally:
            until(lambda: c.apply([cfg.webhook_config(c.control.url, c.pki.ca.read_bytes())],
                                  check=False) is not None, "the webhook configuration restored")
        start = time.monotonic()
        until(self.webhook_admits, "the webhook admitting GPU pods")
        return time.monotonic() - start

    def gpu_xid(self, index: int = 0) -> float:
        """A critical XID on a GPU: hami-node marks it unhealthy; until it is healthy again
        (hami-node's healthRecoverySeconds of quiet)."""
        failure = self.gpu_failures.open("gpu-xid")
        subprocess.run([sys.executable, "-m", "hami_sim.cli", "inject-xid", str(index),
                        str(XID)], env=self.c.node.env, check=True, timeout=30,
                       capture_output=True)
        start = time.monotonic()
        try:
            until(lambda: not self.gpu_healthy(index), f"GPU {index} marked unhealthy",
                  timeout=60)
        finally:
            failure[2] = time.time()
        until(lambda: self.gpu_healthy(index), f"GPU {index} healthy again")
        return time.monotonic() - start

    def inject(self, kind: str, at: float) -> FaultResult:
        """Injects one fault of kind and waits for the recovery (FaultResult either way)."""
        result = FaultResult(kind, at)
        with self.locks[self.component(kind)]:
            try:
                result.recovered_s = getattr(self, KINDS[kind])()
            except Exception as e:        # a failed injection is a finding, not a crash
                result.error = f"{type(e).__name__}: {e}"
        return result


# kind -> method; the order the schedule cycles through (the slow XID first).
KINDS = {"gpu-xid": "gpu_xid", "hami-node-killed": "hami_node_killed",
         "control-leader-killed": "control_leader_killed",
         "kube-scheduler-restarted": "scheduler_restarted",
         "kubelet-restarted": "kubelet_restarted",
         "kube-apiserver-restarted": "apiserver_restarted", "etcd-paused": "etcd_paused",
         "containerd-restarted": "containerd_restarted",
         "webhook-unreachable": "webhook_unreachable",
         "control-rolling-update": "control_rolling_update", "helm-rollback": "helm_rollback"}
# What each install mode can inject: the processes mode has no Deployment to roll and no
# release to roll back; the installed mode has every kind (installed_faults.py).
INSTALLED_ONLY = ("control-rolling-update", "helm-rollback")
PROCESS_KINDS = tuple(k for k in KINDS if k not in INSTALLED_ONLY)
INSTALLED_KINDS = tuple(KINDS)


def kinds_for(installed: bool) -> tuple:
    """The fault kinds of an install mode (installed: the chart's)."""
    return INSTALLED_KINDS if installed else PROCESS_KINDS


def faults_for(cluster) -> Faults:
    """The Faults of a RealCluster's install mode."""
    if cluster.installed:
        from hami_sim.soak.installed_faults import InstalledFaults
        return InstalledFaults(cluster)
    return Faults(cluster)
