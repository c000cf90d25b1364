"""KubeApi: every cluster boundary of hami-control, through the official Kubernetes client.

Single-object calls (get, patch, create) go straight through the client's connection pool
(its TLS, proxy and bearer-token settings) with JSON in and out: the generated methods'
argument validation and serialization took half of a bind's Python time in hami-control
(bench/k8s_throughput.py, profiled), and their models cost milliseconds per pod (the Binding
model even fails on the Status the server answers). Lists and watches use the generated
methods with `_preload_content=False` and decode the JSON themselves, watches line by line.
"""
import json
import logging
import threading
from typing import Iterator, Mapping, Optional
from urllib.parse import quote

from hami_control.cluster.api import ApiError, Conflict, Expired, Invalid, NotFound

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_ERRORS = {404: NotFound, 409: Conflict, 410: Expired, 422: Invalid}
_POOL_SIZE = 32          # concurrent binds + two long watches share one connection pool


def api_error(status: int, body, fallback: str) -> ApiError:
    """The ApiError for an HTTP status and a (JSON Status) body."""
    reason, message = "", fallback
    try:
        status_obj = json.loads(body) if body else {}
        if isinstance(status_obj, dict):
            reason = str(status_obj.get("reason") or "")
            message = str(status_obj.get("message") or fallback)
    except (ValueError, TypeError):
        pass        # not JSON: keep the client's text
    return _ERRORS.get(status, ApiError)(status, reason or "Error", message)


def make_api_client(kubeconfig: Optional[str] = None):
    """An ApiClient from a kubeconfig file, else the in-cluster service account, else the
    default kubeconfig ($KUBECONFIG, ~/.kube/config)."""
    import os

    from kubernetes import client, config
    cfg = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(client_configuration=cfg)
    except (config.ConfigException, OSError, ValueError) as e:
        raise ApiError(0, "Config", f"cannot load the Kubernetes client configuration "
                                    f"({kubeconfig or 'in-cluster/default'}): {e}") from e
    cfg.connection_pool_maxsize = _POOL_SIZE
    return client.ApiClient(cfg)


class KubeApi:
    """WatchSource, PodNodeApi, LeaseApi and NamespaceApi over one kubernetes ApiClient."""

    def __init__(self, api_client, request_timeout: float = 30.0, page_size: int = 500):
        from kubernetes import client
        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._timeout = request_timeout
        self._page_size = page_size
        self._watches: set = set()
        self._watch_lock = threading.Lock()

    def close(self) -> None:
        """Ends the watches and closes the client's connections."""
        self.close_watches()
        self._client.close()

    # --- plumbing ------------------------------------------------------------------------
    def _call(self, func, *args, **kwargs):
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError
        kwargs.setdefault("_request_timeout", self._timeout)
        try:
            resp = func(*args, _preload_content=False, **kwargs)
            data = resp.data
        except ApiException as e:
            raise api_error(e.status or 0, e.body, str(e.reason)) from e
        except HTTPError as e:
            raise ApiError(0, "Unreachable", f"the API server did not answer: {e}") from e
        try:
            return json.loads(data) if data else {}
        except ValueError as e:
            raise ApiError(resp.status, "BadResponse", f"the API server answered non-JSON "
                                                       f"({data[:80]!r})") from e

    def _request(self, method: str, path: str, body=None, content_type: str = "") -> dict:
        """One call of path (its segments quoted by the caller) through the client's pool."""
        from urllib3 import Timeout
        from urllib3.exceptions import HTTPError
        cfg = self._client.configuration
        headers = dict(self._client.default_headers, Accept="application/json")
        for auth in cfg.auth_settings().values():      # the token, refreshed by its hook
            if auth["in"] == "header" and auth["value"]:
                headers[auth["key"]] = auth["value"]
        data = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            data = json.dumps(body).encode()
        try:
            resp = self._client.rest_client.pool_manager.request(
                method, cfg.host + path, body=data, headers=headers,
                timeout=Timeout(total=self._timeout))
        except HTTPError as e:
            raise ApiError(0, "Unreachable", f"the API server did not answer: {e}") from e
        if resp.status >= 400:
            raise api_error(resp.status, resp.data, resp.reason or f"HTTP {resp.status}")
        try:
            return json.loads(resp.data) if resp.data else {}
        except ValueError as e:
            raise ApiError(resp.status, "BadResponse", f"the API server answered non-JSON "
                                                       f"({resp.data[:80]!r})") from e

    def _get(self, path: str) -> Optional[dict]:
        try:
            return self._request("GET", path)
        except NotFound:
            return None

    # --- WatchSource ---------------------------------------------------------------------
    def _lister(self, kind: str):
        if kind == "nodes":
            return self._core.list_node
        if kind == "pods":
            return self._core.list_pod_for_all_namespaces
        if kind == "resourcequotas":
            return self._core.list_resource_quota_for_all_namespaces
        if kind == "poddisruptionbudgets":
            from kubernetes import client
            return client.PolicyV1Api(self._client).\
                list_pod_disruption_budget_for_all_namespaces
        if kind == "resourceclaims":
            from kubernetes import client
            return client.ResourceV1Api(self._client).list_resource_claim_for_all_namespaces
        if kind == "resourceslices":
            from kubernetes import client
            return client.ResourceV1Api(self._client).list_resource_slice
        raise ValueError(f"cannot list {kind!r}; nodes, pods, resourcequotas, "
                         "poddisruptionbudgets, resourceclaims or resourceslices")

    def list(self, kind: str, field_selector: str = "") -> tuple:
        """Every object, in pages (a large cluster's pods in one answer cost the API server
        and us a burst of memory); a continue token that expired mid-list starts it over."""
        for attempt in (1, 2):
            items, token = [], None
            try:
                while True:
                    body = self._call(self._lister(kind), field_selector=field_selector or None,
                                      limit=self._page_size, _continue=token)
                    items.extend(body.get("items") or [])
                    meta = body.get("metadata") or {}
                    token = meta.get("continue")
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except Expired:
                if attempt == 2 or token is None:
                    raise
                log.info("listing %s: the continue token expired; listing again", kind)
        raise AssertionError("unreachable")

    def watch(self, kind: str, resource_version: str, timeout_s: float,
              field_selector: str = "") -> Iterator[tuple]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError
        try:
            resp = self._lister(kind)(
                watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                field_selector=field_selector or None,
                timeout_seconds=max(1, int(timeout_s)), _preload_content=False,
                _request_timeout=(10, timeout_s + 30))
        except ApiException as e:
            raise api_error(e.status or 0, e.body, str(e.reason)) from e
        except HTTPError as e:
            raise ApiError(0, "Unreachable", f"watch {kind}: {e}") from e
        with self._watch_lock:
            self._watches.add(resp)
        try:
            yield from _events(resp, kind)
        finally:
            with self._watch_lock:
                self._watches.discard(resp)
            resp.release_conn()

    def close_watches(self) -> None:
        with self._watch_lock:
            open_watches = list(self._watches)
        for resp in open_watches:
            try:
                resp.shutdown()  # unblocks a reader waiting in recv (urllib3 >= 2.3)
            except (AttributeError, OSError, RuntimeError, ValueError):
                # older urllib3, or the watch ended meanwhile and its connection went back to
                # the pool (RuntimeError): nothing is blocked on it any more
                resp.close()

    # --- PodNodeApi ----------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str) -> Optional[dict]:
        return self._get(_pod(namespace, name))

    def patch_pod_annotations(self, namespace: str, name: str,
                              annotations: Mapping[str, Optional[str]],
                              labels: Optional[Mapping[str, Optional[str]]] = None) -> dict:
        meta = {"annotations": dict(annotations)}
        if labels:
            meta["labels"] = dict(labels)
        return self._request("PATCH", _pod(namespace, name), {"metadata": meta}, MERGE_PATCH)

    def patch_pod_labels(self, namespace: str, name: str,
                         labels: Mapping[str, Optional[str]]) -> dict:
        return self._request("PATCH", _pod(namespace, name),
                             {"metadata": {"labels": dict(labels)}}, MERGE_PATCH)

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str]) -> None:
        meta = {"name": name, "namespace": namespace, "annotations": dict(annotations)}
        if uid:
            meta["uid"] = uid        # the API server refuses the bind for another pod's UID
        self._request("POST", f"/api/v1/namespaces/{_q(namespace)}/bindings",
                      {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                       "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    def get_node(self, name: str) -> Optional[dict]:
        return self._get(f"/api/v1/nodes/{_q(name)}")

    def patch_node_annotations(self, name: str, annotations: Mapping[str, Optional[str]],
                               resource_version: Optional[str] = None) -> dict:
        meta: dict = {"annotations": dict(annotations)}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return self._request("PATCH", f"/api/v1/nodes/{_q(name)}", {"metadata": meta},
                             MERGE_PATCH)

    def json_patch_node(self, name: str, operations: list) -> dict:
        return self._request("PATCH", f"/api/v1/nodes/{_q(name)}", operations, JSON_PATCH)

    def create_event(self, namespace: str, event: dict) -> None:
        self._request("POST", f"/api/v1/namespaces/{_q(namespace)}/events", event)

    def patch_pod_status(self, namespace: str, name: str, status: dict) -> dict:
        return self._request("PATCH", _pod(namespace, name) + "/status", {"status": status},
                             STRATEGIC_PATCH)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        self._request("DELETE", _pod(namespace, name), body)

    def list_kueue(self, kind: str) -> list:
        return self._request("GET", f"{_KUEUE}/{_q(kind)}").get("items") or []

    def patch_kueue_status(self, kind: str, namespace: str, name: str, status: dict) -> dict:
        return self._request("PATCH", _kueue(kind, namespace, name) + "/status",
                             {"status": status}, MERGE_PATCH)

    def json_patch_kueue_status(self, kind: str, namespace: str, name: str,
                                operations: list) -> dict:
        return self._request("PATCH", _kueue(kind, namespace, name) + "/status", operations,
                             JSON_PATCH)

    def patch_quota_status(self, namespace: str, name: str, status: dict) -> dict:
        return self._request("PATCH", f"/api/v1/namespaces/{_q(namespace)}/resourcequotas/"
                             f"{_q(name)}/status", {"status": status}, MERGE_PATCH)

    # --- LeaseApi ------------------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> Optional[dict]:
        return self._get(_lease(namespace, name))

    def create_lease(self, namespace: str, lease: dict) -> dict:
        return self._request("POST", _lease(namespace, ""), lease)

    def replace_lease(self, namespace: str, name: str, lease: dict) -> dict:
        return self._request("PUT", _lease(namespace, name), lease)

    # --- NamespaceApi --------------------------------------------------------------------
    def get_mutating_webhook(self, name: str) -> Optional[dict]:
        return self._get(_WEBHOOKS + _q(name))

    def json_patch_mutating_webhook(self, name: str, operations: list) -> dict:
        return self._request("PATCH", _WEBHOOKS + _q(name), operations, JSON_PATCH)

    def get_namespace(self, name: str) -> Optional[dict]:
        return self._get(f"/api/v1/namespaces/{_q(name)}")

    # --- DraTemplateApi, QuotaGateApi -----------------------------------------------------
    def create_claim_template(self, namespace: str, template: dict) -> dict:
        return self._request("POST", f"{_RESOURCE}/namespaces/{_q(namespace)}/"
                             "resourceclaimtemplates", template)

    def json_patch_pod(self, namespace: str, name: str, operations: list) -> dict:
        return self._request("PATCH", _pod(namespace, name), operations, JSON_PATCH)

    def list_slices(self, driver: str) -> list:
        body = self._request("GET", f"{_RESOURCE}/resourceslices?fieldSelector="
                             f"spec.driver%3D{_q(driver)}")
        return body.get("items") or []


_WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
_RESOURCE = "/apis/resource.k8s.io/v1"


def _q(segment: str) -> str:
    return quote(segment, safe="")


def _pod(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}"


_KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


def _kueue(kind: str, namespace: str, name: str) -> str:
    where = f"/namespaces/{_q(namespace)}" if namespace else ""
    return f"{_KUEUE}{where}/{_q(kind)}/{_q(name)}"


def _lease(namespace: str, name: str) -> str:
    """A Lease's path; without a name, the namespace's leases (to create one)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{_q(namespace)}/leases"
    return f"{path}/{_q(name)}" if name else path


def _lines(resp) -> Iterator[bytes]:
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _events(resp, kind: str) -> Iterator[tuple]:
    from urllib3.exceptions import HTTPError
    try:
        for line in _lines(resp):
            event = json.loads(line)
            etype, obj = event.get("type"), event.get("object") or {}
            if etype == "ERROR":
                raise api_error(int(obj.get("code") or 0), json.dumps(obj),
                                f"watch {kind} failed")
            yield etype, obj
    except (HTTPError, OSError, ValueError) as e:
        # A dropped or garbled stream: the caller re-watches from the last version it saw.
        log.info("watch %s ended: %s", kind, e)
