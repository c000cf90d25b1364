"""Label and field selectors, parsed once per request into predicates over stored objects."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .errors import bad_request

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET_RE = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_EQ_RE = re.compile(rf"^({_KEY})\s*(==|!=|=)\s*({_VALUE})$")
_EXISTS_RE = re.compile(rf"^(!?)\s*({_KEY})$")


@dataclass(frozen=True)
class Requirement:
    """One label requirement: key, operator (=, !=, in, notin, exists, !exists), values."""

    key: str
    op: str
    values: frozenset = frozenset()

    def matches(self, labels: dict) -> bool:
        """Whether labels satisfy this requirement."""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


def _split_top_level(text: str) -> list[str]:
    """Splits on commas that are not inside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parses a labelSelector query value; raises a 400 ApiError naming the bad term."""
    if not text:
        return ()
    reqs = []
    for term in _split_top_level(text):
        if m := _SET_RE.match(term):
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            if not values:
                raise bad_request(f"unable to parse requirement: {term!r}: "
                                  "for 'in', 'notin' operators, values set can't be empty")
            reqs.append(Requirement(m.group(1), m.group(2), values))
        elif m := _EQ_RE.match(term):
            op = "!=" if m.group(2) == "!=" else "="
            reqs.append(Requirement(m.group(1), op, frozenset([m.group(3)])))
        elif m := _EXISTS_RE.match(term):
            reqs.append(Requirement(m.group(2), "!exists" if m.group(1) else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: found {term!r}, expected one of "
                              "key, !key, key=value, key!=value, key in (..), key notin (..)")
    return tuple(reqs)


_EXPRESSION_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """A metav1.LabelSelector object (matchLabels, matchExpressions; a webhook's
    namespaceSelector or objectSelector) against labels; none matches all. An expression with
    an unknown operator is passed over."""
    selector = selector or {}
    reqs = [Requirement(k, "=", frozenset([v]))
            for k, v in (selector.get("matchLabels") or {}).items()]
    reqs += [Requirement(e.get("key"), _EXPRESSION_OPS[e.get("operator")],
                         frozenset(e.get("values") or ()))
             for e in selector.get("matchExpressions") or []
             if e.get("operator") in _EXPRESSION_OPS]
    return all(r.matches(labels) for r in reqs)


def field_value(obj: dict, path: str) -> str:
    """The string value of a dotted field path ("" when absent, as the real server treats it)."""
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None, allowed: tuple[str, ...]) -> tuple:
    """Parses a fieldSelector into (path, op, value) triples; unsupported fields are a 400."""
    if not text:
        return ()
    terms = []
    for term in _split_top_level(text):
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)$", term)
        if not m:
            raise bad_request(f"invalid selector: {term!r}; expected field=value or field!=value")
        path, op, value = m.group(1), m.group(2), m.group(3).strip()
        if path not in ("metadata.name", "metadata.namespace") + allowed:
            raise bad_request(f'field label not supported: {path}')
        terms.append((path, "!=" if op == "!=" else "=", value))
    return tuple(terms)


def compile_selector(labels: tuple[Requirement, ...], fields: tuple) -> Callable[[dict], bool]:
    """One predicate over stored objects from parsed label and field selectors."""
    if not labels and not fields:
        return lambda obj: True

    def matches(obj: dict) -> bool:
        meta_labels = obj.get("metadata", {}).get("labels") or {}
        if not all(r.matches(meta_labels) for r in labels):
            return False
        for path, op, value in fields:
            if (field_value(obj, path) == value) != (op == "="):
                return False
        return True

    return matches
