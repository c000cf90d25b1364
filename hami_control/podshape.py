"""The structure a pod must have before HAMi's request parsing may read it.

The API server has validated every pod it sends, but the endpoints also face whatever a client
posts; a pod of the wrong shape is a 4xx (or a denial) that names the field, never a crash.
"""
from typing import Mapping, Optional

_SCALAR = (str, int, float)


def _mapping_of_scalars(value, where: str, strings_only: bool = False) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"{where} must be an object"
    kinds = str if strings_only else _SCALAR
    for key, item in value.items():
        if not isinstance(key, str) or isinstance(item, bool) or not isinstance(item, kinds):
            return f"{where}[{key!r}] must be a {'string' if strings_only else 'quantity'}"
    return None


def _container_problem(ctr, where: str) -> Optional[str]:
    if not isinstance(ctr, Mapping):
        return f"{where} must be an object"
    resources = ctr.get("resources")
    if resources is None:
        return None
    if not isinstance(resources, Mapping):
        return f"{where}.resources must be an object"
    for section in ("limits", "requests"):
        problem = _mapping_of_scalars(resources.get(section), f"{where}.resources.{section}")
        if problem:
            return problem
    return None


def pod_problem(pod) -> Optional[str]:
    """What is structurally wrong with a v1.Pod dict, or None."""
    if not isinstance(pod, Mapping):
        return "the pod must be an object"
    meta, spec = pod.get("metadata"), pod.get("spec")
    if meta is not None and not isinstance(meta, Mapping):
        return "metadata must be an object"
    if spec is not None and not isinstance(spec, Mapping):
        return "spec must be an object"
    meta, spec = meta or {}, spec or {}
    for field in ("name", "namespace", "uid"):
        if meta.get(field) is not None and not isinstance(meta[field], str):
            return f"metadata.{field} must be a string"
    for field in ("annotations", "labels"):
        problem = _mapping_of_scalars(meta.get(field), f"metadata.{field}", strings_only=True)
        if problem:
            return problem
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if items is None:
            continue
        if not isinstance(items, list):
            return f"spec.{field} must be a list"
        for i, ctr in enumerate(items):
            problem = _container_problem(ctr, f"spec.{field}[{i}]")
            if problem:
                return problem
    return None
