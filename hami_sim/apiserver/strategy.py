"""What the server does to an object on create and update, per kind: type checks, defaults,
generated names, immutable fields, and the spec/status split between a resource and its
`status` subresource."""
from __future__ import annotations

import json
import random
import time
import uuid
from datetime import datetime, timezone

from hami_common.errors import HamiFormatError

from . import validation
from .errors import bad_request, conflict, invalid
from .quantity import canonical
from .resources import Resource

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# Pod spec fields an update may change; everything else is immutable once created.
_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds",
                     "schedulingGates")


def rfc3339(ts: float) -> str:
    """A timestamp as the API server writes it (seconds, UTC, Z)."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_type(res: Resource, body) -> dict:
    """The body as an object of res's kind; apiVersion and kind are filled in when absent."""
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object ({res.kind}), "
                          f"got {type(body).__name__}")
    name = str((body.get("metadata") or {}).get("name") or "") if isinstance(
        body.get("metadata"), dict) else ""
    causes = []
    if body.get("apiVersion") not in (None, "", res.api_version):
        causes.append(("apiVersion", "FieldValueInvalid", f'Invalid value: '
                       f'"{body["apiVersion"]}": must be {res.api_version} for {res.name}'))
    if body.get("kind") not in (None, "", res.kind):
        causes.append(("kind", "FieldValueInvalid",
                       f'Invalid value: "{body["kind"]}": must be {res.kind} for {res.name}'))
    if body.get("metadata") is not None and not isinstance(body.get("metadata"), dict):
        causes.append(("metadata", "FieldValueInvalid", "Invalid value: must be an object"))
    if causes:
        raise invalid(res.kind, name, causes, res.group)
    body["apiVersion"], body["kind"] = res.api_version, res.kind
    body["metadata"] = body.get("metadata") or {}
    return body


def _namespace(res: Resource, meta: dict, namespace: str | None) -> None:
    if not res.namespaced:
        meta.pop("namespace", None)
        return
    if meta.get("namespace") not in (None, "", namespace):
        raise bad_request("the namespace of the provided object does not match the namespace "
                          f"sent on the request ({meta['namespace']!r} != {namespace!r})")
    meta["namespace"] = namespace


def _canonical_quantities(resources) -> None:
    """The real server stores every quantity as a string in its canonical spelling, also one
    sent as a JSON number (`nvidia.com/gpu: 1` in YAML applied by kubectl): 3000 -> "3k".
    A malformed one is left for validation, which answers 422 naming its field."""
    if not isinstance(resources, dict):
        return
    for part in ("limits", "requests"):
        values = resources.get(part)
        if isinstance(values, dict):
            for key, qty in values.items():
                if isinstance(qty, (int, float, str)) and not isinstance(qty, bool):
                    try:
                        values[key] = canonical(qty)
                    except HamiFormatError:
                        pass


def _pod_defaults(pod: dict) -> None:
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("priority", 0)
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or []:
            if not isinstance(c, dict):
                continue
            image = str(c.get("image") or "")
            tagged = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
            c.setdefault("imagePullPolicy", "IfNotPresent" if tagged else "Always")
            resources = c.get("resources")
            _canonical_quantities(resources)
            if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
                # As the real server does: a limit without a request requests the limit.
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for key, qty in resources["limits"].items():
                        requests.setdefault(key, qty)
    pod["status"] = {"phase": "Pending"}


def _kind_defaults(res: Resource, obj: dict) -> None:
    if res.kind == "Pod" and res.group == "":
        _pod_defaults(obj)
    elif res.kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}


def prepare_create(res: Resource, body, namespace: str | None, clock=time.time,
                   rng: random.Random | None = None) -> dict:
    """Checks and defaults a new object; the store sets its resourceVersion."""
    obj = check_type(res, body)
    meta = obj["metadata"]
    if not meta.get("name") and meta.get("generateName"):
        rng = rng or random
        meta["name"] = meta["generateName"] + "".join(rng.choice(_NAME_CHARS) for _ in range(5))
    _namespace(res, meta, namespace)
    for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
        meta.pop(key, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = rfc3339(clock())
    _kind_defaults(res, obj)
    validation.check(res, obj, dns_label_name=res.kind == "Namespace")
    return obj


def _pod_spec_frozen(spec) -> str:
    if not isinstance(spec, dict):
        return json.dumps(spec)
    frozen = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
    for field in ("initContainers", "containers"):
        frozen[field] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict)
                         else c for c in spec.get(field) or []]
    return json.dumps(frozen, sort_keys=True)


def prepare_update(res: Resource, old: dict, body, name: str, subresource: str = "") -> dict:
    """Checks an updated object (from PUT or a patch) against the stored one: the name must
    match, a stale resourceVersion is a 409, immutable metadata is kept, and a `status`
    subresource write changes only the status (a main write never changes it)."""
    obj = check_type(res, body)
    meta = obj["metadata"]
    if meta.get("name") not in (None, "", name):
        raise bad_request(f"the name of the object ({meta['name']}) does not match the name "
                          f"on the URL ({name})")
    old_meta = old["metadata"]
    given_rv = meta.get("resourceVersion")
    if given_rv not in (None, "") and str(given_rv) != old_meta.get("resourceVersion"):
        raise conflict(res.name, name, "the object has been modified; please apply your "
                       "changes to the latest version and try again", res.group)
    if meta.get("uid") not in (None, "", old_meta.get("uid")):
        raise conflict(res.name, name, f"Precondition failed: UID in precondition: "
                       f"{meta['uid']}, UID in object meta: {old_meta.get('uid')}", res.group)
    for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp"):
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    if "status" in res.subresources:
        # A status write keeps the stored spec; any other write keeps the stored status.
        kept = "spec" if subresource == "status" else "status"
        if kept in old:
            obj[kept] = old[kept]
        else:
            obj.pop(kept, None)
    if res.kind == "Pod" and subresource == "" and (
            _pod_spec_frozen(obj.get("spec")) != _pod_spec_frozen(old.get("spec"))):
        raise invalid("Pod", name, [("spec", "FieldValueForbidden", "Forbidden: pod updates "
                      "may not change fields other than container images, "
                      f"{', '.join(_MUTABLE_POD_SPEC)}")])
    validation.check(res, obj, dns_label_name=res.kind == "Namespace")
    return obj


def bind(pod: dict, binding, name: str, clock=time.time) -> dict:
    """The pod after a Binding: spec.nodeName set once, PodScheduled true."""
    if not isinstance(binding, dict):
        raise bad_request("a Binding must be a JSON object")
    target = binding.get("target")
    if not isinstance(target, dict) or not target.get("name"):
        raise invalid("Binding", name, [("target.name", "FieldValueRequired",
                                         "Required value: the node to bind to")])
    if target.get("kind") not in (None, "", "Node"):
        raise invalid("Binding", name, [("target.kind", "FieldValueNotSupported",
                                         f'Unsupported value: "{target["kind"]}": must be Node')])
    meta = binding.get("metadata") or {}
    if meta.get("uid") and meta["uid"] != pod["metadata"].get("uid"):
        raise conflict("pods/binding", name, "Precondition failed: UID in precondition: "
                       f"{meta['uid']}, UID in object meta: {pod['metadata'].get('uid')}")
    node = pod.get("spec", {}).get("nodeName")
    if node:
        raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{node}"')
    if pod["metadata"].get("deletionTimestamp"):
        raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned "
                       "to a host")
    new = json.loads(json.dumps(pod))
    new["spec"]["nodeName"] = target["name"]
    conditions = [c for c in new.setdefault("status", {}).get("conditions") or []
                  if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "True",
                       "lastTransitionTime": rfc3339(clock())})
    new["status"]["conditions"] = conditions
    for key, value in (meta.get("annotations") or {}).items():
        new["metadata"].setdefault("annotations", {})[key] = value
    return new
