"""Takes the auditor's snapshots from a running cluster: the API server (pods, nodes,
ResourceClaims), the simulated driver's state file (each process's memory by the driver's
count), the host's /proc (which pod and container each of those processes runs in, from its
cgroup), the shim folder's per-container directories, and hami-node's /metrics. Nothing of
hami-control's memory: an independent reading."""
from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Callable, Optional

from hami_sim.audit.checks import now_utc
from hami_sim.audit.model import DriverProcess, Snapshot
from hami_sim.gpu.state import STATE_FILE, StateError, device_status, read_state

# kubelet's cgroupfs layout: .../pod<uid>/<container id> (the systemd driver writes the uid
# with underscores and the id as cri-containerd-<id>.scope).
_CGROUP = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_]"
                     r"[0-9a-f]{12})(?:\.slice)?/(?:cri-containerd-)?([0-9a-f]{64})")


class SourceError(RuntimeError):
    """A snapshot could not be taken (the API server not answering, during a fault)."""


def pod_of_pid(pid: int, proc: Path = Path("/proc")) -> tuple:
    """(pod uid, container id) of a host process, from its cgroup; ('', '') outside pods."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return "", ""
    m = _CGROUP.search(text)
    return (m.group(1).replace("_", "-"), m.group(2)) if m else ("", "")


def driver_processes(state_dir: Path, proc: Path = Path("/proc")) -> list:
    """Every live process on every simulated GPU, with its pod and container."""
    try:
        devices = device_status(read_state(state_dir / STATE_FILE))
    except StateError:
        return []
    out = []
    for dev in devices:
        for p in dev.processes:
            uid, cid = pod_of_pid(p.pid, proc)
            out.append(DriverProcess(dev.uuid, p.pid, p.used_bytes, uid, cid))
    return out


def accounting_dirs(shim_dir: Path) -> list:
    """The per-container directories hami-node's Allocate made under the shim folder."""
    try:
        return sorted(p.name for p in (shim_dir / "containers").iterdir() if p.is_dir())
    except OSError:
        return []


def fetch_metrics(url: str, timeout: float = 3.0) -> Optional[str]:
    """hami-node's /metrics text (None when it does not answer: it may be restarting)."""
    if not url or url == "-":              # hami-node prints '-' when metrics are off
        return None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode(errors="replace")
    except (OSError, ValueError):
        return None


class ClusterSource:
    """Snapshots of one cluster: an ApiClient (admin), the simulated GPUs' state folder, the
    shim folder and a callable giving hami-node's current metrics URL."""

    def __init__(self, api_client, state_dir: Path, shim_dir: Path,
                 metrics_url: Callable[[], str] = lambda: "", timeout: float = 10.0):
        self.api, self.state_dir, self.shim_dir = api_client, state_dir, shim_dir
        self.metrics_url, self.timeout = metrics_url, timeout

    def _get(self, path: str, missing_ok: bool = False) -> list:
        try:
            resp = self.api.call_api("GET", self.api.configuration.host + path,
                                     header_params={"Accept": "application/json"},
                                     _request_timeout=self.timeout)
            data = resp.read()
        except Exception as e:      # urllib3's errors (MaxRetryError...) are not OSErrors
            raise SourceError(f"GET {path}: {type(e).__name__}: {e}") from e
        if missing_ok and resp.status == 404:
            return []
        if resp.status != 200:
            raise SourceError(f"GET {path}: {resp.status} {resp.reason}")
        try:
            return json.loads(data).get("items") or []
        except ValueError as e:
            raise SourceError(f"GET {path}: not JSON ({e})") from e

    def snapshot(self) -> Snapshot:
        """One reading of everything (SourceError when the API server does not answer)."""
        now = now_utc()
        pods = self._get("/api/v1/pods")
        nodes = self._get("/api/v1/nodes")
        claims = self._get("/apis/resource.k8s.io/v1/resourceclaims", missing_ok=True)
        return Snapshot(now=now, pods=pods, nodes=nodes, claims=claims,
                        processes=driver_processes(self.state_dir),
                        accounting_dirs=accounting_dirs(self.shim_dir),
                        metrics=fetch_metrics(self.metrics_url()))


def real_cluster_source(cluster) -> ClusterSource:
    """The ClusterSource of a RealCluster (hami_sim.realcluster) with its one node."""
    from kubernetes import config
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    node = cluster.node

    def url() -> str:
        base = node.metrics_url
        if cluster.installed:       # the DaemonSet's pod, wherever it is now
            base = installed_metrics_url(api)
        return base if base in ("", "-") or base.endswith("/metrics") \
            else base.rstrip("/") + "/metrics"
    return ClusterSource(api, node.state_dir, node.shim_dir, url)


def installed_metrics_url(api, timeout: float = 5.0) -> str:
    """The installed mode's hami-node /metrics: its DaemonSet pod's address and metrics port
    ('' while there is no such pod or the API server does not answer)."""
    from hami_sim.realcluster.installed import NAMESPACE, NODE_METRICS_PORT
    path = (f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app.kubernetes.io%2F"
            f"name%3Dhami-node")
    try:
        resp = api.call_api("GET", api.configuration.host + path,
                            header_params={"Accept": "application/json"},
                            _request_timeout=timeout)
        pods = json.loads(resp.read()).get("items") or []
    except Exception:           # urllib3's errors; the next pass asks again
        return ""
    ips = [(p.get("status") or {}).get("podIP") for p in pods]
    return next((f"http://{ip}:{NODE_METRICS_PORT}/metrics" for ip in ips if ip), "")
