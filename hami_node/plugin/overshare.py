"""Catch what slips past the shim's compute limiter: containers whose driver-counted share of a
GPU's time exceeds their `gpucores`.

The limiter lives in the shim, so a process that reaches the driver without it (no preload, a
rewritten accounting file) runs unthrottled. This check, the compute side of overcap.py, trusts
nothing in the container: every second (`SAMPLE_S`) it reads the driver's per-process SM
utilization (NVML, by host PID; each process's mean over the driver's samples since the last
read), maps each process to its pod and container by its cgroup, and
sums per container and GPU. At each check (every `overCapCheckSeconds`) the mean of the
container's sums over the samples since the previous check (the window; a sample without the
container's processes counts 0) is compared with its gpucores: a container over it by more than
`overShareTolerance` percentage points is named in the log, gets a Warning Event and a metric,
and, where the operator asked (`evictOverShare`), is evicted.

Why these choices. The shim holds a container at most at its limit over any second or more
(docs/compute.md), so over a window of `overCapCheckSeconds` a throttled container is within a
point or two of it; the tolerance (10 points by default) leaves room for NVML's whole-percent
samples and for a window that straddles a burst, and is why a container given 90 or more cannot
be caught (it would need over 100 %). A process unthrottled above its share by more than the
tolerance over a whole window is flagged at that window's end: within
`overCapCheckSeconds` x (1 + threshold/share) + 1 s of when it started, under two periods.
"""
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from hami_node.plugin.errors import BackendError, ClusterError
from hami_node.plugin.overcap import (BYPASS, OffenderReports, add_by_container,
                                      allocated_devices, read_cgroup_owner)
from hami_node.plugin.worker import Worker

log = logging.getLogger(__name__)
EVENT_REASON = "GPUComputeOverShare"
SAMPLE_S = 1.0           # NVML's per-process figure covers about the last second
DEFAULT_TOLERANCE = 10.0


@dataclass(frozen=True)
class OverShare:
    """One container over its compute share on one GPU."""

    namespace: str
    pod: str
    uid: str
    container: str
    gpu: str
    share: float       # percent of the GPU's time, the mean over the window
    cap: int           # percent, the container's gpucores
    pids: tuple
    samples: int       # how many samples the window held


def share_caps(pod: dict, default_cores: int = 0) -> dict:
    """{(container name, GPU UUID): gpucores} the shim limits to (0 and 100 mean no limit and
    are left out), from what the scheduler decided, else the node's defaultCores."""
    caps = {}
    for name, device in allocated_devices(pod):
        cores = device.usedcores or default_cores
        if 0 < cores < 100:
            caps[(name, device.uuid)] = cores
    return caps


def find_over_share(samples: list, owner: Callable[[int], Optional[tuple]],
                    pods: Iterable[dict], tolerance: float = DEFAULT_TOLERANCE,
                    default_cores: int = 0) -> list:
    """samples: one {GPU UUID: {host pid: SM percent}} per sample of the window; owner:
    pid -> (pod UID, container ID). The containers whose mean share exceeds cap + tolerance."""
    if not samples:
        return []
    by_uid = {(p.get("metadata") or {}).get("uid"): p for p in pods}
    owners: dict = {}

    def cached_owner(pid: int) -> Optional[tuple]:    # each process's cgroup read once
        if pid not in owners:
            owners[pid] = owner(pid)
        return owners[pid]
    totals: dict = {}
    for sample in samples:
        add_by_container(sample, cached_owner, by_uid, totals)
    out = []
    for (uid, name, gpu), (total, pids) in sorted(totals.items()):
        pod = by_uid[uid]
        cap = share_caps(pod, default_cores).get((name, gpu))
        share = total / len(samples)
        if cap is not None and share > cap + tolerance:
            meta = pod.get("metadata") or {}
            out.append(OverShare(meta.get("namespace", ""), meta.get("name", ""), uid, name,
                                 gpu, round(share, 1), cap, pids, len(samples)))
    return out


class OverShareWatch(Worker):
    """Samples every `sample_s`, checks every `interval_s` over the samples since the last
    check; reports each offender once while it stays over."""

    join_s = 0.5

    def __init__(self, backend, cluster, node: str, interval_s: float, *,
                 tolerance: float = DEFAULT_TOLERANCE, default_cores: int = 0,
                 evict: bool = False, sample_s: float = SAMPLE_S,
                 owner: Callable[[int], Optional[tuple]] = read_cgroup_owner,
                 on_round: Callable[[list], None] = lambda offenders: None,
                 log: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        self.backend, self.cluster, self.node = backend, cluster, node
        self.interval_s, self.tolerance, self.default_cores = interval_s, tolerance, default_cores
        self.evict, self.sample_s, self.owner = evict, min(sample_s, interval_s), owner
        self.on_round, self.log, self.clock, self.wall = on_round, log, clock, wall
        self._last_us = 0
        self._samples: deque = deque()
        self.reports = OffenderReports(cluster, EVENT_REASON, evict, log)
        super().__init__("over-share")

    def _run(self) -> None:
        last = self.clock()
        while not self._stop.wait(self.sample_s):
            try:
                self.sample()
                if self.clock() - last >= self.interval_s - self.sample_s / 2:
                    last = self.clock()
                    self.check()
            except (BackendError, ClusterError) as e:
                self.log(f"over-share check skipped: {e}")

    def sample(self) -> None:
        """Takes one sample of every GPU's per-process utilization: each process's mean over
        the driver's samples since the previous one (the first: the last second)."""
        now_us = int(self.wall() * 1e6)
        since_us = self._last_us or now_us - int(self.sample_s * 1e6)
        self._samples.append({gpu.uuid: self.backend.process_utilization(gpu.uuid, since_us)
                              for gpu in self.backend.discover()})
        self._last_us = now_us

    def check(self) -> list:
        """One round over the samples taken since the last: the offenders found."""
        samples = list(self._samples)
        self._samples.clear()
        offenders = find_over_share(samples, self.owner, self.cluster.list_node_pods(self.node),
                                    self.tolerance, self.default_cores)
        self.on_round(offenders)
        self.reports.round(offenders, self._message)
        return offenders

    def _message(self, o: OverShare) -> str:
        return (f"container {o.container!r} used {o.share:.1f} % of GPU {o.gpu}'s time by the "
                f"driver's count over {o.samples * self.sample_s:g} s (processes "
                f"{', '.join(map(str, o.pids))}), over its share of {o.cap} % "
                f"(+{self.tolerance:g} tolerated): {BYPASS}")
