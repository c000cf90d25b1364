"""The resources the double serves: names, kinds, scopes and verbs, as discovery lists them."""
from __future__ import annotations

from dataclasses import dataclass

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    """One REST resource: `pods` in the core group, `leases` in coordination.k8s.io, ..."""

    name: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    # Field selectors the real server accepts for this resource, besides metadata.name/namespace.
    fields: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Storage key: `pods`, `coordination.k8s.io/leases`."""
        return f"{self.group}/{self.name}" if self.group else self.name

    @property
    def api_version(self) -> str:
        """The apiVersion objects of this resource carry."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        """Kind of the list object."""
        return self.kind + "List"


RESOURCES = (
    Resource("namespaces", "namespace", "Namespace", "", "v1", False, ("status",), ("ns",),
             ("status.phase",)),
    Resource("pods", "pod", "Pod", "", "v1", True, ("binding", "status"), ("po",),
             ("spec.nodeName", "status.phase", "spec.schedulerName", "spec.restartPolicy",
              "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName")),
    Resource("nodes", "node", "Node", "", "v1", False, ("status",), ("no",),
             ("spec.unschedulable",)),
    Resource("events", "event", "Event", "", "v1", True, (), ("ev",),
             ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
              "involvedObject.uid", "involvedObject.apiVersion",
              "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
              "reportingComponent", "source", "type")),
    Resource("resourcequotas", "resourcequota", "ResourceQuota", "", "v1", True, ("status",),
             ("quota",)),
    Resource("leases", "lease", "Lease", "coordination.k8s.io", "v1", True),
    Resource("poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", "policy",
             "v1", True, ("status",), ("pdb",)),
    Resource("mutatingwebhookconfigurations", "mutatingwebhookconfiguration",
             "MutatingWebhookConfiguration", "admissionregistration.k8s.io", "v1", False),
    Resource("events", "event", "Event", "events.k8s.io", "v1", True, (), ("ev",),
             ("reason", "regarding.kind", "regarding.name", "regarding.namespace", "type")),
    # DRA (resource.k8s.io/v1, Kubernetes 1.34): stored and watched; no allocator runs here.
    Resource("resourceclaims", "resourceclaim", "ResourceClaim", "resource.k8s.io", "v1", True,
             ("status",)),
    Resource("resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate",
             "resource.k8s.io", "v1", True),
    Resource("resourceslices", "resourceslice", "ResourceSlice", "resource.k8s.io", "v1", False,
             (), (), ("spec.driver", "spec.nodeName")),
    Resource("deviceclasses", "deviceclass", "DeviceClass", "resource.k8s.io", "v1", False),
)

# group -> version -> resource name -> Resource
_BY_PATH: dict[str, dict[str, dict[str, Resource]]] = {}
for _r in RESOURCES:
    _BY_PATH.setdefault(_r.group, {}).setdefault(_r.version, {})[_r.name] = _r


def lookup(group: str, version: str, name: str) -> Resource | None:
    """The resource served at /api(s)/<group>/<version>/<name>, or None."""
    return _BY_PATH.get(group, {}).get(version, {}).get(name)


def groups() -> dict[str, dict[str, dict[str, Resource]]]:
    """Every served group -> version -> resources (the core group is "")."""
    return _BY_PATH


def by_kind(kind: str, api_version: str) -> Resource | None:
    """The resource for an object's kind and apiVersion (used when loading a state file)."""
    for res in RESOURCES:
        if res.kind == kind and res.api_version == api_version:
            return res
    return None
