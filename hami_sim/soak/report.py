"""What a soak prints at the end: pods run, faults injected by kind, violations, time to
recover per fault kind (p50/p99), pod start latency (p50/p99) against Kubernetes' 5 s SLO for
stateless pods."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

SLO_S = 5.0      # Kubernetes' pod startup SLO: p99 <= 5 s for stateless pods


def percentile(values: list, p: float) -> float:
    """The p-th percentile (nearest rank) of values; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


@dataclass
class SoakReport:
    """The figures of one soak run."""

    duration_s: float
    rate: float
    created: int = 0
    gpu_pods: int = 0
    ran: int = 0
    succeeded: int = 0
    failed: int = 0
    deleted_running: int = 0
    never_started: int = 0
    refused: dict = field(default_factory=dict)
    faults: dict = field(default_factory=dict)          # kind -> recovery seconds list
    unrecovered: list = field(default_factory=list)     # "kind at T s: error"
    planned: int = 0
    violations: list = field(default_factory=list)
    excused: list = field(default_factory=list)         # endings of Kubernetes' own gap
    restarts_apart: list = field(default_factory=list)  # a lost Lease's exit, restarted
    audit_passes: int = 0
    audit_missed: int = 0
    audit_pods: int = 0
    audit_processes: int = 0
    audit_metrics: int = 0
    audit_errors: list = field(default_factory=list)
    latency_all: list = field(default_factory=list)     # GPU pods, creation -> started
    latency_quiet: list = field(default_factory=list)   # ... no fault before it started
    latency_slo: list = field(default_factory=list)     # ... and never waited for GPU room
    not_serving: list = field(default_factory=list)
    load: tuple = ()
    when: str = ""

    @classmethod
    def build(cls, soak, plan: list, not_serving: list) -> "SoakReport":
        """From a finished Soak."""
        r = cls(soak.options.duration_s, soak.options.rate, planned=len(plan),
                not_serving=not_serving, load=os.getloadavg(),
                when=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
        lives = list(soak.tracker.lives.values())
        r.created = len(lives)
        r.gpu_pods = sum(1 for life in lives if life.pod.gpu)
        r.ran = sum(1 for life in lives if life.started)
        r.succeeded = sum(1 for life in lives if life.phase == "Succeeded")
        r.failed = sum(1 for life in lives if life.phase == "Failed")
        r.deleted_running = sum(1 for life in lives if life.deleted_running)
        r.never_started = sum(1 for life in lives if not life.started)
        r.refused = dict(soak.tracker.refused)
        for res in soak.results:
            if res.error:
                r.unrecovered.append(f"{res.kind} at {res.at:.0f} s: {res.error}")
            else:
                r.faults.setdefault(res.kind, []).append(res.recovered_s)
        for res in soak.results:
            r.faults.setdefault(res.kind, r.faults.get(res.kind, []))
        r.violations = list(soak.auditor.violations)
        r.excused = list(soak.auditor.excused)
        r.restarts_apart = soak.faults.restarts_apart()
        r.audit_passes, r.audit_missed = soak.auditor.passes, soak.auditor.missed
        r.audit_pods = len(soak.auditor.pods_seen)
        r.audit_processes = len(soak.auditor.pod_processes)
        r.audit_metrics = soak.auditor.metrics_samples
        r.audit_errors = list(soak.auditor.errors)
        for life in lives:
            if life.pod.gpu and life.started:
                # startedAt is whole seconds (truncated): its upper bound, + 1 s.
                latency = max(0.0, life.started + 1.0 - life.created)
                r.latency_all.append(latency)
                if not life.during_fault:
                    r.latency_quiet.append(latency)
                    if not life.waited_room:
                        r.latency_slo.append(latency)
        return r

    @property
    def injected(self) -> int:
        """Faults injected (recovered or not)."""
        return sum(len(v) for v in self.faults.values()) + len(self.unrecovered)

    def text(self) -> str:
        """The printed summary."""
        refused = sum(self.refused.values())
        lines = [
            f"soak: {self.duration_s:.0f} s, {self.rate:g} pods/s, {self.when}, "
            f"load average {' '.join(f'{x:.1f}' for x in self.load)} on {os.cpu_count()} CPUs",
            f"pods: {self.created} created ({self.gpu_pods} with GPUs), {self.ran} ran, "
            f"{self.succeeded} Succeeded, {self.failed} Failed, {self.deleted_running} deleted "
            f"while running or waiting, {self.never_started} never started; {refused} creations "
            f"refused during faults and tried again"
            + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(self.refused.items()))})"
               if refused else ""),
            f"faults: {self.injected} injected of {self.planned} planned, "
            f"{len(self.unrecovered)} not recovered",
            f"  {'kind':<26} {'count':>5} {'recover p50':>12} {'p99':>8}"]
        for kind, times in sorted(self.faults.items()):
            count = len(times) + sum(1 for u in self.unrecovered if u.startswith(kind + " "))
            lines.append(f"  {kind:<26} {count:>5} {percentile(times, 50):>10.1f} s "
                         f"{percentile(times, 99):>6.1f} s")
        lines += [f"  NOT RECOVERED: {u}" for u in self.unrecovered]
        lines.append(f"violations: {len(self.violations)} (auditor: {self.audit_passes} "
                     f"passes, {self.audit_missed} without an answer from the API server; "
                     f"{self.audit_pods} pods, {self.audit_processes} pod processes on the "
                     f"simulated GPUs and {self.audit_metrics} container samples of hami-node's "
                     f"metrics checked)")
        lines += [f"  {v}" for v in self.violations]
        if self.excused:
            lines.append(f"endings a fault explains (kubelet refusing a pod while hami-node "
                         f"was disconnected, the pod's GPU failing as it was bound, "
                         f"containerd losing an exit status as it restarted; not "
                         f"violations): {len(self.excused)}")
            lines += [f"  {v}" for v in self.excused]
        if self.restarts_apart:
            lines.append(f"components that exited after losing their Lease while the API "
                         f"server was away, restarted by kubelet (Kubernetes' design; not "
                         f"problems): {len(self.restarts_apart)}")
            lines += [f"  {v}" for v in self.restarts_apart]
        lines += [f"  AUDITOR ERROR: {e}" for e in self.audit_errors[:10]]
        lines.append("pod start latency, creation -> container started (startedAt has whole "
                     "seconds: + 1 s, an upper bound):")
        for label, values in (("all GPU pods", self.latency_all),
                              ("no fault before it started", self.latency_quiet),
                              ("... and schedulable at once (the SLO's case)",
                               self.latency_slo)):
            p99 = percentile(values, 99)
            verdict = "met" if p99 <= SLO_S else "missed"
            lines.append(f"  {label}: {len(values)} pods, p50 {percentile(values, 50):.1f} s, "
                         f"p99 {p99:.1f} s; Kubernetes' SLO p99 <= {SLO_S:g} s: {verdict}")
        if self.not_serving:
            lines.append("NOT SERVING at the end: " + "; ".join(self.not_serving))
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        """No violation, every fault recovered, everything serving at the end, no pass that
    failed in the auditor itself."""
        return not (self.violations or self.unrecovered or self.not_serving
                    or self.audit_errors)
