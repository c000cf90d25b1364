"""What an example pod promises, written in its `demo.hami.io/expect` annotation, and the pure
check of an outcome against it. The scenario is data: the demo knows these clauses, not the
examples.

    demo.hami.io/expect: "succeeds; oom-at-limit"
    demo.hami.io/expect: "pending; reason=CardInsufficientMemory"

Clauses, separated by `;`:

| clause | holds when |
|---|---|
| `succeeds` | the pod was bound and every container exited 0 |
| `pending` | the pod was never bound, and kube-scheduler said why (FailedScheduling) |
| `oom-at-limit` | a container got CUDA_ERROR_OUT_OF_MEMORY with what it used by the driver's count (allocations, context, modules) within one allocation chunk below its `nvidia.com/gpumem` limit, and saw that limit as the device's size |
| `share-near-limit[=P]` | every container's achieved share of its GPU's time is within P points (default 5) of its `nvidia.com/gpucores` |
| `same-gpu-as=POD` | the pod's GPUs are the GPUs of pod POD |
| `gpu-type=TEXT` | every GPU of the pod is of a type containing TEXT (case-insensitive), and the container saw such a device |
| `reason=TEXT` | every node's refusal (the extender's FailedNodes) mentions TEXT |
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

EXPECT_ANNOTATION = "demo.hami.io/expect"
SHOWS_ANNOTATION = "demo.hami.io/shows"
OUTCOMES = ("succeeds", "pending")
DEFAULT_SHARE_TOLERANCE = 5.0
MIB = 1 << 20


class ExpectationError(ValueError):
    """An expect annotation the demo cannot read; the message says what to fix."""


@dataclass(frozen=True)
class Expectation:
    """The parsed annotation."""

    outcome: str                              # succeeds | pending
    oom_at_limit: bool = False
    share_tolerance: Optional[float] = None   # points; None: not checked
    same_gpu_as: Optional[str] = None
    gpu_type: Optional[str] = None
    reason: Optional[str] = None


def _number(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise ExpectationError(f"{name}={value!r}: give a number of percentage points, "
                               f"e.g. {name}=5")
    return number


def parse(text: str) -> Expectation:
    """Parses `clause; clause; ...`; ExpectationError names a bad clause."""
    fields: dict = {}
    outcome = None
    for clause in (c.strip() for c in (text or "").split(";")):
        if not clause:
            continue
        name, _, value = (part.strip() for part in clause.partition("="))
        if name in OUTCOMES and not value:
            if outcome and outcome != name:
                raise ExpectationError(f"both {outcome!r} and {name!r}: a pod does one")
            outcome = name
        elif name == "oom-at-limit" and not value:
            fields["oom_at_limit"] = True
        elif name == "share-near-limit":
            fields["share_tolerance"] = (_number(name, value) if value
                                         else DEFAULT_SHARE_TOLERANCE)
        elif name in ("same-gpu-as", "gpu-type", "reason") and value:
            fields[name.replace("-", "_")] = value
        else:
            raise ExpectationError(f"unknown clause {clause!r}: use succeeds, pending, "
                                   "oom-at-limit, share-near-limit[=P], same-gpu-as=POD, "
                                   "gpu-type=TEXT, reason=TEXT")
    if outcome is None:
        raise ExpectationError(f"{text!r} says neither 'succeeds' nor 'pending'")
    if outcome == "pending" and set(fields) - {"reason"}:
        raise ExpectationError(f"{text!r}: a pending pod runs nothing, only reason= applies")
    return Expectation(outcome, **fields)


# Outcomes, as the scenario collects them ----------------------------------------------------

@dataclass
class ContainerOutcome:
    """One container as it ended."""

    name: str
    exit_code: Optional[int]
    gpus: list = field(default_factory=list)       # UUIDs (Allocate's NVIDIA_VISIBLE_DEVICES)
    memory_limit: int = 0                          # bytes (shim), 0: none
    memory_peak: int = 0                           # bytes (shim)
    cores_limit: int = 0                           # percent, 0: none
    share: Optional[float] = None                  # percent of device time achieved
    result: dict = field(default_factory=dict)     # the workload's JSON line
    said: str = ""                                 # its last output line


@dataclass
class PodOutcome:
    """One example pod as the scenario left it."""

    name: str
    namespace: str
    expectation: Expectation
    shows: str = ""
    phase: str = "Pending"
    node: Optional[str] = None
    gpu_types: dict = field(default_factory=dict)  # UUID -> registered type
    gpu_index: dict = field(default_factory=dict)  # UUID -> index on its node
    containers: list = field(default_factory=list)
    scheduler_message: str = ""                    # FailedScheduling message
    failed_nodes: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)     # Check

    @property
    def gpus(self) -> list:
        """Every GPU of the pod, in container order."""
        return list(dict.fromkeys(u for c in self.containers for u in c.gpus))

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return bool(self.checks) and all(c.ok for c in self.checks)


@dataclass(frozen=True)
class Check:
    """One clause's verdict with what was seen."""

    clause: str
    ok: bool
    detail: str


def evaluate(pod: PodOutcome, others: dict) -> list:
    """The checks of pod's expectation; others maps pod names to their outcomes."""
    e = pod.expectation
    checks = [_outcome(pod)]
    if e.oom_at_limit:
        checks.append(_oom(pod))
    if e.share_tolerance is not None:
        checks.append(_share(pod, e.share_tolerance))
    if e.same_gpu_as:
        checks.append(_same_gpu(pod, others.get(e.same_gpu_as)))
    if e.gpu_type:
        checks.append(_gpu_type(pod, e.gpu_type))
    if e.reason:
        checks.append(_reason(pod, e.reason))
    return checks


def _outcome(pod: PodOutcome) -> Check:
    if pod.expectation.outcome == "pending":
        ok = pod.node is None and bool(pod.scheduler_message)
        return Check("pending", ok, pod.scheduler_message or f"phase {pod.phase}, node "
                     f"{pod.node or '-'}, no FailedScheduling seen")
    codes = [c.exit_code for c in pod.containers]
    ok = pod.phase == "Succeeded" and bool(codes) and all(code == 0 for code in codes)
    detail = f"phase {pod.phase}" + (f", exit codes {codes}" if codes else "")
    if pod.node is None and pod.scheduler_message:
        detail += f"; {pod.scheduler_message}"
    return Check("succeeds", ok, detail)


def _oom(pod: PodOutcome) -> Check:
    for c in pod.containers:
        r = c.result
        if r.get("error") != "CUDA_ERROR_OUT_OF_MEMORY" or not c.memory_limit:
            continue
        limit_mib = c.memory_limit // MIB
        # the limit holds by the driver's count: allocations plus the context and modules
        below = limit_mib - r.get("used_mib", -1)
        ok = 0 <= below < r.get("chunk_mib", 0) and r.get("total_mib") == limit_mib
        return Check("oom-at-limit", ok, f"{r.get('error')} after {r.get('held_mib')} MiB "
                     f"allocated, {r.get('used_mib')} MiB in use with the context (limit "
                     f"{limit_mib} MiB, chunks of {r.get('chunk_mib')} MiB, device size seen "
                     f"{r.get('total_mib')} MiB)")
    seen = [c.result.get("error") or c.result.get("failed") for c in pod.containers]
    return Check("oom-at-limit", False, f"no container hit CUDA_ERROR_OUT_OF_MEMORY under a "
                 f"memory limit (saw {seen})")


def _share(pod: PodOutcome, tolerance: float) -> Check:
    measured = [c for c in pod.containers if c.cores_limit]
    if not measured:
        return Check("share-near-limit", False, "no container has a gpucores limit")
    bad = [c for c in measured if c.share is None or abs(c.share - c.cores_limit) > tolerance]
    detail = ", ".join(f"{c.name}: {'?' if c.share is None else f'{c.share:.1f}'} % "
                       f"of limit {c.cores_limit} %" for c in measured)
    return Check(f"share-near-limit={tolerance:g}", not bad, detail)


def _same_gpu(pod: PodOutcome, other: Optional[PodOutcome]) -> Check:
    clause = f"same-gpu-as={pod.expectation.same_gpu_as}"
    if other is None:
        return Check(clause, False, f"no example pod called {pod.expectation.same_gpu_as}")
    ok = bool(pod.gpus) and pod.node == other.node and set(pod.gpus) == set(other.gpus)
    return Check(clause, ok, f"{pod.node}/{','.join(pod.gpus) or '-'} vs "
                 f"{other.node}/{','.join(other.gpus) or '-'}")


def _gpu_type(pod: PodOutcome, text: str) -> Check:
    want = text.lower()
    types = [pod.gpu_types.get(u, "?") for u in pod.gpus]
    seen = [c.result.get("name", "?") for c in pod.containers if c.gpus]
    ok = bool(types) and all(want in t.lower() for t in types + seen)
    return Check(f"gpu-type={text}", ok, f"registered {types}, the container saw {seen}")


def _reason(pod: PodOutcome, text: str) -> Check:
    reasons = pod.failed_nodes
    ok = bool(reasons) and all(text.lower() in r.lower() for r in reasons.values())
    detail = "; ".join(f"{n}: {r}" for n, r in sorted(reasons.items())) or "no reasons seen"
    return Check(f"reason={text}", ok, detail)
