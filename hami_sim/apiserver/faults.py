"""Fault injection: latency, random errors, forced errors on chosen verbs and resources, and
dropped watches. Settable at start (flags, env, Python) and at runtime over HTTP."""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

from .errors import ApiError

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
_REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout", 404: "NotFound", 403: "Forbidden"}


class FaultConfigError(ValueError):
    """A fault specification that cannot be understood (names the key)."""


@dataclass
class Rule:
    """Answer `code` to requests matching verb/resource (and namespace/name when given).

    resource is `pods`, `pods/binding`, `nodes/status`, `leases`...; `*` matches any. `times`
    limits how often the rule fires (None: forever). `after` performs the request first and
    then answers the error, as when a response is lost after the write happened."""

    code: int
    verbs: tuple[str, ...] = ("*",)
    resources: tuple[str, ...] = ("*",)
    namespace: str | None = None
    name: str | None = None
    times: int | None = None
    after: bool = False
    message: str = ""

    def matches(self, verb: str, resource: str, namespace: str, name: str) -> bool:
        """Whether this rule applies to the request."""
        return (("*" in self.verbs or verb in self.verbs)
                and ("*" in self.resources or resource in self.resources)
                and self.namespace in (None, namespace) and self.name in (None, name))

    def error(self, verb: str, resource: str) -> ApiError:
        """The injected error."""
        reason = _REASONS.get(self.code, "InternalError")
        text = self.message or f"injected fault: {self.code} for {verb} {resource}"
        return ApiError(self.code, reason, text)


@dataclass
class Faults:
    """The fault settings in force; every field may be replaced at runtime."""

    latency_ms: float = 0.0
    error_rate: float = 0.0
    error_code: int = 500
    rules: list[Rule] = field(default_factory=list)
    watch_drop_after: int | None = None  # close each watch after this many events
    watch_drop_mode: str = "reset"  # "reset": abort the connection; "end": end the stream
    seed: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def to_dict(self) -> dict:
        """The settings as JSON (what GET /_sim/faults answers)."""
        return {"latency_ms": self.latency_ms, "error_rate": self.error_rate,
                "error_code": self.error_code, "watch_drop_after": self.watch_drop_after,
                "watch_drop_mode": self.watch_drop_mode, "seed": self.seed,
                "rules": [{"code": r.code, "verbs": list(r.verbs),
                           "resources": list(r.resources), "namespace": r.namespace,
                           "name": r.name, "times": r.times, "after": r.after,
                           "message": r.message} for r in self.rules]}

    def update(self, spec: dict) -> None:
        """Changes the settings named in spec (a dict as POSTed to /_sim/faults)."""
        parsed = parse_spec(spec)
        with self._lock:
            for key, value in parsed.items():
                setattr(self, key, value)
            if "seed" in parsed:
                self._rng.seed(parsed["seed"])

    def clear(self) -> None:
        """Back to no faults."""
        with self._lock:
            self.latency_ms, self.error_rate, self.rules = 0.0, 0.0, []
            self.watch_drop_after, self.error_code = None, 500

    def pick(self, verb: str, resource: str, namespace: str, name: str) -> Rule | None:
        """The rule (or random error, as a rule) to apply to this request, if any."""
        with self._lock:
            for rule in self.rules:
                if rule.matches(verb, resource, namespace, name):
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times <= 0:
                            self.rules.remove(rule)
                    return rule
            if self.error_rate and self._rng.random() < self.error_rate:
                return Rule(code=self.error_code, message="injected random fault")
        return None


def _rule(spec, n: int) -> Rule:
    if not isinstance(spec, dict):
        raise FaultConfigError(f"rules[{n}]: must be an object, got {spec!r}")
    unknown = set(spec) - {"code", "verbs", "resources", "namespace", "name", "times", "after",
                           "message", "verb", "resource"}
    if unknown:
        raise FaultConfigError(f"rules[{n}]: unknown key(s) {sorted(unknown)}")
    try:
        code = int(spec["code"])
    except (KeyError, TypeError, ValueError) as e:
        raise FaultConfigError(f"rules[{n}].code: an HTTP status is required") from e
    if not 400 <= code <= 599:
        raise FaultConfigError(f"rules[{n}].code: {code} is not an HTTP error status")
    verbs = spec.get("verbs", [spec["verb"]] if "verb" in spec else ["*"])
    resources = spec.get("resources", [spec["resource"]] if "resource" in spec else ["*"])
    bad = [v for v in verbs if v != "*" and v not in VERBS]
    if bad:
        raise FaultConfigError(f"rules[{n}].verbs: unknown {bad}; use {', '.join(VERBS)}")
    times = spec.get("times")
    if times is not None and (not isinstance(times, int) or times < 1):
        raise FaultConfigError(f"rules[{n}].times: must be a positive integer or null")
    return Rule(code, tuple(verbs), tuple(resources), spec.get("namespace"), spec.get("name"),
                times, bool(spec.get("after", False)), str(spec.get("message", "")))


def _number(spec: dict, key: str, low: float, high: float) -> float:
    try:
        value = float(spec[key])
    except (TypeError, ValueError) as e:
        raise FaultConfigError(f"{key}: must be a number, got {spec[key]!r}") from e
    if not low <= value <= high:
        raise FaultConfigError(f"{key}: {value} is outside [{low}, {high}]")
    return value


def parse_spec(spec) -> dict:
    """Validates a fault spec; returns the attributes to set. Unknown keys are refused."""
    if not isinstance(spec, dict):
        raise FaultConfigError("a fault spec must be a JSON object")
    known = {"latency_ms", "error_rate", "error_code", "rules", "watch_drop_after",
             "watch_drop_mode", "seed", "drop_watches"}
    unknown = set(spec) - known
    if unknown:
        raise FaultConfigError(f"unknown fault key(s) {sorted(unknown)}; known: {sorted(known)}")
    out: dict = {}
    if "latency_ms" in spec:
        out["latency_ms"] = _number(spec, "latency_ms", 0, 60000)
    if "error_rate" in spec:
        out["error_rate"] = _number(spec, "error_rate", 0, 1)
    if "error_code" in spec:
        out["error_code"] = int(_number(spec, "error_code", 400, 599))
    if "rules" in spec:
        if not isinstance(spec["rules"], list):
            raise FaultConfigError("rules: must be a list of rule objects")
        out["rules"] = [_rule(r, n) for n, r in enumerate(spec["rules"])]
    if "watch_drop_after" in spec:
        value = spec["watch_drop_after"]
        if value is not None and (not isinstance(value, int) or value < 1):
            raise FaultConfigError("watch_drop_after: must be a positive integer or null")
        out["watch_drop_after"] = value
    if "watch_drop_mode" in spec:
        if spec["watch_drop_mode"] not in ("reset", "end"):
            raise FaultConfigError("watch_drop_mode: must be 'reset' or 'end'")
        out["watch_drop_mode"] = spec["watch_drop_mode"]
    if "seed" in spec:
        out["seed"] = spec["seed"] if spec["seed"] is None else int(spec["seed"])
    return out
