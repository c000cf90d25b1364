"""fragaware: the default policy (work in progress: FGD against the online-learned workload)."""
import math

from hami_control.placement.baselines import FragmentationMeasure


class FragAware:
    """Minimises the growth of expected fragmentation w.r.t. the workload seen so far."""

    name = "fragaware"
    random_ties = False

    def __init__(self, learner):
        self.learner = learner
        self._measure = None

    @property
    def version(self) -> int:
        return self.learner.version

    def _frag(self) -> FragmentationMeasure:
        if self._measure is None or self._measure.workload is not self.learner.current:
            self._measure = FragmentationMeasure(self.learner.current)
        return self._measure

    def pick(self, node, candidates, ctr, request):
        if not (ctr.nums == 1 and ctr.cores < 100):
            return sorted(candidates)[:ctr.nums]
        measure = self._frag()
        best, best_frag = None, None
        for pos in sorted(candidates):
            plan = tuple((pos,) if c is ctr else () for c in request.containers)
            frag = measure.after(node, request, plan)
            if best_frag is None or frag < best_frag:
                best, best_frag = pos, frag
        return [best]

    def score(self, node, request, plan) -> float:
        measure = self._frag()
        return measure.before(node) - measure.after(node, request, plan)

    def normalize(self, scores):
        return scores
