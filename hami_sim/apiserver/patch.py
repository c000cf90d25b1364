"""The three patch types the API server accepts: JSON merge, strategic merge and JSON patch.

Every function works on freshly decoded JSON (the caller owns it) and returns the patched
document; errors are ApiErrors: 400 for a malformed patch, 422 for one that cannot apply.
"""
from __future__ import annotations

import copy

from .errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
SUPPORTED = (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH)

# Lists the Kubernetes types mark patchStrategy=merge, by field name, with their merge key.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "ports": "containerPort", "conditions": "type", "ownerReferences": "uid",
    "addresses": "type", "imagePullSecrets": "name", "hostAliases": "ip",
    "resourceClaims": "name",
}
# Lists of scalars merged as sets.
MERGE_PRIMITIVES = frozenset({"finalizers"})


def unprocessable(message: str) -> ApiError:
    """422 for a patch that is well formed but cannot be applied."""
    return ApiError(422, "Invalid", message)


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target, patch):
    """Kubernetes strategic merge patch for the fields this project uses.

    Maps merge like a merge patch; lists with a known merge key (containers by name,
    conditions by type, ...) merge item by item; `finalizers` merge as a set; other lists are
    replaced. Directives: `$patch: replace|delete`, `$deleteFromPrimitiveList/<field>`;
    `$setElementOrder/...` and `$retainKeys` are accepted and ignored.
    """
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    return _smp_map(target if isinstance(target, dict) else {}, patch)


def _smp_map(target: dict, patch: dict) -> dict:
    directive = patch.get("$patch")
    if directive == "replace":
        return _smp_map({}, {k: v for k, v in patch.items() if k != "$patch"})
    if directive not in (None, "merge"):
        raise bad_request(f"unknown $patch directive {directive!r} on a map")
    result = dict(target)
    for key, value in patch.items():
        if key == "$patch" or key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = set(value or [])
            result[field] = [v for v in result.get(field) or [] if v not in drop]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            old = result.get(key)
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = _smp_map(old if isinstance(old, dict) else {}, value)
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
        else:
            result[key] = value
    return result


def _smp_list(field: str, target, patch: list) -> list:
    old = target if isinstance(target, list) else []
    if any(isinstance(i, dict) and i.get("$patch") == "replace" and len(i) == 1 for i in patch):
        return [_clean(i) for i in patch if not (isinstance(i, dict) and i.get("$patch"))]
    if field in MERGE_PRIMITIVES:
        return old + [v for v in patch if v not in old]
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(i, dict) for i in patch):
        return [_clean(i) for i in patch]
    result = list(old)
    for item in patch:
        if key not in item:
            raise unprocessable(f"{field}: every item of a merged list needs its merge key "
                                f"{key!r}; got {item}")
        pos = next((i for i, o in enumerate(result)
                    if isinstance(o, dict) and o.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if pos is not None:
                del result[pos]
        elif pos is None:
            result.append(_smp_map({}, item))
        else:
            result[pos] = _smp_map(result[pos], item)
    return result


def _clean(value):
    return _smp_map({}, value) if isinstance(value, dict) else value


def _parse_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise bad_request(f"JSON pointer {pointer!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _list_index(container: list, token: str, op: str, pointer: str) -> int:
    if token == "-" and op == "add":
        return len(container)
    if not token.isdigit():
        raise unprocessable(f"{op} {pointer}: {token!r} is not an array index")
    index = int(token)
    limit = len(container) if op == "add" else len(container) - 1
    if index > limit:
        raise unprocessable(f"{op} {pointer}: index {index} out of range")
    return index


def _resolve(doc, tokens: list[str], op: str, pointer: str):
    """Walks to the parent of the last token; returns (parent, last token)."""
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_list_index(cur, token, "get", pointer)]
        else:
            raise unprocessable(f"{op} {pointer}: path does not exist (no {token!r})")
    return cur, tokens[-1]


def _get(doc, pointer: str, op: str):
    tokens = _parse_pointer(pointer)
    if not tokens:
        return doc
    parent, last = _resolve(doc, tokens, op, pointer)
    if isinstance(parent, dict):
        if last not in parent:
            raise unprocessable(f"{op} {pointer}: path does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_list_index(parent, last, "get", pointer)]
    raise unprocessable(f"{op} {pointer}: path does not exist")


def _remove(doc, pointer: str, op: str):
    tokens = _parse_pointer(pointer)
    if not tokens:
        raise unprocessable(f"{op}: cannot remove the whole document")
    parent, last = _resolve(doc, tokens, op, pointer)
    if isinstance(parent, dict):
        if last not in parent:
            raise unprocessable(f"{op} {pointer}: path does not exist")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_list_index(parent, last, "remove", pointer))
    raise unprocessable(f"{op} {pointer}: path does not exist")


def _add(doc, pointer: str, value, op: str, replace: bool = False):
    tokens = _parse_pointer(pointer)
    if not tokens:
        return value
    parent, last = _resolve(doc, tokens, op, pointer)
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise unprocessable(f"{op} {pointer}: path does not exist")
        parent[last] = value
    elif isinstance(parent, list):
        index = _list_index(parent, last, "replace" if replace else "add", pointer)
        if replace:
            parent[index] = value
        else:
            parent.insert(index, value)
    else:
        raise unprocessable(f"{op} {pointer}: parent is not an object or array")
    return doc


def json_patch(doc, ops):
    """RFC 6902 JSON patch: add, remove, replace, move, copy, test, applied in order."""
    if not isinstance(ops, list):
        raise bad_request("a JSON patch must be a JSON array of operations")
    for n, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"JSON patch operation {n} needs 'op' and 'path': {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"JSON patch operation {n} ({kind}) needs 'value'")
        if kind == "add":
            doc = _add(doc, path, op["value"], kind)
        elif kind == "replace":
            doc = _add(doc, path, op["value"], kind, replace=True)
        elif kind == "remove":
            _remove(doc, path, kind)
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise bad_request(f"JSON patch operation {n} ({kind}) needs 'from'")
            value = (_remove(doc, op["from"], kind) if kind == "move"
                     else copy.deepcopy(_get(doc, op["from"], kind)))
            doc = _add(doc, path, value, kind)
        elif kind == "test":
            if _get(doc, path, kind) != op["value"]:
                raise unprocessable(f"test {path}: value differs from {op['value']!r}")
        else:
            raise bad_request(f"JSON patch operation {n}: unknown op {kind!r}")
    return doc


def apply_patch(content_type: str, original: dict, body):
    """Applies a decoded patch body of the given media type; 415 for unsupported types."""
    if content_type == MERGE_PATCH:
        if not isinstance(body, dict):
            raise bad_request("a merge patch must be a JSON object")
        return merge_patch(original, body)
    if content_type == STRATEGIC_PATCH:
        return strategic_merge_patch(original, body)
    if content_type == JSON_PATCH:
        return json_patch(original, body)
    raise ApiError(415, "UnsupportedMediaType",
                   f"the body of the request was in an unknown format ({content_type or 'none'})"
                   f" - accepted media types include: {', '.join(SUPPORTED)}")
