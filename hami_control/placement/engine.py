"""place(view, request) -> Decision: the node and GPUs for a pod, or why none fits.

Every node is judged by `fit_pod` (HAMi's device checks) and scored by the node policy. To keep
a decision cheap on a large cluster:
- scores are cached per request signature and re-computed only for nodes whose version changed
  since (a stream of similar pods costs a few node evaluations each);
- nodes the capacity index rules out are not evaluated (their reason is worked out only when a
  refusal has to be explained);
- nodes in identical states are evaluated once;
- a learned policy model changes rarely (see learn.py), and only then are all scores redone,
  each kind of pod's on its next decision. Not at once for the recent kinds: the server's
  filters are one at a time, and re-scoring 64 kinds over the 1,213 trace nodes stalled one
  filter for 0.3 s in-process (1.1 s in hami-control on a busy 2-core machine, three times in
  a 1,000-pod run: bench/k8s_throughput.py), while redoing each kind when it returns costs
  a few ms per kind and skips the kinds that do not.
"""
import random
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from hami_control.placement import reasons as R
from hami_control.placement.fit import fit_pod, resource_reason
from hami_control.placement.migfit import MigDemand
from hami_control.placement.model import Decision, PlacementError, plan_devices, plan_mig
from hami_control.placement.registry import PolicyRegistry

_CACHE_ENTRIES = 512


@dataclass(frozen=True)
class PlacementConfig:
    """How the engine places: default policies, node CPU/memory checks, explanations."""

    node_policy: str = "fragaware"
    gpu_policy: str = "fragaware"
    resource_fit: bool = False      # kube-scheduler already checks CPU/memory in a cluster
    explain: bool = True            # on a refusal, say why each node was refused
    learn: bool = True              # feed each request to the learned workload model


class _Entry:
    """Cached scores of one request signature under one pair of policies."""

    __slots__ = ("seen", "scores", "reasons", "plans")

    def __init__(self, size: int):
        self.seen = np.full(size, -1, dtype=np.int64)
        self.scores = np.full(size, -np.inf)
        self.reasons = [None] * size      # None on a refused node: not worked out yet
        self.plans = [None] * size        # the device positions the score was given for


class Engine:
    """The placement engine: policies (with their learned state) plus the decision procedure."""

    def __init__(self, config: PlacementConfig = PlacementConfig(),
                 registry: Optional[PolicyRegistry] = None, rng: Optional[random.Random] = None):
        self.config = config
        self.rng = rng or random.Random(0)
        self.registry = registry or PolicyRegistry(rng=self.rng)
        self.registry.resolve(config.node_policy, config.gpu_policy)    # fail fast on a typo
        self.mig_demand = MigDemand()

    def _policies(self, view, request) -> tuple:
        node_policy, gpu_policy = self.registry.resolve(
            request.node_policy or self.config.node_policy,
            request.gpu_policy or self.config.gpu_policy)
        node_policy.prepare(view)
        if gpu_policy is not node_policy:
            gpu_policy.prepare(view)
        return node_policy, gpu_policy

    def place(self, view, request, nodes: Optional[Iterable[str]] = None) -> Decision:
        """The decision for `request`; `nodes` limits the candidates (the extender's NodeNames)."""
        node_policy, gpu_policy = self._policies(view, request)
        if self.config.learn:
            self.registry.observe(request)
        self.mig_demand.observe(request)
        mask, unknown = (None, []) if nodes is None else view.candidates(nodes)
        entry = self._entry(view, request, node_policy, gpu_policy, mask)
        scores = entry.scores if mask is None else np.where(mask, entry.scores, -np.inf)
        fits = np.flatnonzero(scores > -np.inf)
        policy = (node_policy.name, gpu_policy.name)
        if fits.size == 0:
            failed = self._failed(view, request, gpu_policy, entry, mask, unknown)
            total = (len(view) if mask is None else int(mask.sum())) + len(unknown)
            return Decision(None, failed=failed, message=R.summarize(failed, total),
                            policy=policy)
        chosen = self._choose(fits, node_policy.normalize(scores[fits]), node_policy.random_ties)
        node = view.nodes[chosen]
        plan = entry.plans[chosen]       # the plan that was scored (a random pick may differ)
        if plan is None or entry.seen[chosen] != node.version:
            raise PlacementError(f"node {node.name}: no current plan behind its score")
        return Decision(node.name, plan_devices(node, request.containers, plan),
                        float(scores[chosen]), policy=policy, mig=plan_mig(node, plan))

    def node_scores(self, view, request, nodes: Optional[Iterable[str]] = None) -> dict:
        """name -> the node policy's score (normalised as it compares them) of every node the
        pod fits on, among `nodes` when given: what `place` chooses from, for a scheduler
        that chooses itself (the extender's prioritize for DRA claim pods)."""
        node_policy, gpu_policy = self._policies(view, request)
        if self.config.learn:
            self.registry.observe(request)
        mask = None if nodes is None else view.candidates(nodes)[0]
        entry = self._entry(view, request, node_policy, gpu_policy, mask)
        scores = entry.scores if mask is None else np.where(mask, entry.scores, -np.inf)
        fits = np.flatnonzero(scores > -np.inf)
        if fits.size == 0:
            return {}
        normalized = node_policy.normalize(scores[fits])
        return {view.nodes[pos].name: float(value)
                for pos, value in zip(fits.tolist(), normalized.tolist())}

    def _choose(self, fits, scores, random_ties: bool) -> int:
        best = np.flatnonzero(scores == scores.max())
        if len(best) > 1 and random_ties:
            return int(fits[best[self.rng.randrange(len(best))]])
        return int(fits[best[0]])

    def _failed(self, view, request, gpu_policy, entry, mask, unknown) -> dict:
        if not self.config.explain:
            return {}
        failed = {name: R.NODE_UNKNOWN for name in unknown}
        positions = np.flatnonzero(entry.scores == -np.inf)
        if mask is not None:
            positions = positions[mask[positions]]
        reasons, nodes = entry.reasons, view.nodes
        for pos in positions.tolist():
            if reasons[pos] is None:
                reasons[pos] = self._evaluate(nodes[pos], request, gpu_policy,
                                              None)[1] or R.NODE_UNKNOWN
            failed[nodes[pos].name] = reasons[pos]
        return failed

    def _evaluate(self, node, request, gpu_policy, node_policy) -> tuple:
        """(score, reason, plan): the score is -inf and the plan None when the pod does not
        fit."""
        why = resource_reason(node, request) if self.config.resource_fit else None
        if why is None:
            plan, why = fit_pod(node, request, gpu_policy, self.mig_demand)
            if plan is not None:
                score = node_policy.score(node, request, plan) if node_policy else 0.0
                return score, None, plan
        return -np.inf, why, None

    def _entry(self, view, request, node_policy, gpu_policy, mask=None) -> _Entry:
        """The request's cached scores, brought up to date on the nodes in `mask` (all when
        None): a node outside it keeps its stale score until it is a candidate again (the
        extender is asked about a sample of the nodes: re-scoring all that changed cost most
        of a prioritize answer)."""
        key = (request.signature, node_policy.name, gpu_policy.name, node_policy.version,
               gpu_policy.version, self.config.resource_fit, id(self.registry))
        caches = view.caches
        entry = caches.pop(key, None)
        if entry is None or len(entry.seen) != len(view):
            entry = _Entry(len(view))
        caches[key] = entry
        if len(caches) > _CACHE_ENTRIES:
            caches.pop(next(iter(caches)))
        stale = entry.seen != view.versions
        todo = np.flatnonzero(stale if mask is None else stale & mask)
        if todo.size:
            self._rescore(view, request, node_policy, gpu_policy, entry, todo)
        return entry

    def _rescore(self, view, request, node_policy, gpu_policy, entry, todo) -> None:
        may = view.capacity.may_fit(todo, request, self.config.resource_fit)
        entry.seen[todo] = view.versions[todo]
        ruled_out = todo[~may]
        entry.scores[ruled_out] = -np.inf
        reasons, plans = entry.reasons, entry.plans
        for pos in ruled_out.tolist():
            reasons[pos] = plans[pos] = None
        with_uuid = bool(request.filters.use_uuids or request.filters.nouse_uuids)
        # Python ints and lists in the loop: it runs over every node for a new kind of pod.
        positions, nodes = todo[may].tolist(), view.nodes
        scores, done = [], {}
        for pos in positions:
            node = nodes[pos]
            key = node.state_key(with_uuid)
            result = done.get(key)
            if result is None:
                result = done[key] = self._evaluate(node, request, gpu_policy, node_policy)
            scores.append(result[0])
            reasons[pos], plans[pos] = result[1], result[2]
        entry.scores[positions] = scores


def place(view, request, config: PlacementConfig = PlacementConfig(),
          nodes: Optional[Iterable[str]] = None) -> Decision:
    """One decision with a fresh engine (no learned state): convenient for tests and tools."""
    return Engine(config).place(view, request, nodes)
