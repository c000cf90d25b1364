"""The workload a policy expects: pod classes with their frequencies, and the fragmentation of a
node measured against them (FGD's definition, ATC'23).

A node's GPU share is fragmented for a pod class when the class cannot use it: all free share if
the class does not fit on the node at all (CPU, memory, GPU type, too few GPUs with room), else
the free share of the GPUs too small for one of its slices. The node's fragmentation is the
expectation over the classes.
"""
import bisect
from collections import Counter
from dataclasses import dataclass

from hami_common.request import DeviceFilters

FULL = 1000          # a whole GPU, in thousandths


@dataclass(frozen=True)
class PodClass:
    """What placement sees of a pod: GPUs, share of each (thousandths), CPU, memory, types."""

    nums: int
    share: int
    cpu: int
    mem: int
    filters: DeviceFilters

    @classmethod
    def of(cls, request, with_mem: bool = True) -> "PodClass":
        """The class of a PodRequest (its first GPU container stands for it)."""
        gpu = next((c for c in request.containers if c.nums and not c.init), None)
        nums, share = (0, 0) if gpu is None else \
            (gpu.nums, min(FULL, max(gpu.cores, gpu.mem_percent) * 10))
        return cls(nums, share, request.cpu_milli, request.memory_mib if with_mem else 0,
                   request.filters)

    @property
    def demand(self) -> int:
        """GPU share asked, thousandths of a GPU."""
        return self.nums * self.share


def share_with(dev, slots: int = 0, mem: int = 0, cores: int = 0) -> int:
    """The device's free share (thousandths) once `slots`, `mem` MiB and `cores` more are taken."""
    if dev.used + slots >= dev.count or not dev.health or dev.cordoned or not dev.mode_ok:
        return 0
    free_cores = (dev.devcore - dev.usedcores - cores) * 1000 // dev.devcore if dev.devcore else 0
    free_mem = (dev.devmem - dev.usedmem - mem) * 1000 // dev.devmem if dev.devmem else 0
    return max(0, min(free_cores, free_mem))


def typical_classes(classes: Counter, popularity: float = 0.95) -> list:
    """FGD's typical pods: the most frequent classes that together cover `popularity` of the
    pods, with renormalised frequencies; [(PodClass, p)]."""
    total = sum(classes.values())
    ranked = sorted(classes.items(), key=lambda kv: (-kv[1], kv[0].cpu, kv[0].share,
                                                     kv[0].nums, str(kv[0].filters)))
    kept, covered = [], 0
    for cls, count in ranked:
        if covered >= popularity * total:
            break
        kept.append((cls, count))
        covered += count
    return [(cls, count / covered) for cls, count in kept]


class Workload:
    """A fixed set of (PodClass, probability) with a memoised node fragmentation measure."""

    def __init__(self, weighted, use_mem: bool = False, version: int = 0):
        self.classes = [(c, p) for c, p in weighted if p > 0]
        self.use_mem, self.version = use_mem, version
        self._cpu_cuts = sorted({c.cpu for c, _ in self.classes})
        self._mem_cuts = sorted({c.mem for c, _ in self.classes}) if use_mem else []
        self._memo = {}
        self._eligible = {}

    def _eligible_for(self, type_lower: str) -> tuple:
        """Per class (in order), whether it may use a GPU of that type; a table per type,
        since hashing each class's filters on every look-up costs more than the check."""
        table = self._eligible.get(type_lower)
        if table is None:
            table = self._eligible[type_lower] = tuple(cls.filters.type_ok(type_lower)
                                                      for cls, _ in self.classes)
        return table

    def frag(self, items: tuple, cpu_free: float, mem_free: float = float("inf")) -> float:
        """Expected fragmented share (thousandths of a GPU) of a node whose devices are
        `items` = ((type_lower, free_share), ...), given its free CPU (and memory)."""
        cpu_rank = bisect.bisect_right(self._cpu_cuts, cpu_free)
        mem_rank = bisect.bisect_right(self._mem_cuts, mem_free) if self.use_mem else 0
        key = (items, cpu_rank, mem_rank)
        value = self._memo.get(key)
        if value is None:
            if len(self._memo) > 400_000:
                self._memo.clear()
            value = self._memo[key] = self._frag(items, cpu_free, mem_free)
        return value

    def _frag(self, items, cpu_free, mem_free) -> float:
        total = sum(u for _, u in items)
        if total == 0:
            return 0.0
        result = 0.0
        devices = [(u, self._eligible_for(type_lower)) for type_lower, u in items]
        for index, (cls, p) in enumerate(self.classes):
            if cls.nums == 0 or cls.cpu > cpu_free or (self.use_mem and cls.mem > mem_free):
                result += p * total
                continue
            room = lost = 0
            for u, eligible in devices:
                if u >= cls.share and eligible[index]:
                    room += 1
                else:
                    lost += u
            result += p * (lost if room >= cls.nums else total)
        return result
