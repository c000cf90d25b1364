"""Server-side printing: the `Table` (meta.k8s.io) a real API server answers when the client
asks for `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, as kubectl get does, with the
rows of table_rows.py. Gets, lists and watches of every served resource.

kubectl's Accept is `application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;
v=v1beta1;g=meta.k8s.io,application/json`: the first media type the double can produce wins;
`includeObject` (None, Metadata: the default, Object) says what each row carries besides its
cells.
"""
from __future__ import annotations

import json
import time
from datetime import datetime

from .errors import bad_request
from .resources import Resource
from .table_rows import PRINTERS, UNKNOWN

TABLE_VERSIONS = ("v1", "v1beta1")
INCLUDE_OBJECT = ("None", "Metadata", "Object")
_ANY_JSON = ("application/json", "application/*", "*/*")


def table_version(accept: str) -> str | None:
    """The meta.k8s.io version of the Table an Accept header asks for first ("v1",
    "v1beta1"), or None when it prefers plain JSON (or names nothing the double produces)."""
    for media in accept.split(","):
        kind, *params = [part.strip() for part in media.split(";")]
        options = dict(p.split("=", 1) for p in params if "=" in p)
        options = {k.strip().lower(): v.strip() for k, v in options.items()}
        if kind.lower() not in _ANY_JSON:
            continue                        # protobuf, yaml: offered as alternatives
        wanted = options.get("as")
        if wanted is None:
            return None
        if (wanted == "Table" and options.get("g") == "meta.k8s.io"
                and options.get("v") in TABLE_VERSIONS):
            return options["v"]
        # PartialObjectMetadata and other views the double does not produce: the next one
    return None


def human_duration(seconds: float) -> str:
    """An age as kubectl shows it (Kubernetes' duration.HumanDuration): 45s, 3m20s, 5h, 12d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, hours // 24 % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _ager(now: float):
    def age(stamp) -> str:
        if not stamp:
            return UNKNOWN
        try:
            then = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except (TypeError, ValueError):
            return UNKNOWN
        return human_duration(now - then)
    return age


def _row(res: Resource, obj: dict, include: str, version: str, age) -> dict:
    printer = PRINTERS[res.key]
    row = {"cells": printer.row(obj, age)}
    if conditions := printer.conditions(obj):
        row["conditions"] = conditions
    if include == "Object":
        row["object"] = obj
    elif include == "Metadata":
        row["object"] = {"kind": "PartialObjectMetadata",
                         "apiVersion": f"meta.k8s.io/{version}", "metadata": obj["metadata"]}
    return row


def include_object(query: dict) -> str:
    """The includeObject parameter (default Metadata); a bad value is a 400 as upstream."""
    include = query.get("includeObject") or "Metadata"
    if include not in INCLUDE_OBJECT:
        raise bad_request(f"includeObject must be one of {', '.join(INCLUDE_OBJECT)}, "
                          f"not {include!r}")
    return include


def table(res: Resource, objects: list, metadata: dict, version: str, query: dict,
          now: float | None = None, headers: bool = True) -> dict:
    """A Table of the objects (one row each), with the list's metadata (resourceVersion,
    continue, remainingItemCount)."""
    include, age = include_object(query), _ager(time.time() if now is None else now)
    out = {"kind": "Table", "apiVersion": f"meta.k8s.io/{version}", "metadata": metadata}
    out["columnDefinitions"] = [c.definition() for c in PRINTERS[res.key].columns] \
        if headers else []
    out["rows"] = [_row(res, obj, include, version, age) for obj in objects]
    return out


def render(res: Resource, verb: str, payload: bytes, version: str, query: dict) -> bytes:
    """The Table for a get's object or a list's items, from the JSON the verb answered."""
    body = json.loads(payload)
    if verb == "list":
        objects, metadata = body.get("items") or [], body.get("metadata") or {}
    else:
        objects = [body]
        metadata = {"resourceVersion": body["metadata"].get("resourceVersion", "")}
    return json.dumps(table(res, objects, metadata, version, query),
                      separators=(",", ":")).encode()


def watch_object(res: Resource, kind: str, raw: bytes, version: str, query: dict) -> bytes:
    """A watch event's object as a one-row Table (a bookmark's as an empty one), as the real
    server streams them to kubectl get --watch; ERROR events keep their Status."""
    if kind == "ERROR":
        return raw
    obj = json.loads(raw)
    rows = [] if kind == "BOOKMARK" else [obj]
    metadata = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
    return json.dumps(table(res, rows, metadata, version, query),
                      separators=(",", ":")).encode()
