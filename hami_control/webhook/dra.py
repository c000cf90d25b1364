"""The webhook's DRA opt-in: a pod asking for nvidia.com/gpu, gpumem, gpumem-percentage and
gpucores, in a namespace or with a pod label or annotation `hami.io/dra: "true"`, is rewritten
to use ResourceClaims of hami-py's DRA driver, which kube-scheduler allocates itself.

Per container asking for GPUs: the nvidia.com/* resources leave its limits and requests, the
pod gets a claim `hami-gpu-<n>` from a ResourceClaimTemplate of a name unique to the pod, and
the container uses that claim. The templates cannot exist yet (admission runs before the pod
has a UID to own them): the pod carries what they hold in the annotation `hami.io/dra-claims`,
and hami-control creates them owned by the pod as soon as it sees the pod
(cluster/dra_templates.py); kube-scheduler waits for the claims meanwhile. So nothing is left
behind when the pod goes, and nothing is made for a pod that never was.
"""
import json
import secrets
from typing import Callable, Mapping

from hami_common import constants as C
from hami_common.request import ContainerRequest

ANNO_DRA_CLAIMS = "hami.io/dra-claims"
CLAIM_PREFIX = "hami-gpu-"
# The scheduling gate of a DRA pod in a namespace with a GPU quota: kube-scheduler leaves the
# pod alone until hami-control lifts it (claims/gate.py), once the quota has room for it.
QUOTA_GATE = "hami.io/gpu-quota"
_TRUE = ("true", "1", "yes")


def _flag(values: Mapping):
    value = values.get(C.LABEL_DRA) if isinstance(values, Mapping) else None
    return None if value is None else str(value).strip().lower() in _TRUE


def opted_in(meta: Mapping, namespace_labels: Mapping) -> bool:
    """The pod's label or annotation `hami.io/dra` decides; else its namespace's label."""
    for source in (meta.get("labels"), meta.get("annotations")):
        chosen = _flag(source or {})
        if chosen is not None:
            return chosen
    return bool(_flag(namespace_labels or {}))


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def removals(path: str, ctr: Mapping) -> list:
    """JSON patch removals of the nvidia.com/* resources of one container."""
    resources = ctr.get("resources") if isinstance(ctr.get("resources"), Mapping) else {}
    ops = []
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, Mapping):
            ops += [{"op": "remove", "path": f"{path}/resources/{section}/{_escape(k)}"}
                    for k in values if k in C.GPU_RESOURCES]
    return ops


def ask_record(ask: ContainerRequest) -> dict:
    """What the pod's hami.io/dra-claims records of one template's ask (`recorded_asks` reads
    it)."""
    return {"container": ask.name, "nums": ask.nums, "memMiB": ask.mem_mib,
            "memPercent": ask.mem_percent, "cores": ask.cores}


def dra_patch(spec: Mapping, meta: Mapping, asking, asks: Mapping,
              token: Callable[[], str] = lambda: secrets.token_hex(5),
              gate: bool = False) -> list:
    """The JSON patch turning each container of `asking` ((JSON path, container) pairs) into a
    claim user; `asks`: container name -> its parsed ContainerRequest. With `gate`, the pod
    also gets the quota's scheduling gate."""
    ops, claims, recorded = [], [], {}
    prefix = f"{CLAIM_PREFIX}{token()}"
    for n, (path, ctr) in enumerate(asking):
        claim_name, template = f"{CLAIM_PREFIX}{n}", f"{prefix}-{n}"
        recorded[template] = ask_record(asks[ctr.get("name")])
        claims.append({"name": claim_name, "resourceClaimTemplateName": template})
        ops += removals(path, ctr)
        resources = ctr.get("resources") if isinstance(ctr.get("resources"), Mapping) else None
        if resources is None:
            ops.append({"op": "add", "path": f"{path}/resources",
                        "value": {"claims": [{"name": claim_name}]}})
        elif not isinstance(resources.get("claims"), list):
            ops.append({"op": "add", "path": f"{path}/resources/claims",
                        "value": [{"name": claim_name}]})
        else:
            ops.append({"op": "add", "path": f"{path}/resources/claims/-",
                        "value": {"name": claim_name}})
    if isinstance(spec.get("resourceClaims"), list):
        ops += [{"op": "add", "path": "/spec/resourceClaims/-", "value": c} for c in claims]
    else:
        ops.append({"op": "add", "path": "/spec/resourceClaims", "value": claims})
    if gate:
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": QUOTA_GATE}}
                   if isinstance(spec.get("schedulingGates"), list) else
                   {"op": "add", "path": "/spec/schedulingGates",
                    "value": [{"name": QUOTA_GATE}]})
    value = json.dumps(recorded, sort_keys=True)
    if isinstance(meta.get("annotations"), Mapping):
        ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(ANNO_DRA_CLAIMS)}",
                    "value": value})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations",
                    "value": {ANNO_DRA_CLAIMS: value}})
    return ops


def recorded_asks(pod: Mapping) -> dict:
    """template name -> ContainerRequest, from the pod's `hami.io/dra-claims` ({} if none or
    unreadable)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNO_DRA_CLAIMS)
    try:
        data = json.loads(raw) if raw else {}
        return {name: ContainerRequest(name=a["container"], nums=int(a["nums"]),
                                       mem_mib=int(a["memMiB"]),
                                       mem_percent=int(a["memPercent"]), cores=int(a["cores"]))
                for name, a in data.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
