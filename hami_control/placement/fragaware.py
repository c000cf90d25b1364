"""fragaware: the default policy. FGD's expected fragmentation, extended with what FGD ignores.

A node's loss is the GPU share that the expected workload could not use on it:
- per pod class (learned online from the pods seen), FGD's fragmentation: the free share the
  class cannot use on this node (all of it if the class does not fit at all: CPU, memory, GPU
  type, too few GPUs with room; else the GPUs too small for one of its slices);
- each class weighted by its frequency *and by the scarcity of the GPUs it may use*: a class
  limited to a model that is 1/7 of the cluster counts 7x, so pods that can run anywhere keep
  off the GPUs that constrained pods depend on;
- plus the GPU share stranded by CPU or memory: free share beyond what the node's free CPU
  (memory) can feed at the workload's CPU (memory) per GPU share.
A placement is scored by how much it lowers the loss; ties go to the node left with the least
CPU and GPU (best fit), then to node order.
"""
from hami_control.placement.baselines import distinct_candidates, node_items, plan_items
from hami_control.placement.workload import Workload

_TIE = 1e-4          # best-fit tie-break weight, below the score's rounding step


class FragAware:
    """The fragmentation-aware node and GPU policy."""

    name = "fragaware"
    random_ties = False

    def __init__(self, learner):
        self.learner = learner
        self._model = None           # (learner version, view epoch, Workload)
        self._view = None
        self._before = {}
        self._picked = None          # (what pick chose for, (items, loss)) of its last choice

    @property
    def version(self) -> int:
        """The learned model's version: scores change when it does."""
        return self.learner.version

    def prepare(self, view) -> None:
        """Bind to the view being placed into (capacity by GPU type, the largest node)."""
        self._view = view

    def _workload(self) -> Workload:
        estimate, view = self.learner.current, self._view
        epoch = view.epoch if view is not None else -1
        if self._model is None or self._model[0] != estimate.version or self._model[1] != epoch:
            self._model = (estimate.version, epoch, self._weighted(estimate, view))
            self._before.clear()
        return self._model[2]

    @staticmethod
    def _weighted(estimate, view) -> Workload:
        shapes = view.node_shapes() if view is not None else {}
        total = sum(count * len(types) for (_, _, types), count in shapes.items())
        weighted = []
        for cls, p in estimate.classes:
            usable = _reachable(cls, shapes) if total else 0
            weighted.append((cls, p * (total / usable if usable else 1.0)))
        workload = Workload(weighted, use_mem=True, version=estimate.version)
        workload.cpu_per_milli, workload.mem_per_milli = estimate.cpu_per_milli, \
            estimate.mem_per_milli
        return workload

    def _loss(self, workload, items, cpu_free, mem_free) -> float:
        loss = workload.frag(items, cpu_free, mem_free)
        free = sum(u for _, u in items)
        stranded = 0.0
        if workload.cpu_per_milli and cpu_free != float("inf"):
            stranded = free - cpu_free / workload.cpu_per_milli
        if workload.mem_per_milli and mem_free != float("inf"):
            stranded = max(stranded, free - mem_free / workload.mem_per_milli)
        return loss + max(0.0, stranded)

    def _loss_before(self, workload, node) -> float:
        hit = self._before.get(node.name)
        if hit is not None and hit[0] == node.version:
            return hit[1]
        value = self._loss(workload, node_items(node), node.cpu_free, node.mem_free)
        self._before[node.name] = (node.version, value)
        return value

    def _after(self, workload, node, request, plan) -> tuple:
        items = plan_items(node, request, plan)
        return items, self._loss(workload, items, node.cpu_free - request.cpu_milli,
                                 node.mem_free - request.memory_mib)

    def pick(self, node, candidates, ctr, request):
        """A shared slice goes to the GPU that leaves the lowest loss; whole GPUs in order."""
        if not (ctr.nums == 1 and ctr.cores < 100):
            return sorted(candidates)[:ctr.nums]
        workload = self._workload()
        best = None             # (position, plan, (items, loss))
        for pos in distinct_candidates(node, candidates):
            plan = tuple((pos,) if c is ctr else () for c in request.containers)
            after = self._after(workload, node, request, plan)
            if best is None or after[1] < best[2][1] - 1e-9:
                best = (pos, plan, after)
        self._picked = ((node, node.version, request, best[1], workload), best[2])
        return [best[0]]

    def score(self, node, request, plan) -> float:
        """Loss before minus loss after the plan, then a best-fit tie-break below 1e-3."""
        workload = self._workload()
        picked = self._picked       # `pick` has just worked out the plan of a one-slice pod
        if picked is not None and picked[0] == (node, node.version, request, plan, workload):
            items, after = picked[1]
        else:
            items, after = self._after(workload, node, request, plan)
        drop = self._loss_before(workload, node) - after
        return round(drop, 3) + _TIE * self._tightness(node, request, items)

    def _tightness(self, node, request, items) -> float:
        """1 for a node left with nothing free, 0 for the largest node left empty."""
        max_cpu, max_gpu = self._view.largest() if self._view is not None else (0, 8000)
        gpu_left = sum(u for _, u in items)
        cpu_left = 0.0 if node.cpu_capacity is None else node.cpu_free - request.cpu_milli
        waste = 0.5 * gpu_left / max_gpu + (0.5 * cpu_left / max_cpu if max_cpu else 0.0)
        return 1.0 - waste

    def normalize(self, scores):
        return scores



def _reachable(cls, shapes) -> int:
    """GPUs on the nodes that could host one pod of the class when empty (GPU types, count,
    CPU and memory capacity): the part of the cluster the class may ever use."""
    gpus = 0
    for (cpu, mem, types), count in shapes.items():
        if cls.cpu > cpu or cls.mem > mem:
            continue
        eligible = sum(1 for t in types if cls.filters.type_ok(t))
        if eligible >= max(cls.nums, 1):
            gpus += count * len(types)
    return gpus
