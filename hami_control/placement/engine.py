"""place(view, request) -> Decision: the node and GPUs for a pod, or why none fits.

Every node is judged by `fit_pod` (HAMi's device checks) and scored by the node policy. Scores
are cached per request signature and re-computed only for nodes whose version changed since,
so a stream of similar pods costs a few node evaluations each, not one per node of the cluster.
"""
import random
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from hami_control.placement import reasons as R
from hami_control.placement.fit import fit_pod, resource_reason
from hami_control.placement.model import Decision, PlacementError, plan_devices
from hami_control.placement.registry import PolicyRegistry

_CACHE_ENTRIES = 512


@dataclass(frozen=True)
class PlacementConfig:
    """How the engine places: default policies, and whether it checks node CPU/memory."""

    node_policy: str = "fragaware"
    gpu_policy: str = "fragaware"
    resource_fit: bool = False      # kube-scheduler already checks CPU/memory in a cluster
    explain: bool = True            # collect per-node reasons of the nodes that do not fit
    learn: bool = True              # feed each request to the learned workload model


class _Entry:
    __slots__ = ("seen", "scores", "reasons")

    def __init__(self, size: int):
        self.seen = np.full(size, -1, dtype=np.int64)
        self.scores = np.full(size, -np.inf)
        self.reasons = [None] * size


class Engine:
    """The placement engine: policies (with their learned state) plus the decision procedure."""

    def __init__(self, config: PlacementConfig = PlacementConfig(),
                 registry: Optional[PolicyRegistry] = None, rng: Optional[random.Random] = None):
        self.config = config
        self.rng = rng or random.Random(0)
        self.registry = registry or PolicyRegistry(rng=self.rng)
        self.registry.resolve(config.node_policy, config.gpu_policy)    # fail fast on a typo

    def place(self, view, request, nodes: Optional[Iterable[str]] = None) -> Decision:
        """The decision for `request`; `nodes` limits the candidates (the extender's NodeNames)."""
        node_name = request.node_policy or self.config.node_policy
        gpu_name = request.gpu_policy or self.config.gpu_policy
        node_policy, gpu_policy = self.registry.resolve(node_name, gpu_name)
        node_policy.prepare(view)
        if gpu_policy is not node_policy:
            gpu_policy.prepare(view)
        if self.config.learn:
            self.registry.observe(request)
        entry = self._entry(view, request, node_policy, gpu_policy)
        mask, unknown = self._candidates(view, nodes)
        scores = entry.scores if mask is None else np.where(mask, entry.scores, -np.inf)
        fits = np.flatnonzero(scores > -np.inf)
        policy = (node_policy.name, gpu_policy.name)
        if fits.size == 0:
            failed = self._failed(view, entry, mask, unknown)
            total = (len(view) if mask is None else int(mask.sum())) + len(unknown)
            return Decision(None, failed=failed, message=R.summarize(failed, total),
                            policy=policy)
        chosen = self._choose(fits, node_policy.normalize(scores[fits]), node_policy.random_ties)
        node = view.nodes[chosen]
        plan, why = fit_pod(node, request, gpu_policy)
        if plan is None:      # a policy whose pick is random may differ from the cached one
            raise PlacementError(f"node {node.name} fitted when scored but not now: {why}")
        failed = self._failed(view, entry, mask, unknown) if self.config.explain else {}
        return Decision(node.name, plan_devices(node, request.containers, plan),
                        float(scores[chosen]), failed, policy=policy)

    def _choose(self, fits, scores, random_ties: bool) -> int:
        best = np.flatnonzero(scores == scores.max())
        if len(best) > 1 and random_ties:
            return int(fits[best[self.rng.randrange(len(best))]])
        return int(fits[best[0]])

    def _candidates(self, view, nodes):
        if nodes is None:
            return None, []
        mask = np.zeros(len(view), dtype=bool)
        unknown = []
        for name in nodes:
            node = view.node(name)
            if node is None:
                unknown.append(name)
            else:
                mask[node.position] = True
        return mask, unknown

    def _failed(self, view, entry, mask, unknown) -> dict:
        if not self.config.explain:
            return {}
        failed = {name: R.NODE_UNKNOWN for name in unknown}
        positions = np.flatnonzero(entry.scores == -np.inf)
        if mask is not None:
            positions = positions[mask[positions]]
        for pos in positions:
            failed[view.nodes[pos].name] = entry.reasons[pos]
        return failed

    def _entry(self, view, request, node_policy, gpu_policy) -> _Entry:
        key = (request.signature, node_policy.name, gpu_policy.name, node_policy.version,
               getattr(gpu_policy, "version", 0), self.config.resource_fit, id(self.registry))
        caches = view.caches
        entry = caches.pop(key, None)
        if entry is None or len(entry.seen) != len(view):
            entry = _Entry(len(view))
        caches[key] = entry
        if len(caches) > _CACHE_ENTRIES:
            caches.pop(next(iter(caches)))
        stale = np.flatnonzero(entry.seen != view.versions)
        for pos in stale:
            node = view.nodes[pos]
            entry.seen[pos] = node.version
            why = resource_reason(node, request) if self.config.resource_fit else None
            plan = None
            if why is None:
                plan, why = fit_pod(node, request, gpu_policy)
            if plan is None:
                entry.scores[pos], entry.reasons[pos] = -np.inf, why
            else:
                entry.scores[pos] = node_policy.score(node, request, plan)
                entry.reasons[pos] = None
        return entry


def place(view, request, config: PlacementConfig = PlacementConfig(),
          nodes: Optional[Iterable[str]] = None) -> Decision:
    """One decision with a fresh engine (no learned state): convenient for tests and tools."""
    return Engine(config).place(view, request, nodes)
