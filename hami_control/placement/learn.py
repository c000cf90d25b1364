"""The workload model learned online from the pods the engine has seen (a live server has no
trace to read): class frequencies, and how much CPU and memory GPU pods bring per GPU share.

It is re-estimated at doubling intervals (16, 32, 64, ... pods, then every `max_interval`), and
a new estimate replaces the current one only if it differs by more than `min_change` (total
variation of the class frequencies, or relative change of a resource ratio): every
replacement makes the engine re-score nodes, and a converged estimate should stop churning.
"""
from collections import Counter

from hami_control.placement.workload import PodClass, typical_classes


class WorkloadEstimate:
    """One estimate: typical classes with frequencies, CPU and memory per thousandth of GPU."""

    def __init__(self, classes, cpu_per_milli: float, mem_per_milli: float, version: int):
        self.classes, self.version = classes, version
        self.cpu_per_milli, self.mem_per_milli = cpu_per_milli, mem_per_milli


class OnlineWorkload:
    """Counts pod classes and resource ratios; `current` is the latest estimate."""

    def __init__(self, popularity: float = 0.95, first_refresh: int = 16,
                 max_interval: int = 1024, min_change: float = 0.05):
        self.popularity, self.min_change = popularity, min_change
        self.counts = Counter()
        self.seen = 0
        self.gpu_milli = self.gpu_cpu = self.gpu_mem = 0
        self._next, self._interval, self._max = first_refresh, first_refresh, max_interval
        self.current = WorkloadEstimate([], 0.0, 0.0, 0)

    @property
    def version(self) -> int:
        """Changes whenever `current` is re-estimated."""
        return self.current.version

    def observe(self, request) -> None:
        """Count one pod; re-estimate when the next refresh point is reached."""
        cls = PodClass.of(request, with_mem=True)
        self.counts[cls] += 1
        self.seen += 1
        if cls.demand:
            self.gpu_milli += cls.demand
            self.gpu_cpu += request.cpu_milli
            self.gpu_mem += request.memory_mib
        if self.seen >= self._next:
            self._interval = min(self._interval * 2, self._max)
            self._next = self.seen + self._interval
            self.refresh(force=False)

    def refresh(self, force: bool = True) -> bool:
        """Re-estimate now; unless forced, keep the current estimate if the new one is close.
        Returns whether the estimate was replaced."""
        milli = self.gpu_milli or 1
        fresh = WorkloadEstimate(typical_classes(self.counts, self.popularity),
                                 self.gpu_cpu / milli, self.gpu_mem / milli,
                                 self.current.version + 1)
        if not force and self.current.classes and _distance(self.current, fresh) <= \
                self.min_change:
            return False
        self.current = fresh
        return True


def _distance(old: WorkloadEstimate, new: WorkloadEstimate) -> float:
    """Total variation between the class frequencies, or the larger relative change of the CPU
    and memory ratios, whichever is larger."""
    before, after = dict(old.classes), dict(new.classes)
    tv = 0.5 * sum(abs(before.get(c, 0.0) - after.get(c, 0.0)) for c in set(before) | set(after))
    ratios = [abs(b - a) / b for b, a in ((old.cpu_per_milli, new.cpu_per_milli),
                                         (old.mem_per_milli, new.mem_per_milli)) if b]
    return max([tv] + ratios)
