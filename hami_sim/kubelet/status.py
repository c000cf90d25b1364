"""What the kubelet double writes to the API server: node device counts, pod status and
events. Failed writes are logged and retried on the next sync."""
from __future__ import annotations

import hashlib
import time

from kubernetes.client.rest import ApiException

from hami_sim.apiserver.strategy import rfc3339


def container_id(pod_uid: str, name: str) -> str:
    """A container's ID as a real kubelet reports it (`<runtime>://<64 hex digits>`), stable
    per pod and container, so node agents can map cgroups to containers as on a real node."""
    return "containerd://" + hashlib.sha256(f"{pod_uid}/{name}".encode()).hexdigest()


class StatusWriter:
    """Node status (capacity/allocatable of device resources), pod phase, events."""

    def __init__(self, core_v1, node_name: str, log):
        self._v1 = core_v1
        self._node = node_name
        self._log = log
        self._published: dict[str, tuple[int, int]] | None = None
        self._pending: dict[tuple[str, str], dict] = {}  # (ns, pod) -> status patch to retry

    def node_devices(self, counts: dict[str, tuple[int, int]]) -> None:
        """Patches capacity (all devices) and allocatable (healthy ones) when they change."""
        if counts == self._published:
            return
        body = {"status": {"capacity": {r: str(c) for r, (c, _) in counts.items()},
                           "allocatable": {r: str(a) for r, (_, a) in counts.items()}}}
        try:
            self._v1.patch_node_status(self._node, body)
            self._published = dict(counts)
        except ApiException as e:
            self._log(f"cannot patch node status ({e.status} {e.reason}); will retry")

    def pod_running(self, pod: dict) -> None:
        """Marks an admitted pod Running with every container started."""
        spec = pod.get("spec", {})
        now = rfc3339(time.time())
        uid = pod["metadata"].get("uid", "")
        statuses = [{"name": c["name"], "ready": True, "started": True, "restartCount": 0,
                     "image": c.get("image", ""), "imageID": "",
                     "containerID": container_id(uid, c["name"]),
                     "state": {"running": {"startedAt": now}}}
                    for c in spec.get("containers", [])]
        conditions = [{"type": t, "status": "True", "lastTransitionTime": now}
                      for t in ("Initialized", "Ready", "ContainersReady")]
        self._queue(pod["metadata"]["namespace"], pod["metadata"]["name"],
                    {"status": {"phase": "Running", "startTime": now, "hostIP": "127.0.0.1",
                                "conditions": conditions, "containerStatuses": statuses}})

    def pod_phase(self, namespace: str, name: str, phase: str, message: str,
                  exit_codes: dict | None = None) -> None:
        """Sets a finished pod's phase and, given each container's exit code, its containers
        terminated and the pod no longer Ready, as kubelet does (kubectl then shows the pod
        Completed or Error, 0/N ready)."""
        body = {"status": {"phase": phase}}
        if message:
            body["status"]["message"] = message
        if exit_codes:
            now = rfc3339(time.time())
            body["status"]["containerStatuses"] = [
                {"name": c, "ready": False, "started": False, "restartCount": 0, "image": "",
                 "imageID": "", "state": {"terminated": {
                     "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                     "finishedAt": now}}} for c, code in exit_codes.items()]
            body["status"]["conditions"] = [
                {"type": t, "status": "False", "reason": "PodCompleted",
                 "lastTransitionTime": now} for t in ("Ready", "ContainersReady")]
        self._queue(namespace, name, body)

    def _queue(self, namespace: str, name: str, body: dict) -> None:
        self._pending[(namespace, name)] = body
        self.flush()

    def flush(self) -> None:
        """Sends the pod status patches not yet accepted."""
        for (namespace, name), body in list(self._pending.items()):
            try:
                self._v1.patch_namespaced_pod_status(name, namespace, body)
            except ApiException as e:
                if e.status != 404:
                    self._log(f"cannot patch status of {namespace}/{name} ({e.status}); "
                              "will retry")
                    continue
            self._pending.pop((namespace, name), None)

    def pod_event(self, pod: dict, reason: str, message: str) -> None:
        """A Warning event on the pod, as kubelet reports admission failures."""
        meta = pod["metadata"]
        now = rfc3339(time.time())
        event = {"metadata": {"generateName": meta["name"] + ".",
                              "namespace": meta["namespace"]},
                 "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                                    "namespace": meta["namespace"], "uid": meta["uid"]},
                 "reason": reason, "message": message, "type": "Warning", "count": 1,
                 "firstTimestamp": now, "lastTimestamp": now,
                 "source": {"component": "kubelet", "host": self._node}}
        try:
            self._v1.create_namespaced_event(meta["namespace"], event)
        except ApiException as e:
            self._log(f"cannot record event {reason} on {meta['name']} ({e.status})")
