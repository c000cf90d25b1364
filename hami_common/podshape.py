"""The structure a pod must have before HAMi's request parsing may read it.

The API server has validated every pod it sends, but the endpoints also face whatever a client
posts. `parse_pod` checks the shape first (a bad one is a RequestError naming the field); the
endpoints check it too, to answer a malformed body with a 4xx rather than a denial.
"""
from collections.abc import Mapping
from typing import Optional

_SCALAR = (str, int, float)


def _is_map(value) -> bool:
    # Decoded JSON is made of dicts: the exact type check spares the ABC machinery, which
    # costs more than the rest of the check on every watch event and filter.
    return type(value) is dict or isinstance(value, Mapping)


def _mapping_of_scalars(value, where: str, strings_only: bool = False) -> Optional[str]:
    if value is None:
        return None
    if not _is_map(value):
        return f"{where} must be an object"
    kinds = str if strings_only else _SCALAR
    for key, item in value.items():
        if not isinstance(key, str) or isinstance(item, bool) or not isinstance(item, kinds):
            return f"{where}[{key!r}] must be a {'string' if strings_only else 'quantity'}"
    return None


def _container_problem(ctr, where: str) -> Optional[str]:
    if not _is_map(ctr):
        return f"{where} must be an object"
    if ctr.get("name") is not None and not isinstance(ctr["name"], str):
        return f"{where}.name must be a string"
    resources = ctr.get("resources")
    if resources is None:
        return None
    if not _is_map(resources):
        return f"{where}.resources must be an object"
    for section in ("limits", "requests"):
        problem = _mapping_of_scalars(resources.get(section), f"{where}.resources.{section}")
        if problem:
            return problem
    return None


def pod_problem(pod) -> Optional[str]:
    """What is structurally wrong with a v1.Pod dict, or None."""
    if not _is_map(pod):
        return "the pod must be a JSON object"
    meta, spec = pod.get("metadata"), pod.get("spec")
    if meta is not None and not _is_map(meta):
        return "metadata must be an object"
    if spec is not None and not _is_map(spec):
        return "spec must be an object"
    meta, spec = meta or {}, spec or {}
    for field in ("name", "namespace", "uid"):
        if meta.get(field) is not None and not isinstance(meta[field], str):
            return f"metadata.{field} must be a string"
    for field in ("annotations", "labels"):
        problem = _mapping_of_scalars(meta.get(field), f"metadata.{field}", strings_only=True)
        if problem:
            return problem
    problem = _mapping_of_scalars(spec.get("overhead"), "spec.overhead")
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
