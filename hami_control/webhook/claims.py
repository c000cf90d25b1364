"""The webhook's ResourceClaim CREATE: the claims made from our templates carry kube-scheduler's
finalizer from birth, so kube-scheduler writes each twice (status, then the pod's Binding)
instead of three times.

Kubernetes 1.34 (pkg/scheduler/framework/plugins/dynamicresources, `bindClaim`) adds
`resource.kubernetes.io/delete-protection` to a claim with an Update of its own before the
UpdateStatus that stores the allocation, and skips that Update when the finalizer is already
there. The resourceclaim controller (pkg/controller/resourceclaim, `syncClaim`) removes the
finalizer from a claim being deleted that no pod holds, allocated or not, and after a claim's
last pod it clears the allocation and the finalizer as before: a claim given the finalizer at
creation is collected as one given it by kube-scheduler.

Only claims labelled `hami.io/dra-claim: "true"` (our templates' label, which Kubernetes copies
to the claims it makes from them) are sent here (deploy/'s objectSelector) or changed here. The
webhook for them ignores failures: a claim that misses the finalizer costs one write more.
"""
import base64
import json
from typing import Mapping

from hami_common import constants as C

CLAIM_KINDS = ("ResourceClaim",)


def is_claim_create(request: Mapping) -> bool:
    """Whether the AdmissionReview request creates a ResourceClaim."""
    kind = request.get("kind") if isinstance(request.get("kind"), Mapping) else {}
    return kind.get("kind") in CLAIM_KINDS and request.get("operation") == "CREATE"


def claim_review(request: Mapping) -> dict:
    """The answer's fields for a ResourceClaim CREATE: a JSON patch adding the finalizer to a
    claim of our templates that lacks it, else nothing (allowed untouched)."""
    claim = request.get("object") if isinstance(request.get("object"), Mapping) else {}
    meta = claim.get("metadata") if isinstance(claim.get("metadata"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    if str(labels.get(C.LABEL_DRA_CLAIM, "")).lower() != "true":
        return {}
    finalizers = meta.get("finalizers")
    if isinstance(finalizers, list) and C.CLAIM_DELETE_PROTECTION in finalizers:
        return {}
    op = ({"op": "add", "path": "/metadata/finalizers/-", "value": C.CLAIM_DELETE_PROTECTION}
          if isinstance(finalizers, list) else
          {"op": "add", "path": "/metadata/finalizers", "value": [C.CLAIM_DELETE_PROTECTION]})
    return {"patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps([op]).encode()).decode()}


def template_labels() -> dict:
    """The labels of our ResourceClaimTemplates' claim metadata (`spec.metadata.labels`)."""
    return {C.LABEL_DRA_CLAIM: "true"}
