"""The policy boundary: a GPU policy picks a container's GPUs on a node, a node policy scores a
node for a plan. HAMi's binpack and spread live here; the trace baselines (random, bestfit,
fgd) and the fragmentation-aware policy in their own modules.
"""
from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class GpuPolicy(Protocol):
    """Chooses which of the fitting GPUs of a node a container gets."""

    name: str

    def prepare(self, view) -> None:
        """Called with the view before each decision (policies that need cluster context)."""

    def pick(self, node, candidates: Sequence[int], ctr, request) -> Sequence[int]:
        """`ctr.nums` positions out of `candidates` (all fit; more than needed)."""


@runtime_checkable
class NodePolicy(Protocol):
    """Scores a node for a pod whose GPUs on it are already chosen: higher is better."""

    name: str
    random_ties: bool        # break ties at random (kube-scheduler) or by node order
    version: int             # changes when the policy's scores would (e.g. a learned model)

    def prepare(self, view) -> None:
        """Called with the view before each decision (policies that need cluster context)."""

    def score(self, node, request, plan) -> float:
        """The node's score for the plan (device positions per container)."""

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Scores of all fitting nodes, rescaled the way the policy wants compared."""


def device_load(dev) -> float:
    """HAMi's device score: the used fraction of slots, cores and memory, summed."""
    return (dev.used / dev.count if dev.count else 1.0) + \
        (dev.usedcores / dev.devcore if dev.devcore else 0.0) + \
        (dev.usedmem / dev.devmem if dev.devmem else 0.0)


def node_load_after(node, request, plan) -> float:
    """The node's used fraction of slots, cores and memory once the plan is added."""
    count = cores = mem = used = used_cores = used_mem = 0
    for dev in node.devices:
        count, cores, mem = count + dev.count, cores + dev.devcore, mem + dev.devmem
        used, used_cores, used_mem = used + dev.used, used_cores + dev.usedcores, \
            used_mem + dev.usedmem
    for ctr, positions in zip(request.containers, plan):
        for pos in positions:
            used += 1
            used_cores += ctr.cores
            used_mem += ctr.memory_on(node.devices[pos].devmem)
    return (used / count if count else 0) + (used_cores / cores if cores else 0) + \
        (used_mem / mem if mem else 0)


class _Base:
    random_ties = False
    version = 0

    def prepare(self, view) -> None:
        return None

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        return scores


class Binpack(_Base):
    """HAMi binpack: fill the most used node, and the most used GPUs on it."""

    name = "binpack"

    def pick(self, node, candidates, ctr, request):
        ranked = sorted(candidates, key=lambda p: (-device_load(node.devices[p]), p))
        return ranked[:ctr.nums]

    def score(self, node, request, plan) -> float:
        return node_load_after(node, request, plan)


class Spread(_Base):
    """HAMi spread: the least used node, and the least used GPUs on it."""

    name = "spread"

    def pick(self, node, candidates, ctr, request):
        ranked = sorted(candidates, key=lambda p: (device_load(node.devices[p]), p))
        return ranked[:ctr.nums]

    def score(self, node, request, plan) -> float:
        return -node_load_after(node, request, plan)
