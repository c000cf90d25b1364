"""The Kubernetes boundary: the few API calls the node agent makes, behind `ClusterApi`.

`KubeCluster` is the production implementation with the official client. Reads ask for the
raw JSON (`_preload_content=False`) and return plain dicts: the client's model deserialisation
costs milliseconds per pod, which Allocate's latency budget cannot afford. Writes are JSON merge
patches of annotations, optionally guarded by the resourceVersion read (409 on a race).
"""
import json
import time
from typing import Optional, Protocol, runtime_checkable

from hami_node.plugin.errors import ClusterError

MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = (5, 10)   # connect, read seconds: an Allocate never hangs on the API server
CONFLICT = 409
NOT_FOUND = 404


@runtime_checkable
class ClusterApi(Protocol):
    """What the node agent asks of the API server."""

    def get_node(self, name: str) -> dict:
        """The Node object."""

    def patch_node_annotations(self, name: str, annotations: dict,
                               resource_version: Optional[str] = None) -> dict:
        """Sets (None: removes) node annotations; 409 ClusterError if resource_version is stale."""

    def patch_node_status(self, name: str, status: dict) -> dict:
        """Merge-patches the node's status (keys not given are left as they are)."""

    def get_pod(self, namespace: str, name: str) -> Optional[dict]:
        """The Pod, or None when it does not exist."""

    def list_node_pods(self, node: str) -> list:
        """Every pod bound to the node."""

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict,
                              resource_version: Optional[str] = None) -> dict:
        """Sets (None: removes) pod annotations; 409 ClusterError if resource_version is stale."""

    def create_event(self, obj: dict, reason: str, message: str, warning: bool = True) -> None:
        """Records an Event about a Pod or Node."""

    def evict_pod(self, namespace: str, name: str) -> None:
        """Evicts the pod through the Eviction API (disruption budgets apply)."""


def _annotation_patch(annotations: dict, resource_version: Optional[str]) -> dict:
    meta = {"annotations": annotations}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}


def call(what: str, fn, *args, **kwargs) -> dict:
    """One call of a generated client method, answered as raw JSON; ClusterError naming
    `what` and the API server's reason when it fails."""
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError
    try:
        resp = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        return json.loads(resp.data) if resp.data else {}
    except ApiException as e:
        raise ClusterError(f"{what}: {e.status} {_reason(e)}", e.status) from e
    except (OSError, ValueError, HTTPError) as e:
        raise ClusterError(f"{what}: API server unreachable or answered garbage: {e}") from e


class KubeCluster:
    """ClusterApi over the official kubernetes client."""

    def __init__(self, api_client):
        from kubernetes import client
        self.api_client = api_client
        self._v1 = client.CoreV1Api(api_client)

    @staticmethod
    def _call(what: str, fn, *args, **kwargs):
        return call(what, fn, *args, **kwargs)

    def get_node(self, name: str) -> dict:
        """GET the node."""
        return self._call(f"get node {name}", self._v1.read_node, name)

    def patch_node_annotations(self, name: str, annotations: dict,
                               resource_version: Optional[str] = None) -> dict:
        """Merge-patches node annotations."""
        return self._call(f"patch node {name}", self._v1.patch_node, name,
                          _annotation_patch(annotations, resource_version),
                          _content_type=MERGE_PATCH)

    def patch_node_status(self, name: str, status: dict) -> dict:
        """Merge-patches the node's status subresource."""
        return self._call(f"patch node {name} status", self._v1.patch_node_status, name,
                          {"status": status}, _content_type=MERGE_PATCH)

    def get_pod(self, namespace: str, name: str) -> Optional[dict]:
        """GET the pod; None on 404."""
        try:
            return self._call(f"get pod {namespace}/{name}", self._v1.read_namespaced_pod,
                              name, namespace)
        except ClusterError as e:
            if e.status == NOT_FOUND:
                return None
            raise

    def list_node_pods(self, node: str) -> list:
        """LIST pods with spec.nodeName=node."""
        data = self._call(f"list pods on {node}", self._v1.list_pod_for_all_namespaces,
                          field_selector=f"spec.nodeName={node}")
        return data.get("items") or []

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict,
                              resource_version: Optional[str] = None) -> dict:
        """Merge-patches pod annotations."""
        return self._call(f"patch pod {namespace}/{name}", self._v1.patch_namespaced_pod, name,
                          namespace, _annotation_patch(annotations, resource_version),
                          _content_type=MERGE_PATCH)

    def create_event(self, obj: dict, reason: str, message: str, warning: bool = True) -> None:
        """Creates a core/v1 Event about obj (a Pod or a Node)."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta.get('name', 'hami')}.",
                             "namespace": namespace},
                "involvedObject": {"apiVersion": "v1", "kind": obj.get("kind") or "Pod",
                                   "name": meta.get("name"), "namespace": meta.get("namespace"),
                                   "uid": meta.get("uid")},
                "reason": reason, "message": message[:1024],
                "type": "Warning" if warning else "Normal",
                "source": {"component": "hami-node"}, "firstTimestamp": now,
                "lastTimestamp": now, "count": 1}
        self._call(f"create event {reason}", self._v1.create_namespaced_event, namespace, body)


    def evict_pod(self, namespace: str, name: str) -> None:
        """POST pods/eviction."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}
        self._call(f"evict pod {namespace}/{name}", self._v1.create_namespaced_pod_eviction,
                   name, namespace, body)


def _reason(e) -> str:
    try:
        return json.loads(e.body).get("message") or e.reason
    except (TypeError, ValueError, AttributeError):
        return str(e.reason)


def connect(kubeconfig: str = "") -> KubeCluster:
    """A KubeCluster from a kubeconfig file, or in-cluster when kubeconfig is empty."""
    from kubernetes import client, config
    try:
        if kubeconfig:
            return KubeCluster(config.new_client_from_config(config_file=kubeconfig))
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return KubeCluster(client.ApiClient(configuration))
    except config.ConfigException as e:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster configuration " \
            "(no service account; outside a pod give --kubeconfig)"
        raise ClusterError(f"cannot use the {where}: {e}") from e
