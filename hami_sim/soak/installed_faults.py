"""The soak's faults in the installed mode (`--installed`: hami-control and hami-node run as
the chart's Deployment and DaemonSet, installed by `helm install`). Host processes (etcd,
kube-apiserver, kubelet, containerd, the simulated GPUs) are hit as in the processes mode.
What runs in pods is hit there: a SIGKILL goes to the processes of one container (found by
their cgroup, which names the container's ID) and kubelet restarts it, as after a crash; the
webhook is made unreachable by pointing its configuration at a port its Service lacks. Two
kinds exist only here: a rolling update of hami-control, and a `helm upgrade` rolled back.

Each fault that touches hami-control's pods (its leader killed, the leading kube-scheduler
beside it killed, a rolling update, an upgrade and its rollback) holds one lock, "hami-control":
two rollouts of one Deployment at once would measure neither."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from hami_common import constants as C
from hami_common.node_lock import parse_time
from hami_sim.realcluster.images import WORKLOAD_IMAGE
from hami_sim.realcluster.installed import (CHART, NAMESPACE, RELEASE, control_pods, get_json,
                                            helm, ready_endpoints, release_pods, rollout_done)
from hami_sim.soak.faults import (CONTROL_LEASE, SCHEDULER_LEASE, WEBHOOK_DOWN_S, FaultError,
                                  Faults, until)
from hami_sim.soak.lease_loss import LeaseLosses, previous_output

CONTROL, NODE = "hami-control", "hami-node"
ROLLED_ANNO = "soak.hami.io/rolled-at"        # the rolling update's change to the pod template
POLICY_VALUE = "control.nodeSchedulerPolicy"   # what the upgrade changes, then rolls back
POLICY_ORIGINAL, POLICY_UPGRADED = "fragaware", "spread"
UPGRADE_ROLLOUT_S = 240.0
# For a leader to kill: a moment without one (a handover, a container restarting) is waited out.
LEADER_WAIT_S = 60.0
PROBE_PREFIX = "soak-probe-bind"


def container_pids(container_id: str, proc: Path = Path("/proc")) -> list:
    """The host PIDs of a container's processes: those whose cgroup path names its ID."""
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if container_id in (entry / "cgroup").read_text():
                pids.append(int(entry.name))
        except OSError:                      # the process ended meanwhile
            continue
    return pids


def container_id(pod: dict, container: str) -> str:
    """The runtime's ID of a pod's running container ('' when it is not running)."""
    for s in (pod.get("status") or {}).get("containerStatuses") or []:
        if s["name"] == container and "running" in (s.get("state") or {}):
            return (s.get("containerID") or "").split("://")[-1]
    return ""


def micro_time(stamp: str) -> float:
    """A Lease's MicroTime as a wall-clock timestamp (0 when absent)."""
    return parse_time(stamp).timestamp() if stamp else 0.0


class InstalledFaults(Faults):
    """Injects faults into a RealCluster in the installed mode (see the module's doc)."""

    COMPONENTS = {kind: CONTROL for kind in ("control-leader-killed", "kube-scheduler-restarted",
                                             "control-rolling-update", "helm-rollback")}

    def __init__(self, cluster, proc: Path = Path("/proc")):
        super().__init__(cluster)
        self.proc = proc                     # the host's processes (tests: a folder)
        self.killed: dict = {}               # (pod, container) -> SIGKILLs sent by a fault
        self._killed_lock = threading.Lock()
        self._probes = 0
        self.lease_losses = LeaseLosses(lambda: release_pods(cluster), previous_output(cluster),
                                        self._expect_restart)

    def problems(self) -> list:
        """What stopped running, in words; a container restarted no more often than a fault
        killed it is not a problem."""
        with self._killed_lock:
            expected = dict(self.killed)
        return self.c.problems(expected_restarts=expected)

    def restarts_apart(self) -> list:
        """Restarts Kubernetes' design makes (a lost Lease during an API outage), in words."""
        return list(self.lease_losses.found)

    def _expect_restart(self, pod: str, container: str) -> None:
        with self._killed_lock:
            self.killed[(pod, container)] = self.killed.get((pod, container), 0) + 1

    # Probes ----------------------------------------------------------------------------

    def pod(self, name: str) -> dict:
        """A pod of the release ({} when absent)."""
        return get_json(self.c, "pod", name)

    def lease(self, name: str) -> dict:
        """A Lease's spec in the release's namespace ({} when unreadable)."""
        return get_json(self.c, "lease", name).get("spec") or {}

    def leader_serving(self, since: float, old_pods: tuple = ()) -> bool:
        """Whether a hami-control replica that is not among old_pods renewed the Lease after
        since (wall clock: a living one, not the one killed), is Ready, and is behind the
        extender's Service."""
        spec = self.lease(CONTROL_LEASE)
        holder = spec.get("holderIdentity") or ""
        if not holder or holder in old_pods or micro_time(spec.get("renewTime")) <= since:
            return False
        ready = {c["name"]: c.get("ready") for c in
                 (self.pod(holder).get("status") or {}).get("containerStatuses") or []}
        return bool(ready.get(CONTROL)) and bool(ready_endpoints(self.c, "hami-control-leader"))

    def extender_binds(self) -> bool:
        """Whether a GPU pod passes the webhook and is bound by kube-scheduler through the
        extender now (a probe pod, deleted afterwards)."""
        self._probes += 1
        name = f"{PROBE_PREFIX}-{self._probes}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "main", "image": WORKLOAD_IMAGE,
                                        "imagePullPolicy": "Never", "command": ["true"],
                                        "resources": {"limits": {C.RESOURCE_GPU: "1",
                                                                 C.RESOURCE_MEM: "64"}}}]}}
        self.c.kubectl("create", "-f", "-", input=json.dumps(pod), timeout=30)
        try:
            until(lambda: self.c.kubectl("get", "pod", name, "-o", "jsonpath={.spec.nodeName}",
                                         check=False, timeout=15).strip() == self.c.spec.name,
                  f"the probe pod {name} bound through the extender")
        finally:
            self.c.kubectl("delete", "pod", name, "--wait=false", "--grace-period=0",
                           check=False, timeout=30)
        return True

    def control_serving(self, since: float, old_pods: tuple = ()) -> None:
        """Waits until hami-control serves again: its rollout complete, a new leader (one of
        the Deployment's pods not in old_pods) holding the Lease, the webhook admitting and the
        extender binding."""
        until(lambda: rollout_done(self.c), "hami-control's rollout complete")
        until(lambda: self.leader_serving(since, old_pods),
              "a new hami-control leader holding the Lease, Ready, behind the extender Service")
        until(self.webhook_admits, "the webhook admitting GPU pods")
        self.extender_binds()

    # Killing a container -----------------------------------------------------------------

    def running_leader(self, lease: str, container: str) -> tuple:
        """(identity, pod) of a Lease's holder whose container runs (processes in its
        cgroup), waited for up to LEADER_WAIT_S. Seen in 10-minute soaks: no holder for a
        moment, and a kube-scheduler gone (its Lease lost while kube-apiserver restarted) that
        the pod's status, not yet updated, still called running."""
        def found():
            holder = self.lease_holder(lease)
            pod = holder.split("_")[0]          # kube-scheduler's identity: '<pod>_<uuid>'
            cid = container_id(self.pod(pod), container) if holder else ""
            return (holder, pod) if cid and container_pids(cid, self.proc) else None
        return until(found, f"a running {container} holding the Lease {lease}",
                     timeout=LEADER_WAIT_S)

    def kill_leader(self, lease: str, container: str) -> tuple:
        """Kills the running holder of a Lease (running_leader); (identity, pod). One that
        ended between the look and the kill (the hour's soak met a kube-scheduler exiting on
        its lost Lease then) is looked for again, up to LEADER_WAIT_S."""
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            holder, pod = self.running_leader(lease, container)
            try:
                self.kill_container(pod, container)
                return holder, pod
            except FaultError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def kill_container(self, pod_name: str, container: str) -> None:
        """SIGKILL to every process of one container of a pod of the release (kubelet then
        restarts it); counted, so that the restart is not reported as a problem."""
        cid = container_id(self.pod(pod_name), container)
        pids = container_pids(cid, self.proc) if cid else []
        if not pids:
            raise FaultError(f"no running process of {pod_name}/{container} to kill "
                             f"(container ID {cid or 'unknown'})")
        with self._killed_lock:
            key = (pod_name, container)
            self.killed[key] = self.killed.get(key, 0) + 1
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass                        # ended on its own meanwhile: killed either way

    # The faults ------------------------------------------------------------------------

    def hami_node_killed(self) -> float:
        """SIGKILL hami-node's container (kubelet restarts it); until it registered with
        kubelet again and every GPU is offered. Its plugin gap noted, as in the processes
        mode (kubelet refuses a GPU pod admitted meanwhile: counted apart)."""
        pods = get_json(self.c, "pods", "-l", f"app.kubernetes.io/name={NODE}").get("items")
        if not pods:
            raise FaultError("no hami-node pod to kill")
        before = self.registrations()
        gap = self.plugin_gaps.open("hami-node-killed")
        self.kill_container(pods[0]["metadata"]["name"], NODE)
        start = time.monotonic()
        until(lambda: self.registrations() > before, "hami-node registered with kubelet")
        gap[2] = time.time()
        until(self.node_serving, "kubelet offering every GPU again")
        return time.monotonic() - start

    def control_leader_killed(self) -> float:
        """SIGKILL the hami-control container of the Lease holder's pod; until a living
        replica (the other one, or the killed one restarted) renewed the Lease, is Ready and
        behind the extender's Service, and the webhook admits."""
        self.kill_leader(CONTROL_LEASE, CONTROL)
        killed_at = time.time()      # a renewal after this is a living replica's
        start = time.monotonic()
        until(lambda: self.leader_serving(killed_at), "a living hami-control holding the Lease")
        until(self.webhook_admits, "the webhook admitting GPU pods")
        return time.monotonic() - start

    def scheduler_restarted(self) -> float:
        """SIGKILL the leading kube-scheduler (the container beside hami-control in the
        holder's pod: its identity is '<pod>_<uuid>'); until a new instance holds the Lease."""
        old, _ = self.kill_leader(SCHEDULER_LEASE, "kube-scheduler")
        start = time.monotonic()
        until(lambda: self.lease_holder(SCHEDULER_LEASE) not in ("", old),
              "a new kube-scheduler holding its Lease")
        return time.monotonic() - start

    def _webhook_port(self, port: int) -> None:
        patch = [{"op": "replace", "path": "/webhooks/0/clientConfig/service/port",
                  "value": port}]
        self.c.kubectl("patch", "mutatingwebhookconfiguration", CONTROL, "--type=json", "-p",
                       json.dumps(patch), timeout=20)

    def webhook_unreachable(self) -> float:
        """The webhook configuration pointed at a port its Service lacks for a while (GPU pods
        are refused meanwhile: failurePolicy Fail), then back at 443."""
        self._webhook_port(8)
        try:
            time.sleep(WEBHOOK_DOWN_S)
        finally:
            until(lambda: self._webhook_port(443) or True, "the webhook configuration restored")
        start = time.monotonic()
        until(self.webhook_admits, "the webhook admitting GPU pods")
        return time.monotonic() - start

    def apiserver_restarted(self) -> float:
        """As in the processes mode; a kube-scheduler that lost its Lease meanwhile is
        counted apart (lease_loss.py)."""
        return self.lease_losses.around("kube-apiserver-restarted", super().apiserver_restarted)

    def etcd_paused(self) -> float:
        """As in the processes mode; a lost Lease counted apart as above."""
        return self.lease_losses.around("etcd-paused", super().etcd_paused)

    def control_rolling_update(self) -> float:
        """A changed pod template (an annotation) rolled out over hami-control's replicas, as
        the chart sets the Deployment (no strategy: Kubernetes' 25% maxSurge and
        maxUnavailable, one new pod before an old one goes); until the rollout is complete and
        a new leader serves (control_serving)."""
        old = tuple(control_pods(self.c))
        since = time.time()
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        patch = {"spec": {"template": {"metadata": {"annotations": {ROLLED_ANNO: stamp}}}}}
        self.c.kubectl("patch", "deployment", CONTROL, "-n", NAMESPACE, "-p", json.dumps(patch),
                       timeout=30)
        start = time.monotonic()
        self.control_serving(since, old)
        return time.monotonic() - start

    def revision(self) -> int:
        """The release's current revision (`helm status`)."""
        return int(json.loads(helm(self.c, "status", RELEASE, "-n", NAMESPACE, "-o",
                                   "json"))["version"])

    def rolled_back(self, to: int, revision: int) -> bool:
        """Whether the release is deployed at revision, a rollback to revision to, and the
        Deployment runs the original value again."""
        status = json.loads(helm(self.c, "status", RELEASE, "-n", NAMESPACE, "-o", "json"))
        info = status.get("info") or {}
        if (status.get("version"), info.get("status")) != (revision, "deployed") or \
                f"Rollback to {to}" not in (info.get("description") or ""):
            return False
        args = [a for ctr in get_json(self.c, "deployment", CONTROL)["spec"]["template"]
                ["spec"]["containers"] if ctr["name"] == CONTROL for a in ctr.get("args") or []]
        return f"--node-scheduler-policy={POLICY_ORIGINAL}" in args

    def helm_rollback(self) -> float:
        """`helm upgrade` with a changed value (hami-control's node policy), its rollout
        awaited (the upgrade served), then `helm rollback` to the revision before; until the
        release is at the rollback's revision with the original value and hami-control serves
        again from pods the rollback made (control_serving). Timed from the rollback."""
        before = self.revision()
        helm(self.c, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
             "--set", f"{POLICY_VALUE}={POLICY_UPGRADED}")
        until(lambda: self.revision() == before + 1 and rollout_done(self.c),
              f"the upgrade to revision {before + 1} rolled out", timeout=UPGRADE_ROLLOUT_S)
        old = tuple(control_pods(self.c))
        since = time.time()
        helm(self.c, "rollback", RELEASE, str(before), "-n", NAMESPACE)
        start = time.monotonic()
        until(lambda: self.rolled_back(before, before + 2),
              f"the release at revision {before + 2}, rolled back to {before}")
        self.control_serving(since, old)
        return time.monotonic() - start
