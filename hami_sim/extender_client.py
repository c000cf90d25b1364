"""Stand-ins for the callers of hami-control: the API server's webhook call, kube-scheduler's
filter and bind calls, and the node agent's part after a bind (bind-phase, lock release).

Used by the tests, the filter benchmark and the trace replay over HTTP. Keep-alive HTTP(S)
connections, one per thread.
"""
from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
from urllib.parse import urlsplit

from hami_common import constants as C
from hami_common import node_lock
from hami_sim.apiserver.webhooks import admission_review


class ExtenderError(RuntimeError):
    """hami-control answered something a caller cannot use (a non-200 status, a denial)."""


class JsonHttp:
    """A small keep-alive HTTP(S) JSON client (one connection per thread)."""

    def __init__(self, url: str, ca_file: str | None = None, timeout: float = 30.0):
        parts = urlsplit(url)
        self.host, self.port, self.https = parts.hostname, parts.port, parts.scheme == "https"
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=ca_file) if self.https else None
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.https:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                   context=self._context)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple:
        """(status, body bytes); reconnects once if a kept-alive connection was closed."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=headers or {})
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def post(self, path: str, body, method: str = "POST",
             content_type: str = "application/json") -> tuple:
        """Sends JSON; (status, decoded answer)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        status, raw = self.request(method, path, data, {"Content-Type": content_type})
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def close(self) -> None:
        """Closes this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class ExtenderClient(JsonHttp):
    """Talks to hami-control the way the API server and kube-scheduler do."""

    def _ok(self, path: str, body) -> dict:
        status, answer = self.post(path, body)
        if status != 200:
            raise ExtenderError(f"POST {path}: {status} {answer}")
        return answer

    def review(self, pod: dict, namespace: str = "default", version: str = "v1",
               operation: str = "CREATE") -> dict:
        """The AdmissionReview response for creating pod."""
        body = admission_review(pod, {"group": "", "version": "v1", "kind": "Pod"},
                                {"group": "", "version": "v1", "resource": "pods"},
                                namespace, operation, version)
        return self._ok("/webhook", body)["response"]

    def admit(self, pod: dict, namespace: str = "default") -> dict:
        """The pod as the API server would store it after the webhook; ExtenderError if
        denied."""
        response = self.review(pod, namespace)
        if not response.get("allowed"):
            raise ExtenderError(f"denied: {(response.get('status') or {}).get('message')}")
        return patched_pod(pod, response) or pod

    def filter(self, pod: dict, node_names) -> dict:
        """ExtenderFilterResult for pod over node_names (nodeCacheCapable)."""
        return self._ok("/filter", {"Pod": pod, "NodeNames": list(node_names), "Nodes": None})

    def prioritize(self, pod: dict, node_names) -> list:
        """HostPriorityList for pod over node_names (nodeCacheCapable)."""
        return self._ok("/prioritize", {"Pod": pod, "NodeNames": list(node_names),
                                        "Nodes": None})

    def bind(self, namespace: str, name: str, uid: str, node: str) -> dict:
        """ExtenderBindingResult."""
        return self._ok("/bind", {"PodName": name, "PodNamespace": namespace, "PodUID": uid,
                                  "Node": node})

    def preempt(self, pod: dict, victims: dict, violations: dict | None = None) -> dict:
        """ExtenderPreemptionResult for kube-scheduler's proposal (nodeCacheCapable): node ->
        the UIDs of its victims there."""
        meta = {node: {"Pods": [{"UID": uid} for uid in uids],
                       "NumPDBViolations": (violations or {}).get(node, 0)}
                for node, uids in victims.items()}
        return self._ok("/preempt", {"Pod": pod, "NodeNameToMetaVictims": meta})


def patched_pod(pod: dict, response: dict) -> dict | None:
    """A copy of pod with the JSON patch of an AdmissionReview response applied, or None when
    the response carries no patch."""
    if not response.get("patch"):
        return None
    from hami_sim.apiserver.patch import json_patch
    return json_patch(json.loads(json.dumps(pod)),
                      json.loads(base64.b64decode(response["patch"])))


def finish_allocation(core_v1, namespace: str, name: str, node: str,
                      success: bool = True) -> bool:
    """The node agent's part once it has allocated a bound pod's devices: `bind-phase:
    success|failed`, then the node lock released if this pod holds it. True if it did."""
    phase = C.BIND_PHASE_SUCCESS if success else C.BIND_PHASE_FAILED
    core_v1.patch_namespaced_pod(name, namespace,
                                 {"metadata": {"annotations": {C.ANNO_BIND_PHASE: phase}}},
                                 _content_type="application/merge-patch+json",
                                 _preload_content=False)
    raw = core_v1.read_node(node, _preload_content=False).data
    value = ((json.loads(raw).get("metadata") or {}).get("annotations") or {}).get(
        C.ANNO_NODE_LOCK)
    if not value:
        return False
    lock = node_lock.decode(value)
    if (lock.namespace, lock.pod) != (namespace, name):
        return False
    pointer = "/metadata/annotations/" + C.ANNO_NODE_LOCK.replace("/", "~1")
    from kubernetes.client.exceptions import ApiException
    try:
        core_v1.patch_node(node, [{"op": "test", "path": pointer, "value": value},
                                  {"op": "remove", "path": pointer}],
                           _content_type="application/json-patch+json", _preload_content=False)
    except ApiException as e:
        if e.status == 422:
            return False       # changed meanwhile: no longer ours
        raise
    return True
