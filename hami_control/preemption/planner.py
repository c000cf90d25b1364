"""Preemption over the cluster view: who may be preempted on a node, and the best node.

Pure functions of the view, the pods' metadata (PodMeta) and the holds: the state calls them
under its lock.
"""
from typing import Iterable, Mapping, Optional

from hami_control.placement.fit import fit_pod, resource_reason
from hami_control.placement.policy import Binpack
from hami_control.placement.preempt import (DEFAULT_BUDGET, Candidate, NodePlan, choose, remove,
                                            scratch_node)
from hami_control.placement.view import Reservation

MAX_SEARCHED_NODES = 32      # full searches per decision; nodes are pre-checked first


def candidates(view, metas: Mapping, book, node: str, priority: int,
               exclude: Iterable[str] = ()) -> list:
    """The pods on `node` that a pod of `priority` may preempt: GPU pods of lower priority,
    not terminating, not already making room for another preemptor."""
    out, skip = [], set(exclude)
    for r in view.node_reservations(node):
        meta = metas.get(r.pod)
        if r.held_for or not r.devices or meta is None or r.pod in skip:
            continue
        if meta.priority >= priority or meta.terminating or book.victim_of(r.pod):
            continue
        out.append(Candidate(r.pod, meta.priority, r, meta.labels, meta.uid))
    return out


def forced_victims(view, metas: Mapping, keys: Iterable[str], node: str) -> list:
    """kube-scheduler's own victims on `node` as Candidates (they go anyway)."""
    out = []
    for key in keys:
        meta = metas.get(key)
        r = view.reservation(key)
        if r is None or r.node != node or r.held_for:
            r = Reservation(key, node, ())
        uid = meta.uid if meta else key.partition("uid:")[2]    # a pod the view never saw
        out.append(Candidate(key, meta.priority if meta else 0, r,
                             meta.labels if meta else {}, uid))
    return out


def _could_fit(node, request, pool, resources: bool) -> bool:
    """Whether the pod fits once every pod of the pool is gone (a cheap pre-check)."""
    scratch = scratch_node(node)
    remove(scratch, (c.reservation for c in pool))
    if resources and resource_reason(scratch, request):
        return False
    return fit_pod(scratch, request, Binpack())[0] is not None


def best_plan(view, metas, book, request, priority: int, nodes: Optional[Iterable[str]],
              budgets, quota, resources: bool, budget: int = DEFAULT_BUDGET) -> tuple:
    """(the best NodePlan over the nodes, or None; node -> why not) for a pod that fits
    nowhere as things are."""
    names = [n.name for n in view.nodes] if nodes is None else list(nodes)
    best, why, searched = None, {}, 0
    for name in names:
        node = view.node(name)
        if node is None:
            continue
        pool = candidates(view, metas, book, name, priority)
        if not pool:
            why[name] = "no pod of lower priority holds a GPU there"
            continue
        if searched >= MAX_SEARCHED_NODES or not _could_fit(node, request, pool, resources):
            why[name] = "the pod does not fit even with every lower-priority pod gone"
            continue
        searched += 1
        plan = choose(node, request, pool, budgets=budgets, quota=quota, budget=budget,
                      resources=resources)
        if not plan.ok or not plan.victims:
            why[name] = plan.reason or "fits without preemption"
            continue
        if best is None or plan.rank() < best.rank():
            best = plan
    return best, why


def node_plan(view, metas, book, request, priority: int, node: str, offered, budgets, quota,
              resources: bool, budget: int = DEFAULT_BUDGET) -> NodePlan:
    """The plan on one node that kube-scheduler proposes, its own victims `offered` included."""
    found = view.node(node)
    if found is None:
        return NodePlan(node, reason="the node publishes no GPUs")
    forced = forced_victims(view, metas, offered, node)
    pool = candidates(view, metas, book, node, priority, exclude=offered)
    return choose(found, request, pool, forced=forced, budgets=budgets, quota=quota,
                  budget=budget, resources=resources)
