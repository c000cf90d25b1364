"""The REST verbs on stored resources, independent of HTTP: each returns (code, JSON bytes)."""
from __future__ import annotations

import base64
import json
import time

from . import patch as patching
from . import quota as quota_admission
from . import strategy, validation
from .errors import STALE, ApiError, already_exists, bad_request, conflict, invalid, not_found, success_status
from .resources import RESOURCES, Resource, lookup
from .selectors import compile_selector, parse_field_selector, parse_label_selector
from .store import DELETE, Store
from .watch import Watcher
from .webhooks import CONFIGURATIONS, MutatingWebhooks

PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
NAMESPACES = lookup("", "v1", "namespaces")
PODS = lookup("", "v1", "pods")
QUOTAS = lookup("", "v1", "resourcequotas")


def dumps(obj) -> bytes:
    """Compact JSON, as every response body is encoded."""
    return json.dumps(obj, separators=(",", ":")).encode()


def query_flag(query: dict, key: str) -> bool:
    """A boolean query parameter ("true"/"1")."""
    return query.get(key, "").lower() in ("true", "1")


class Api:
    """get / list / watch / create / update / patch / delete / bind on a Store."""

    def __init__(self, store: Store, clock=time.time):
        self.store = store
        self.clock = clock
        self.webhooks = MutatingWebhooks(
            lambda: [e.obj for e in self.store.list(CONFIGURATIONS.key, None)[0]],
            self._namespace_labels)

    def _namespace_labels(self, ns: str) -> dict:
        entry = self.store.get(NAMESPACES.key, "", ns)
        return ((entry.obj.get("metadata") or {}).get("labels") or {}) if entry else {}

    def _entry(self, res: Resource, ns: str | None, name: str):
        entry = self.store.get(res.key, ns or "", name)
        if entry is None:
            raise not_found(res.name, name, res.group)
        return entry

    def get(self, res: Resource, ns: str | None, name: str) -> tuple[int, bytes]:
        """GET one object."""
        return 200, self._entry(res, ns, name).raw

    def _matcher(self, res: Resource, query: dict):
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), res.fields)
        return compile_selector(labels, fields)

    def list(self, res: Resource, ns: str | None, query: dict) -> tuple[int, bytes]:
        """GET a collection, with selectors and limit/continue paging."""
        matches = self._matcher(res, query)
        entries, rv = self.store.list(res.key, ns)
        items = sorted((e for e in entries if matches(e.obj)),
                       key=lambda e: (e.obj["metadata"].get("namespace", ""),
                                      e.obj["metadata"]["name"]))
        meta: dict = {"resourceVersion": str(rv)}
        if token := query.get("continue"):
            items = items[_continue_start(token, items):]
        limit = _int_param(query, "limit", 0)
        if limit > 0 and len(items) > limit:
            last = items[limit - 1].obj["metadata"]
            meta["continue"] = base64.urlsafe_b64encode(dumps(
                [last.get("namespace", ""), last["name"]])).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        head = dumps({"kind": res.list_kind, "apiVersion": res.api_version, "metadata": meta})
        return 200, head[:-1] + b',"items":[' + b",".join(e.raw for e in items) + b"]}"

    def watch(self, res: Resource, ns: str | None, query: dict) -> Watcher:
        """Opens a watch; a too-old resourceVersion raises a 410 ApiError."""
        matches = self._matcher(res, query)
        rv = query.get("resourceVersion") or "0"
        try:
            since = int(rv)
        except ValueError as e:
            raise bad_request(f"resourceVersion {rv!r} is not a number") from e
        return self.store.watch(res.key, ns, since or None, matches)

    def _require_namespace(self, ns: str) -> None:
        if self.store.get(NAMESPACES.key, "", ns) is None:
            raise not_found("namespaces", ns)

    def create(self, res: Resource, ns: str | None, body) -> tuple[int, bytes]:
        """POST a new object: defaulted and checked, through the mutating webhooks (checked
        again when they changed it), and a pod through ResourceQuota admission of extended
        resources."""
        obj = strategy.prepare_create(res, body, ns, self.clock)
        if res.namespaced:
            self._require_namespace(ns)
        obj, patched = self.webhooks.admit(res, ns, obj)
        if patched:
            validation.check(res, obj, dns_label_name=res.kind == "Namespace")
        name = obj["metadata"]["name"]
        charges = self._admit_quota(ns, obj) if res is PODS else []

        def change(current):
            if current is not None:
                raise already_exists(res.name, name, res.group)
            return obj
        _, new = self.store.write(res.key, ns or "", name, change)
        for quota, status in charges:
            self._charge(quota, status)
        return 201, new.raw

    def _admit_quota(self, ns: str, pod: dict) -> list:
        quotas = [e.obj for e in self.store.list(QUOTAS.key, ns)[0]]
        if not quotas:
            return []
        return quota_admission.admit_pod(quotas, [e.obj for e in self.store.list(PODS.key, ns)[0]],
                                         pod)

    def _charge(self, quota: dict, status: dict) -> None:
        meta = quota["metadata"]

        def change(current):
            if current is None:
                raise not_found(QUOTAS.name, meta["name"])
            merged = json.loads(current.raw)
            for section, values in status.items():
                merged.setdefault("status", {}).setdefault(section, {}).update(values)
            return merged
        try:
            self.store.write(QUOTAS.key, meta["namespace"], meta["name"], change)
        except ApiError:
            pass            # deleted since the pod was admitted: nothing left to charge

    def update(self, res: Resource, ns: str | None, name: str, sub: str, body) -> tuple[int, bytes]:
        """PUT a whole object (or its status)."""
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            body["metadata"].setdefault("name", name)

        def change(current):
            if current is None:
                raise not_found(res.name, name, res.group)
            return strategy.prepare_update(res, current.obj, json.loads(json.dumps(body)),
                                           name, sub)
        _, new = self.store.write(res.key, ns or "", name, change)
        return 200, new.raw

    def patch(self, res: Resource, ns: str | None, name: str, sub: str, content_type: str,
              body) -> tuple[int, bytes]:
        """PATCH with a merge, strategic merge or JSON patch."""
        if content_type not in patching.SUPPORTED:
            patching.apply_patch(content_type, {}, body)  # raises the 415

        def change(current):
            if current is None:
                raise not_found(res.name, name, res.group)
            original = json.loads(current.raw)
            patched = patching.apply_patch(content_type, original,
                                           json.loads(json.dumps(body)))
            return strategy.prepare_update(res, current.obj, patched, name, sub)
        _, new = self.store.write(res.key, ns or "", name, change)
        return 200, new.raw

    def delete(self, res: Resource, ns: str | None, name: str, body) -> tuple[int, bytes]:
        """DELETE one object (immediately; no graceful deletion); answers its last state."""
        if res is NAMESPACES and name in PROTECTED_NAMESPACES:
            raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this '
                           "namespace may not be deleted")
        pre = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}

        def change(current):
            if current is None:
                raise not_found(res.name, name, res.group)
            meta = current.obj["metadata"]
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise conflict(res.name, name, f"Precondition failed: UID in precondition: "
                               f"{pre['uid']}, UID in object meta: {meta.get('uid')}", res.group)
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise conflict(res.name, name, STALE, res.group)
            return DELETE
        _, last = self.store.write(res.key, ns or "", name, change)
        if res is NAMESPACES:
            self._empty_namespace(name)
        return 200, last.raw

    def _empty_namespace(self, ns: str) -> None:
        for res in RESOURCES:
            if not res.namespaced:
                continue
            for entry in self.store.list(res.key, ns)[0]:
                try:
                    self.delete(res, ns, entry.obj["metadata"]["name"], None)
                except ApiError as e:
                    if e.code != 404:  # already gone is what we want
                        raise

    def delete_collection(self, res: Resource, ns: str | None, query: dict) -> tuple[int, bytes]:
        """DELETE every matching object of a collection."""
        matches = self._matcher(res, query)
        deleted = []
        for entry in self.store.list(res.key, ns)[0]:
            if matches(entry.obj):
                meta = entry.obj["metadata"]
                try:
                    self.delete(res, meta.get("namespace"), meta["name"], None)
                except ApiError as e:
                    if e.code != 404:
                        raise
                    continue
                deleted.append(entry.raw)
        head = dumps({"kind": res.list_kind, "apiVersion": res.api_version,
                      "metadata": {"resourceVersion": str(self.store.resource_version)}})
        return 200, head[:-1] + b',"items":[' + b",".join(deleted) + b"]}"

    def bind(self, ns: str, name: str | None, body) -> tuple[int, bytes]:
        """POST a Binding (pods/<name>/binding, or bindings with the pod named in the body)."""
        if not isinstance(body, dict):
            raise bad_request("a Binding must be a JSON object")
        body_name = (body.get("metadata") or {}).get("name")
        name = name or body_name
        if not name:
            raise invalid("Binding", "", [("metadata.name", "FieldValueRequired",
                                           "Required value: the pod to bind")])
        if body_name and body_name != name:
            raise bad_request(f"the name of the object ({body_name}) does not match the name "
                              f"on the URL ({name})")

        def change(current):
            if current is None:
                raise not_found("pods", name)
            return strategy.bind(current.obj, body, name, self.clock)
        self.store.write(PODS.key, ns, name, change)
        return 201, dumps(success_status(201))


def _int_param(query: dict, key: str, default: int) -> int:
    try:
        return int(query.get(key, default) or default)
    except ValueError as e:
        raise bad_request(f"{key}: {query[key]!r} is not an integer") from e


def _continue_start(token: str, items) -> int:
    try:
        ns, name = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError) as e:
        raise bad_request(f"continue: invalid token {token!r}") from e
    for i, entry in enumerate(items):
        meta = entry.obj["metadata"]
        if (meta.get("namespace", ""), meta["name"]) > (ns, name):
            return i
    return len(items)
