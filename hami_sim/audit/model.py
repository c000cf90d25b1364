"""What the auditor sees: one snapshot of what the cluster and the simulated GPUs expose (the
API server's objects as JSON, the simulated driver's per-process memory, the host's cgroups of
those processes, the shim folder's per-container directories, hami-node's /metrics text), and
the violations it finds. Plain data, so the checks are pure functions tested on hand-made
snapshots."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional

# The pod annotation a workload's author (here the soak) sets to say how the pod must end.
ANNO_EXPECT = "soak.hami.io/expect"


@dataclass(frozen=True)
class DriverProcess:
    """One process on one simulated GPU, by the driver's own count."""

    uuid: str               # the GPU
    pid: int                # host pid
    used_bytes: int
    pod_uid: str = ""       # from the process's cgroup ('' outside any pod)
    container_id: str = ""  # the runtime's container id from the cgroup ('' if not found)


@dataclass
class Snapshot:
    """Everything one audit pass reads, taken at `now` (UTC)."""

    now: datetime
    pods: list = field(default_factory=list)           # v1.Pod JSON
    nodes: list = field(default_factory=list)          # v1.Node JSON
    claims: list = field(default_factory=list)         # resource.k8s.io ResourceClaim JSON
    processes: list = field(default_factory=list)      # DriverProcess
    accounting_dirs: list = field(default_factory=list)  # names "<pod uid>_<container>"
    metrics: Optional[str] = None                      # hami-node's /metrics text


@dataclass(frozen=True)
class Violation:
    """One broken rule, with the objects involved."""

    check: str
    message: str
    objects: tuple = ()

    @property
    def key(self) -> tuple:
        """What identifies the same violation seen again in a later pass."""
        return (self.check, self.objects)

    def __str__(self) -> str:
        return f"[{self.check}] {self.message} (objects: {', '.join(self.objects)})"


@dataclass(frozen=True)
class Bounds:
    """How long things may take before they count as broken (seconds)."""

    pending_s: float = 90.0           # unbound while a node has had room for the pod
    bound_start_s: float = 180.0      # bound to a node but not running yet
    lock_age_s: float = 90.0          # a node's bind lock held
    leftover_s: float = 120.0         # an accounting directory or claim after its pod
    cap_slack_bytes: int = 0          # the driver's count may exceed the cap by this much
