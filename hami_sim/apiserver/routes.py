"""URL paths -> what they name: a discovery document, an admin endpoint or a resource target."""
from __future__ import annotations

from dataclasses import dataclass

from . import discovery
from .errors import ApiError
from .resources import Resource, lookup


@dataclass(frozen=True)
class Target:
    """A resource request: the resource, namespace, object name and subresource (if any)."""

    res: Resource | None  # None for the core `bindings` collection
    namespace: str | None
    name: str = ""
    sub: str = ""

    def verb(self, method: str, watch: bool) -> str:
        """The Kubernetes verb of an HTTP method on this target."""
        if method == "GET":
            return "get" if self.name else ("watch" if watch else "list")
        if method == "DELETE":
            return "delete" if self.name else "deletecollection"
        return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())

    def resource_name(self) -> str:
        """`pods`, `pods/binding`, `nodes/status`, `bindings` (as fault rules name them)."""
        base = self.res.name if self.res else "bindings"
        return f"{base}/{self.sub}" if self.sub else base


def not_served(path: str = "") -> ApiError:
    """404 for a path the server does not serve."""
    return ApiError(404, "NotFound", "the server could not find the requested resource"
                    + (f" ({path})" if path else ""), {})


def resolve(path: str, server_address: str) -> Target | dict:
    """A discovery document (dict) or a Target; raises a 404 ApiError for anything else."""
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        return discovery.SERVER_VERSION
    if not parts or parts[0] not in ("api", "apis"):
        raise not_served(path)
    if parts[0] == "api":
        if len(parts) == 1:
            return discovery.api_versions(server_address)
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) == 1:
            return discovery.api_group_list()
        if len(parts) == 2:
            doc = discovery.api_group(parts[1])
            if doc is None:
                raise not_served(path)
            return doc
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        doc = discovery.resource_list(group, version)
        if doc is None:
            raise not_served(path)
        return doc
    return _target(group, version, rest, path)


def _target(group: str, version: str, rest: list[str], path: str) -> Target:
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and (
            rest[2] == "bindings" or (lookup(group, version, rest[2]) or _NONE).namespaced):
        namespace, rest = rest[1], rest[2:]
    if group == "" and rest[0] == "bindings" and namespace is not None and len(rest) == 1:
        return Target(None, namespace)
    res = lookup(group, version, rest[0])
    if res is None or len(rest) > 3:
        raise not_served(path)
    if res.namespaced and namespace is None and len(rest) > 1:
        raise not_served(path)
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in res.subresources:
        raise not_served(path)
    return Target(res, namespace, name, sub)


class _NotNamespaced:
    namespaced = False


_NONE = _NotNamespaced()
