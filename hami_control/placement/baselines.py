"""The comparison policies of the FGD paper (ATC'23), as its simulator defines them.

They exist to reproduce the published baselines in the trace replay; the server exposes
binpack, spread and fragaware. Each is both a node policy and a GPU policy.
- random: a uniformly random fitting node; a random fitting GPU for a shared slice.
- bestfit: the node with the least CPU and GPU left after placement (equal weights, normalised
  by 128 cores and 8 GPUs), scores as integers 0..100 min-max normalised; the fitting GPU with
  the least room for a shared slice.
- fgd: the node (and GPU) whose expected fragmentation w.r.t. the typical workload grows least,
  scored sigmoid(decrease / 1000) * 100 as an integer. Equal integer scores go to the best-fit
  node, then to a random one: with uniformly random ties FGD lands near 90% on the default
  trace in this simulator, with best-fit ties on the published 95% (see docs/placement.md).
Whole-GPU containers take the lowest-numbered free GPUs under all three.

One more, for the DRA comparison (bench/dra_placement.py):
- kubedra: what kube-scheduler does with GPUs as DRA devices (Kubernetes 1.34): devices are not
  scored, so a node scores by kube-scheduler's default NodeResourcesFit (LeastAllocated) plus
  NodeResourcesBalancedAllocation over CPU and memory alone, ties broken at random; within the
  node the DRA allocator takes the first fitting devices in the slice's order (GPU index).
"""
import math
import random

import numpy as np

from hami_control.placement.workload import Workload, share_with

MAX_SPEC_CPU = 128000     # millicores, the paper's normalisation constants
MAX_SPEC_GPU = 8000       # thousandths of a GPU


def _lowest(candidates, ctr):
    return sorted(candidates)[:ctr.nums]


def _is_shared(ctr) -> bool:
    return ctr.nums == 1 and ctr.cores < 100


class _Paper:
    random_ties = True
    version = 0

    def prepare(self, view) -> None:
        return None

    def normalize(self, scores):
        return scores


class Random(_Paper):
    """Uniformly random among fitting nodes and fitting GPUs."""

    name = "random"

    def __init__(self, rng: random.Random):
        self.rng = rng

    def pick(self, node, candidates, ctr, request):
        if _is_shared(ctr):
            return [self.rng.choice(list(candidates))]
        return _lowest(candidates, ctr)

    def score(self, node, request, plan) -> float:
        return 0.0


class BestFit(_Paper):
    """Least CPU and GPU left after placement."""

    name = "bestfit"

    def pick(self, node, candidates, ctr, request):
        if _is_shared(ctr):
            return [min(candidates, key=lambda p: (node.devices[p].share_free(), p))]
        return _lowest(candidates, ctr)

    def score(self, node, request, plan) -> float:
        cpu_left = 0.0 if node.cpu_capacity is None else node.cpu_free - request.cpu_milli
        gpu_left = sum(d.share_free() for d in node.devices) - sum(
            c.nums * min(c.cores, 100) * 10 for c in request.containers if not c.init)
        waste = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
        return float(int((1.0 - waste) * 100))

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        low, high = scores.min(), scores.max()
        if high == low:
            return np.zeros_like(scores)
        return np.floor((scores - low) * 100 / (high - low))


def node_items(node) -> tuple:
    """A node's devices as the fragmentation measure sees them, in canonical order."""
    return tuple(sorted(node.items()))


def plan_items(node, request, plan) -> tuple:
    """node_items once the plan is applied."""
    taken = {}
    for ctr, positions in zip(request.containers, plan):
        for pos in positions:
            s, m, c = taken.get(pos, (0, 0, 0))
            taken[pos] = (s + 1, m + ctr.memory_on(node.devices[pos].devmem), c + ctr.cores)
    items = list(node.items())
    for pos, (s, m, c) in taken.items():
        items[pos] = (items[pos][0], share_with(node.devices[pos], s, m, c))
    items.sort()
    return tuple(items)


def distinct_candidates(node, candidates) -> list:
    """The lowest position of each (type, free share) among the candidates: GPUs that look the
    same to the fragmentation measure need not be tried twice."""
    seen, out = set(), []
    items = node.items()
    for pos in sorted(candidates):
        if items[pos] not in seen:
            seen.add(items[pos])
            out.append(pos)
    return out


class FragmentationMeasure:
    """A node's fragmentation before and after a plan, against a workload, cached by version."""

    def __init__(self, workload: Workload):
        self.workload = workload
        self._before = {}

    def before(self, node) -> float:
        """Fragmentation of the node as it is."""
        hit = self._before.get(node.name)
        if hit is not None and hit[0] == node.version:
            return hit[1]
        value = self.workload.frag(node_items(node), node.cpu_free, node.mem_free)
        self._before[node.name] = (node.version, value)
        return value

    def after(self, node, request, plan) -> float:
        """Fragmentation once the plan (and the pod's CPU and memory) are added."""
        return self.workload.frag(plan_items(node, request, plan),
                                  node.cpu_free - request.cpu_milli,
                                  node.mem_free - request.memory_mib)


class FGD(_Paper):
    """Fragmentation gradient descent against a fixed typical workload."""

    name = "fgd"

    def __init__(self, workload: Workload):
        self.measure = FragmentationMeasure(workload)
        self.version = workload.version
        self._fit = BestFit()

    def pick(self, node, candidates, ctr, request):
        if not _is_shared(ctr):
            return _lowest(candidates, ctr)
        best, best_frag = None, None
        for pos in distinct_candidates(node, candidates):
            plan = tuple((pos,) if c is ctr else () for c in request.containers)
            frag = self.measure.after(node, request, plan)
            if best_frag is None or frag < best_frag:
                best, best_frag = pos, frag
        return [best]

    def score(self, node, request, plan) -> float:
        drop = self.measure.before(node) - self.measure.after(node, request, plan)
        fgd = int(100.0 / (1.0 + math.exp(-drop / 1000.0)))
        return fgd + self._fit.score(node, request, plan) / 1000.0


class KubeDra(_Paper):
    """kube-scheduler's default scores over CPU and memory; first-fit devices (see the top)."""

    name = "kubedra"

    def pick(self, node, candidates, ctr, request):
        return _lowest(candidates, ctr)

    def score(self, node, request, plan) -> float:
        if node.cpu_capacity is None or node.mem_capacity is None or \
                not node.cpu_capacity or not node.mem_capacity:
            return 0.0
        used = ((node.cpu_used + request.cpu_milli) / node.cpu_capacity,
                (node.mem_used + request.memory_mib) / node.mem_capacity)
        least = sum(int((1.0 - u) * 100) for u in used) // 2
        balanced = int((1.0 - abs(used[0] - used[1]) / 2) * 100)
        return float(least + balanced)
