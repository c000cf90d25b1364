"""Per-node free capacity as arrays, so that the engine can rule out nodes a pod cannot fit on
without looking at them one by one. Every test here is a necessary condition of `fit_pod`: a
node it rules out would have been refused anyway (its reason is worked out only if asked)."""
import numpy as np

FIELDS = ("cpu_free", "mem_free", "usable", "max_cores", "max_mem", "max_mem_pct")


class CapacityIndex:
    """cpu/mem free, usable GPUs (healthy, not cordoned, a free slot) and the most free cores,
    MiB and percent of memory on any usable GPU, per node position."""

    def __init__(self, nodes):
        size = len(nodes)
        for name in FIELDS:
            setattr(self, name, np.zeros(size))
        for node in nodes:
            self.update(node)

    def update(self, node) -> None:
        """Recompute one node's row (after any change to it)."""
        pos = node.position
        self.cpu_free[pos], self.mem_free[pos] = node.cpu_free, node.mem_free
        usable = max_cores = max_mem = 0
        max_pct = 0.0
        for d in node.devices:
            if d.used >= d.count or not d.health or d.cordoned or not d.mode_ok:
                # MIG GPUs fit by placement (fit.py); requests that accept them skip the index.
                continue
            usable += 1
            max_cores = max(max_cores, d.devcore - d.usedcores)
            max_mem = max(max_mem, d.devmem - d.usedmem)
            if d.devmem:
                max_pct = max(max_pct, (d.devmem - d.usedmem) * 100.0 / d.devmem)
        self.usable[pos], self.max_cores[pos], self.max_mem[pos] = usable, max_cores, max_mem
        self.max_mem_pct[pos] = max_pct

    def may_fit(self, positions: np.ndarray, request, resource_fit: bool) -> np.ndarray:
        """For each position, False if the pod certainly does not fit there."""
        ok = np.ones(len(positions), dtype=bool)
        if resource_fit:
            if request.cpu_milli:
                ok &= self.cpu_free[positions] >= request.cpu_milli
            if request.memory_mib:
                ok &= self.mem_free[positions] >= request.memory_mib
        if request.filters.mig:
            return ok
        for ctr in request.containers:
            if not ctr.nums or ctr.init:
                continue          # an init container may reuse the pod's own slices
            ok &= self.usable[positions] >= ctr.nums
            if ctr.cores:
                ok &= self.max_cores[positions] >= ctr.cores
            if ctr.mem_mib:
                ok &= self.max_mem[positions] >= ctr.mem_mib
            elif ctr.mem_percent:
                ok &= self.max_mem_pct[positions] > ctr.mem_percent - 1
        return ok
