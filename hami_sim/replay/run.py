"""One replay: every arriving pod goes through a Placer; the GPU allocation ratio is recorded
against the arrived GPU demand.

The Placer is the seam between the replay and what places: in-process here (pod dict ->
parse_pod -> Engine -> reserve), over HTTP (webhook, filter, bind against hami-control) for a
later `--http` mode.
"""
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Protocol

from hami_common.request import parse_pod
from hami_control.placement import ClusterView, Engine, PlacementConfig, Reservation
from hami_control.placement.quota import place_within_quota
from hami_control.placement.registry import PolicyRegistry
from hami_control.placement.workload import PodClass, Workload, typical_classes


class Placer(Protocol):
    """Places one pod (a v1.Pod dict) and says where it went."""

    def place(self, pod: dict) -> Optional[str]:
        """The node the pod was bound to, or None if it was refused."""


def cluster_view(nodes, split_count: int = 10) -> ClusterView:
    """A view of the trace cluster with CPU and memory capacity (for kube-scheduler's fit)."""
    view = ClusterView()
    for n in nodes:
        view.upsert_node(n.name, n.devices(split_count), cpu_milli=n.cpu_milli,
                         memory_mib=n.memory_mib)
    return view


def trace_workload(pods) -> Workload:
    """FGD's typical pods: classes of the whole pod list covering 95% of it (no memory)."""
    counts = Counter(PodClass.of(parse_pod(p.pod_object()), with_mem=False) for p in pods)
    return Workload(typical_classes(counts, 0.95), use_mem=False)


class InProcessPlacer:
    """Pod dict -> request -> the placement engine -> reservation in the view."""

    def __init__(self, view: ClusterView, policy: str, seed: int, pods, timed: bool = True,
                 quotas: Optional[dict] = None):
        rng = random.Random(seed)
        registry = PolicyRegistry(rng=rng, allow_baselines=True,
                                  fgd_workload=trace_workload(pods) if policy == "fgd" else None)
        self.view = view
        self.engine = Engine(PlacementConfig(node_policy=policy, gpu_policy=policy,
                                             resource_fit=True, explain=False),
                             registry=registry, rng=rng)
        self.timed, self.durations = timed, []
        self.quotas, self._namespaces, self._arrived = quotas or {}, list(quotas or ()), 0

    def place(self, pod: dict) -> Optional[str]:
        """Parse, place (within the quota of the namespace dealt to it), reserve; the node name
        or None."""
        start = time.perf_counter() if self.timed else 0.0
        if self._namespaces:
            pod["metadata"]["namespace"] = \
                self._namespaces[self._arrived % len(self._namespaces)]
            self._arrived += 1
        request = parse_pod(pod)
        decision = place_within_quota(self.engine, self.view, request, None,
                                      self.quotas.get(request.namespace))
        if decision.ok:
            self.view.reserve(Reservation.of(request, decision))
        if self.timed:
            self.durations.append(time.perf_counter() - start)
        return decision.node


@dataclass
class SeedResult:
    """What one seed's replay measured."""

    seed: int
    curve: list                  # allocation % at each 1% of arrived demand (None if no point)
    pods: int
    placed: int
    seconds: float
    durations: list = field(default_factory=list)

    @property
    def at_100(self) -> Optional[float]:
        """The figure: allocation % when the arrived demand reaches 100% of the GPUs."""
        return self.curve[100] if len(self.curve) > 100 else None

    def figures(self) -> dict:
        """The per-seed keys of the replay's summary (placement times in ms)."""
        durations = sorted(self.durations)
        return {"seed": self.seed, "alloc": self.at_100, "curve": self.curve, "pods": self.pods,
                "placed": self.placed, "seconds": self.seconds,
                "place_ms_sum": sum(durations) * 1000,
                "place_ms_p99": durations[int(0.99 * (len(durations) - 1))] * 1000
                if durations else 0.0}


def allocation_curve(points, total_gpus: int, top: int = 130) -> list:
    """Allocation % at each whole percent of arrived demand, the paper's read-out: the mean over
    the events whose arrived demand rounds to that percent (or, if none, to a neighbour within
    1%); where no event is that close (small clusters, large pods), the allocation after the
    last event below that percent. None above the last event."""
    buckets, steps = {}, []
    for arrived, allocated in points:
        pct = arrived * 100 / (total_gpus * 1000)
        buckets.setdefault(int(pct + 0.5), []).append(allocated * 100 / (total_gpus * 1000))
        steps.append((pct, allocated * 100 / (total_gpus * 1000)))
    last = steps[-1][0] if steps else -1
    curve, i, below = [], 0, None
    for x in range(top + 1):
        while i < len(steps) and steps[i][0] <= x:
            below = steps[i][1]
            i += 1
        values = buckets.get(x) or [v for k in (x - 1, x + 1) for v in buckets.get(k, [])]
        if values:
            curve.append(round(sum(values) / len(values), 4))
        else:
            curve.append(round(below, 4) if below is not None and x <= last else None)
    return curve


def replay(placer: Placer, sequence, total_gpus: int, seed: int = 0) -> SeedResult:
    """Feed the arrivals to the placer, recording (arrived, allocated) after each pod."""
    start = time.perf_counter()
    arrived = allocated = placed = 0
    points = []
    for i, pod in enumerate(sequence):
        arrived += pod.demand_milli
        if placer.place(pod.pod_object(name=f"{pod.name}-{i}")) is not None:
            allocated += pod.demand_milli
            placed += 1
        points.append((arrived, allocated))
    return SeedResult(seed, allocation_curve(points, total_gpus), len(sequence), placed,
                      time.perf_counter() - start, list(getattr(placer, "durations", [])))
