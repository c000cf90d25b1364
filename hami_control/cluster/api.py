"""The boundaries between hami-control and the Kubernetes API, one narrow Protocol per user.

Objects cross these boundaries as the plain dicts the API server sends (JSON), never as the
client's models: decoding into models costs more than the rest of a filter call. `KubeApi`
(cluster/kube.py) implements all of them with the official client.
"""
from typing import Iterator, Mapping, Optional, Protocol, runtime_checkable

from hami_control.errors import ControlError


class ApiError(ControlError):
    """A Kubernetes API call that failed; `status` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status, self.reason, self.message = status, reason, message


class NotFound(ApiError):
    """404: the object does not exist."""


class Conflict(ApiError):
    """409: a stale resourceVersion, or the object already exists."""


class Invalid(ApiError):
    """422: e.g. a JSON patch `test` operation that did not match."""


class Expired(ApiError):
    """410: a watch's resourceVersion is older than the server keeps; relist."""


@runtime_checkable
class WatchSource(Protocol):
    """What the cluster view sync reads: lists and watches of nodes and pods."""

    def list(self, kind: str, field_selector: str = "") -> tuple:
        """(items, resourceVersion) of all `nodes`, `pods`, `resourcequotas`,
        `poddisruptionbudgets`, `resourceclaims` or `resourceslices` (matching the field
        selector)."""

    def watch(self, kind: str, resource_version: str, timeout_s: float,
              field_selector: str = "") -> Iterator[tuple]:
        """(event type, object) from resource_version on; ends after timeout_s or when the
        server closes the stream; raises Expired for a version too old."""

    def close_watches(self) -> None:
        """Ends the open watches (at shutdown)."""


@runtime_checkable
class PodNodeApi(Protocol):
    """What filter and bind change: pod annotations, node annotations, bindings, events."""

    def get_pod(self, namespace: str, name: str) -> Optional[dict]:
        """The pod, or None when it does not exist."""

    def patch_pod_annotations(self, namespace: str, name: str,
                              annotations: Mapping[str, Optional[str]],
                              labels: Optional[Mapping[str, Optional[str]]] = None) -> dict:
        """Merge-patches the pod's annotations, and labels when given (None removes one);
        returns the new pod."""

    def patch_pod_labels(self, namespace: str, name: str,
                         labels: Mapping[str, Optional[str]]) -> dict:
        """Merge-patches the pod's labels (None removes one); returns the new pod."""

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str]) -> None:
        """Creates the pod's Binding to node (its annotations are copied onto the pod)."""

    def get_node(self, name: str) -> Optional[dict]:
        """The node, or None."""

    def patch_node_annotations(self, name: str, annotations: Mapping[str, Optional[str]],
                               resource_version: Optional[str] = None) -> dict:
        """Merge-patches the node's annotations; with resource_version, only if the node is
        still at that version (else Conflict)."""

    def json_patch_node(self, name: str, operations: list) -> dict:
        """Applies an RFC 6902 patch to the node (a failed `test` raises Invalid)."""

    def create_event(self, namespace: str, event: dict) -> None:
        """Records a core/v1 Event."""


@runtime_checkable
class PreemptionApi(Protocol):
    """What preemption changes: the victims (a condition, their deletion), the preemptor's
    nominated node, events."""

    def patch_pod_status(self, namespace: str, name: str, status: dict) -> dict:
        """Strategic-merge-patches the pod's status (conditions merge by type)."""

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Deletes the pod (graceful), only if it still has that UID (NotFound, Conflict)."""

    def create_event(self, namespace: str, event: dict) -> None:
        """Records a core/v1 Event."""


@runtime_checkable
class KueueApi(Protocol):
    """What the Kueue admission check reads and writes (kueue.x-k8s.io/v1beta2)."""

    def list_kueue(self, kind: str) -> list:
        """Every object of `workloads` or `admissionchecks` (NotFound: no such CRD)."""

    def patch_kueue_status(self, kind: str, namespace: str, name: str, status: dict) -> dict:
        """Merge-patches the object's status."""

    def json_patch_kueue_status(self, kind: str, namespace: str, name: str,
                                operations: list) -> dict:
        """Applies an RFC 6902 patch to the object's status (a failed `test`: Invalid)."""


@runtime_checkable
class QuotaStatusApi(Protocol):
    """What the quota status writer changes: a ResourceQuota's status (HAMi's keys only)."""

    def patch_quota_status(self, namespace: str, name: str, status: dict) -> dict:
        """Merge-patches the ResourceQuota's status (keys not given are left as they are)."""


@runtime_checkable
class LeaseApi(Protocol):
    """What leader election needs."""

    def get_lease(self, namespace: str, name: str) -> Optional[dict]:
        """The Lease, or None."""

    def create_lease(self, namespace: str, lease: dict) -> dict:
        """Creates it (Conflict if it exists)."""

    def replace_lease(self, namespace: str, name: str, lease: dict) -> dict:
        """Replaces it (Conflict if metadata.resourceVersion is stale)."""


@runtime_checkable
class WebhookConfigApi(Protocol):
    """What keeps the webhook's caBundle: its MutatingWebhookConfiguration."""

    def get_mutating_webhook(self, name: str) -> Optional[dict]:
        """The MutatingWebhookConfiguration, or None."""

    def json_patch_mutating_webhook(self, name: str, operations: list) -> dict:
        """Applies a JSON patch to it; returns the new object."""


@runtime_checkable
class NamespaceApi(Protocol):
    """What the webhook reads: a namespace's labels."""

    def get_namespace(self, name: str) -> Optional[dict]:
        """The namespace, or None."""


@runtime_checkable
class DraTemplateApi(Protocol):
    """What the DRA opt-in's template maker needs."""

    def create_claim_template(self, namespace: str, template: dict) -> dict:
        """Creates a ResourceClaimTemplate (Conflict if it exists)."""

    def list_slices(self, driver: str) -> list:
        """The ResourceSlices of one DRA driver."""

    def create_event(self, namespace: str, event: dict) -> None:
        """Records a core/v1 Event."""


@runtime_checkable
class QuotaGateApi(Protocol):
    """What the quota gate of DRA pods needs."""

    def json_patch_pod(self, namespace: str, name: str, operations: list) -> dict:
        """Applies an RFC 6902 patch to the pod (a failed `test`: Invalid)."""

    def list_slices(self, driver: str) -> list:
        """The ResourceSlices of one DRA driver."""

    def create_event(self, namespace: str, event: dict) -> None:
        """Records a core/v1 Event."""
