"""The workload model learned online from the pods the engine has seen (a live server has no
trace to read): class frequencies, re-estimated at doubling intervals so that caches keyed on
the model version stay valid most of the time."""
from collections import Counter

from hami_control.placement.workload import PodClass, Workload, typical_classes


class OnlineWorkload:
    """Counts pod classes; `current` is the Workload estimated from them."""

    def __init__(self, popularity: float = 0.95, use_mem: bool = True, first_refresh: int = 16,
                 max_interval: int = 2048):
        self.popularity, self.use_mem = popularity, use_mem
        self.counts = Counter()
        self.seen = 0
        self._next, self._interval, self._max = first_refresh, first_refresh, max_interval
        self.current = Workload([], use_mem=use_mem, version=0)

    @property
    def version(self) -> int:
        """Changes whenever `current` is re-estimated."""
        return self.current.version

    def observe(self, request) -> None:
        """Count one pod; re-estimate when the next refresh point is reached."""
        self.counts[PodClass.of(request, with_mem=self.use_mem)] += 1
        self.seen += 1
        if self.seen >= self._next:
            self._interval = min(self._interval * 2, self._max)
            self._next = self.seen + self._interval
            self.current = Workload(typical_classes(self.counts, self.popularity),
                                    use_mem=self.use_mem, version=self.current.version + 1)
