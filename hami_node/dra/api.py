"""The Kubernetes boundary of the DRA driver: the few resource.k8s.io/v1 calls it makes,
behind `DraApi`. `KubeDra` is the production implementation; bodies are sent and answers
read as plain JSON (the client's models are not in the way of alpha fields)."""
from typing import Optional, Protocol, runtime_checkable

from hami_node.plugin.cluster import NOT_FOUND, call
from hami_node.plugin.errors import ClusterError


@runtime_checkable
class DraApi(Protocol):
    """What the DRA driver asks of the API server."""

    def get_claim(self, namespace: str, name: str) -> Optional[dict]:
        """The ResourceClaim, or None when it does not exist."""

    def get_slice(self, name: str) -> Optional[dict]:
        """The ResourceSlice, or None when it does not exist."""

    def create_slice(self, body: dict) -> dict:
        """Creates a ResourceSlice; the stored object."""

    def replace_slice(self, body: dict) -> dict:
        """Replaces a ResourceSlice (metadata.resourceVersion guards it); the stored object."""

    def delete_slice(self, name: str) -> None:
        """Deletes a ResourceSlice (gone already is fine)."""

    def node_slices(self, node: str, driver: str) -> list:
        """The ResourceSlices of one driver on one node."""


def _absent(fn, *args):
    try:
        return fn(*args)
    except ClusterError as e:
        if e.status == NOT_FOUND:
            return None
        raise


class KubeDra:
    """DraApi over the official client's ResourceV1Api."""

    def __init__(self, api_client):
        from kubernetes import client
        self._api = client.ResourceV1Api(api_client)

    def get_claim(self, namespace: str, name: str) -> Optional[dict]:
        """GET the claim; None on 404."""
        return _absent(call, f"get resourceclaim {namespace}/{name}",
                       self._api.read_namespaced_resource_claim, name, namespace)

    def get_slice(self, name: str) -> Optional[dict]:
        """GET the slice; None on 404."""
        return _absent(call, f"get resourceslice {name}", self._api.read_resource_slice, name)

    def create_slice(self, body: dict) -> dict:
        """POST the slice."""
        return call(f"create resourceslice {body['metadata']['name']}",
                    self._api.create_resource_slice, body)

    def replace_slice(self, body: dict) -> dict:
        """PUT the slice."""
        name = body["metadata"]["name"]
        return call(f"replace resourceslice {name}", self._api.replace_resource_slice, name,
                    body)

    def delete_slice(self, name: str) -> None:
        """DELETE the slice; 404 is fine."""
        _absent(call, f"delete resourceslice {name}", self._api.delete_resource_slice, name)

    def node_slices(self, node: str, driver: str) -> list:
        """LIST slices with spec.nodeName=node,spec.driver=driver."""
        data = call(f"list resourceslices of {node}", self._api.list_resource_slice,
                    field_selector=f"spec.nodeName={node},spec.driver={driver}")
        return data.get("items") or []
