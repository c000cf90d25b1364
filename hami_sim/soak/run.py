"""The soak: pods of the openb mix created and deleted at a steady rate on a RealCluster while
a schedule of faults (overlapping at times) hits it, judged by the independent auditor; what it
saw, as a SoakReport."""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, TextIO

from hami_sim.audit.auditor import Auditor, AuditLoop
from hami_sim.audit.checks import GPU_FAILED, exit_lost_at, refused_by_kubelet_at
from hami_sim.audit.collect import real_cluster_source
from hami_sim.audit.model import Bounds
from hami_sim.soak.faults import PROCESS_KINDS, FaultResult, faults_for, kinds_for
from hami_sim.soak.report import SoakReport
from hami_sim.soak.tracker import PodTracker
from hami_sim.soak.workload import Mix, Shape

WARMUP_S = 15.0
OVERLAP_S = 3.0          # every third fault starts this soon after the one before


@dataclass
class SoakOptions:
    """How long, how fast, what faults, how strict."""

    duration_s: float = 3600.0
    rate: float = 0.25                     # pods created per second
    seed: int = 1
    shape: Shape = field(default_factory=Shape)
    kinds: tuple = PROCESS_KINDS          # the installed mode has more (kinds_for)
    fault_gap_s: float = 40.0              # between fault starts (the short soak: less)
    bounds: Bounds = field(default_factory=Bounds)
    audit_interval_s: float = 3.0
    # At the end: for the pods to go and their leftovers to be cleaned (at least the leftover
    # bound and a little more, so that a leftover is reported, not cut short).
    drain_s: float = 150.0
    wait_cleanup: bool = True              # False: only until the pods are gone (tests)


def schedule(options: SoakOptions) -> list:
    """(seconds into the soak, kind): every kind in a seeded order, round after round, one
    every fault_gap_s, every third one overlapping the one before; none in the last part of
    the run, so that the last recovery is watched."""
    order = list(options.kinds)
    random.Random(options.seed).shuffle(order)
    if "gpu-xid" in order:                 # the slowest recovery first
        order.remove("gpu-xid")
        order.insert(0, "gpu-xid")
    end = options.duration_s * 0.8
    plan, t, i = [], WARMUP_S, 0
    while t < end and order:
        plan.append((round(t, 1), order[i % len(order)]))
        i += 1
        t += OVERLAP_S if i % 3 == 2 else options.fault_gap_s
    return plan


class Soak:
    """One soak run over a started RealCluster (either install mode: its faults follow)."""

    def __init__(self, cluster, options: SoakOptions = SoakOptions(),
                 out: Optional[TextIO] = None,
                 side: Optional[Callable[["Soak"], None]] = None):
        self.c, self.options, self.out = cluster, options, out
        self.side = side                    # run in a thread beside the churn (tests)
        self.run_id = f"s{int(time.time())}"
        unknown = [k for k in options.kinds if k not in kinds_for(cluster.installed)]
        if unknown:
            raise ValueError(f"fault kind(s) {', '.join(unknown)} need the installed mode "
                             f"(hami-control installed by the chart); this cluster runs "
                             f"{cluster.install}")
        self.faults = faults_for(cluster)
        self.auditor = Auditor(options.bounds, out, excuse=self._excuse)
        self.results: list = []
        self.tracker = PodTracker(cluster, self.run_id, options.audit_interval_s)
        self.start = 0.0
        self._fault_threads: list = []
        self._side_source = None

    def snapshot(self):
        """A snapshot as the auditor sees it (for a side thread; its own API client)."""
        if self._side_source is None:
            self._side_source = real_cluster_source(self.c)
        return self._side_source.snapshot()

    def _excuse(self, pod: dict) -> Optional[str]:
        """Kubernetes' own gap, not ours: kubelet refuses a pod it admits while its device
        plugin is disconnected (UnexpectedAdmissionError), and neither kube-scheduler nor an
        extender can see that within the seconds it lasts. Counted apart, not a violation,
        when one of our faults had the plugin down then (README: what we survive). So is a
        pod refused at Allocate because its GPU failed (an XID) as it was being bound, before
        hami-node had published the failure: on any node a pod starting on a GPU that falls
        off the bus fails (the bind refuses a GPU already known unhealthy). And a container
        that ended while containerd restarted, its exit status lost (the hour's soak met one:
        a 2.5 s workload ending as containerd stopped)."""
        f = self.faults
        for when, gaps, says in (
                (refused_by_kubelet_at, f.plugin_gaps,
                 "kubelet refused it at {at:%H:%M:%S} while {kind} had the device plugin "
                 "disconnected"),
                (lambda p: refused_by_kubelet_at(p, GPU_FAILED), f.gpu_failures,
                 "refused at Allocate at {at:%H:%M:%S}: its GPU failed ({kind}) as it was "
                 "bound, before hami-node had published it unhealthy"),
                (exit_lost_at, f.runtime_restarts,
                 "its container ended at {at:%H:%M:%S} while containerd restarted ({kind}), "
                 "which lost its exit status (exit 255, Unknown)")):
            at = when(pod)
            kind = gaps.at(at.timestamp()) if at else ""
            if kind:
                return says.format(at=at, kind=kind)
        return None

    def say(self, text: str) -> None:
        """A progress line."""
        if self.out is not None:
            print(f"[soak {time.monotonic() - self.start:6.1f} s] {text}", file=self.out,
                  flush=True)

    def elapsed(self) -> float:
        """Seconds since the soak started."""
        return time.monotonic() - self.start

    def _fault(self, kind: str, at: float) -> None:
        self.say(f"fault {kind}")
        result: FaultResult = self.faults.inject(kind, at)
        self.results.append(result)
        self.say(f"fault {kind}: " + (f"recovered in {result.recovered_s:.1f} s"
                                      if not result.error else f"NOT RECOVERED: {result.error}"))

    def _faults(self, plan: list, stop: threading.Event) -> None:
        for at, kind in plan:
            if stop.wait(max(0.0, at - self.elapsed())):
                return
            t = threading.Thread(target=self._fault, args=(kind, at), name=f"fault-{kind}",
                                 daemon=True)
            t.start()
            self._fault_threads.append(t)

    def run(self) -> SoakReport:
        """Runs the soak for options.duration_s, then drains; the report."""
        o = self.options
        source = real_cluster_source(self.c)
        loop = AuditLoop(self.auditor, source.snapshot, o.audit_interval_s)
        mix = Mix(self.run_id, o.shape, o.seed)
        plan = schedule(o)
        stop = threading.Event()
        self.start = time.monotonic()
        self.tracker.start = self.start
        loop.start()
        planner = threading.Thread(target=self._faults, args=(plan, stop), daemon=True)
        planner.start()
        side = None
        if self.side is not None:
            side = threading.Thread(target=self.side, args=(self,), daemon=True)
            side.start()
        self.say(f"{len(plan)} faults planned; pods at {o.rate}/s for {o.duration_s:.0f} s")
        try:
            next_at = 0.0
            while self.elapsed() < o.duration_s:
                if self.elapsed() >= next_at:
                    self.tracker.create(mix.next())
                    next_at += 1.0 / o.rate
                self.tracker.sweep(self._fault_active())
                time.sleep(min(1.0, max(0.05, next_at - self.elapsed())))
        finally:
            stop.set()
            planner.join(timeout=10)
            for t in self._fault_threads:
                t.join(timeout=300)
            self.say("churn over; deleting what is left and waiting for the cleanup")
            self.tracker.drain(max(o.drain_s, o.bounds.leftover_s + 20),
                               lambda: source.snapshot().accounting_dirs if o.wait_cleanup
                               else [])
            if side is not None:
                side.join(timeout=60)
            loop.stop()
        serving = self._serving()
        return SoakReport.build(self, plan, serving)

    def _fault_active(self) -> bool:
        return any(t.is_alive() for t in self._fault_threads)

    def _serving(self) -> list:
        """What does not work at the end, in words (empty: everything recovered)."""
        f = self.faults
        problems = [] if f.api_ready() else ["kube-apiserver not ready"]
        if not f.node_serving():
            problems.append("node not Ready or not every virtual GPU offered")
        if not f.webhook_admits():
            problems.append("the webhook does not admit GPU pods")
        if not all(f.gpu_healthy(i) for i in range(len(self.c.spec.gpus))):
            problems.append("a GPU is still unhealthy")
        return problems + f.problems()
