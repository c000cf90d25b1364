"""Object validation as the real API server does it for what this project stores: names,
labels, annotations, quantities, and the pod fields a scheduler and kubelet rely on."""
from __future__ import annotations

import re

from hami_common.quantity import parse_quantity

from .errors import invalid
from .resources import Resource

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(rf"^{_LABEL}$")
DNS_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")
MAX_ANNOTATIONS_BYTES = 256 * 1024

SUBDOMAIN_HINT = ("must be a lowercase RFC 1123 subdomain: lower case alphanumerics, '-' or "
                  "'.', starting and ending with an alphanumeric, at most 253 characters")
LABEL_HINT = ("must be a lowercase RFC 1123 label: lower case alphanumerics or '-', starting "
              "and ending with an alphanumeric, at most 63 characters")


def name_problem(name, dns_label: bool) -> str | None:
    """Why a metadata.name is invalid, or None."""
    if not isinstance(name, str) or not name:
        return "Required value: name or generateName is required"
    if dns_label:
        if len(name) > 63 or not DNS_LABEL.match(name):
            return f'Invalid value: "{name}": {LABEL_HINT}'
    elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        return f'Invalid value: "{name}": {SUBDOMAIN_HINT}'
    return None


def _key_problem(key) -> str | None:
    if not isinstance(key, str) or not key:
        return "name part must be non-empty"
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return f"prefix part {SUBDOMAIN_HINT}"
    if len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return ("name part must consist of alphanumerics, '-', '_' or '.', start and end with "
                "an alphanumeric, at most 63 characters")
    return None


def metadata_causes(meta: dict) -> list[tuple[str, str, str]]:
    """Problems with labels and annotations as (field, reason, message)."""
    causes = []
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    for field, mapping in (("metadata.labels", labels), ("metadata.annotations", annotations)):
        if not isinstance(mapping, dict):
            causes.append((field, "FieldValueInvalid", "Invalid value: must be a map of strings"))
            continue
        for key, value in mapping.items():
            if problem := _key_problem(key):
                causes.append((field, "FieldValueInvalid", f'Invalid value: "{key}": {problem}'))
            if not isinstance(value, str):
                causes.append((f"{field}[{key}]", "FieldValueInvalid",
                               "Invalid value: must be a string"))
    for key, value in labels.items() if isinstance(labels, dict) else ():
        if isinstance(value, str) and value and (len(value) > 63
                                                 or not _QUALIFIED_NAME.match(value)):
            causes.append(("metadata.labels", "FieldValueInvalid",
                           f'Invalid value: "{value}": a label value must be empty or '
                           "alphanumerics, '-', '_' or '.', at most 63 characters"))
    if isinstance(annotations, dict):
        size = sum(len(k) + len(str(v)) for k, v in annotations.items())
        if size > MAX_ANNOTATIONS_BYTES:
            causes.append(("metadata.annotations", "FieldValueTooLong",
                           f"Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"))
    return causes


def quantity_ok(value) -> bool:
    """Whether value is a Kubernetes quantity ("100m", "2Gi", 3)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value >= 0
    return isinstance(value, str) and bool(_QUANTITY.match(value))


def _container_causes(path: str, container, seen: set) -> list[tuple[str, str, str]]:
    if not isinstance(container, dict):
        return [(path, "FieldValueInvalid", "Invalid value: must be an object")]
    causes = []
    name = container.get("name")
    if not isinstance(name, str) or not name:
        causes.append((f"{path}.name", "FieldValueRequired", "Required value"))
    elif not DNS_LABEL.match(name) or len(name) > 63:
        causes.append((f"{path}.name", "FieldValueInvalid", f'Invalid value: "{name}": '
                       + LABEL_HINT))
    elif name in seen:
        causes.append((f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
    seen.add(name)
    if not isinstance(container.get("image"), str) or not container.get("image"):
        causes.append((f"{path}.image", "FieldValueRequired", "Required value"))
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        for res, qty in (resources.get(part) or {}).items():
            if not quantity_ok(qty):
                causes.append((f"{path}.resources.{part}[{res}]", "FieldValueInvalid",
                               f'Invalid value: "{qty}": must be a quantity like 1, 500m, 2Gi'))
    if not causes:
        causes += _extended_causes(path, resources)
    return causes


def is_extended(resource: str) -> bool:
    """An extended resource (e.g. nvidia.com/gpu): domain-prefixed, not kubernetes.io's."""
    domain = resource.partition("/")[0]
    return "/" in resource and not resource.startswith("requests.") and \
        domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def _extended_causes(path: str, resources: dict) -> list[tuple[str, str, str]]:
    """As the real API server: an extended resource cannot be overcommitted, so a request
    needs a limit, and equal to it."""
    limits = resources.get("limits") or {}
    causes = []
    for res, qty in (resources.get("requests") or {}).items():
        if not is_extended(res):
            continue
        if res not in limits:
            cause = (f"{path}.resources.limits", "FieldValueRequired",
                     "Required value: Limit must be set for non overcommitable resources")
        elif parse_quantity(qty) != parse_quantity(limits[res]):
            cause = (f"{path}.resources.requests", "FieldValueInvalid",
                     f'Invalid value: "{qty}": must be equal to {res} limit of {limits[res]}')
        else:
            continue
        if cause not in causes:
            causes.append(cause)
    return causes


def pod_causes(pod: dict) -> list[tuple[str, str, str]]:
    """Problems with a pod's spec as (field, reason, message)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "FieldValueRequired", "Required value")]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [("spec.containers", "FieldValueRequired", "Required value")]
    causes, seen = [], set()
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or []):
            causes += _container_causes(f"spec.{field}[{i}]", container, seen)
    return causes


def check(res: Resource, obj: dict, dns_label_name: bool) -> None:
    """Raises a 422 Invalid listing every problem found in obj."""
    meta = obj["metadata"]
    causes = []
    if problem := name_problem(meta.get("name"), dns_label_name):
        causes.append(("metadata.name", "FieldValueInvalid", problem))
    causes += metadata_causes(meta)
    if res.kind == "Pod":
        causes += pod_causes(obj)
    if causes:
        raise invalid(res.kind, str(meta.get("name") or ""), causes, res.group)
