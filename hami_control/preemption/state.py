"""Preemptions: preemption's state beside the cluster view (pod priorities, disruption
budgets, holds) and the steps that change it. Every method runs under the SchedulerState's
lock: the state calls them from its own methods, the handlers through `state.lock`."""
import time
from collections import Counter, deque
from dataclasses import replace
from typing import Callable, Optional

from hami_control.placement.pdb import PdbSpec
from hami_control.placement.preempt import DEFAULT_BUDGET, Candidate, NodePlan, QuotaRule
from hami_control.placement.view import Reservation
from hami_control.preemption.book import Hold, HoldBook, PodMeta, held_key
from hami_control.preemption.planner import best_plan, node_plan

RECENT = 64          # preemption decisions kept for the dashboard


class Preemptions:
    """Pod metadata, budgets and holds for the state `state` (a SchedulerState)."""

    def __init__(self, state, clock: Callable[[], float] = time.monotonic,
                 linger_s: float = 30.0, budget: int = DEFAULT_BUDGET):
        self.state, self.clock, self.budget = state, clock, budget
        self.book = HoldBook(linger_s)
        self.metas: dict = {}             # pod key -> PodMeta
        self.by_uid: dict = {}            # uid -> pod key
        self.budgets: dict = {}           # (namespace, name) -> PdbSpec
        self.recent: deque = deque(maxlen=RECENT)
        self.version = 0                  # bumped on every change the dashboard shows
        self._priorities: Counter = Counter()     # priority -> pods known with it

    # --- the sync --------------------------------------------------------------------------
    def note_pod(self, key: str, pod: dict, deleted: bool) -> None:
        """A pod event: its metadata, and what it means for holds and proposals."""
        old = self.metas.pop(key, None) if deleted else self.metas.get(key)
        if old is not None:
            self._priorities[old.priority] -= 1
            if not self._priorities[old.priority]:
                del self._priorities[old.priority]
            if self.by_uid.get(old.uid) == key:
                del self.by_uid[old.uid]
        meta = None if deleted else PodMeta.of(pod)
        if meta is not None:
            self.metas[key] = meta
            self._priorities[meta.priority] += 1
            if meta.uid:
                self.by_uid[meta.uid] = key
        if (old.nominated if old else "") != (meta.nominated if meta else ""):
            self.version += 1
        self._preemptor_event(key, meta)
        if meta is None or meta.terminating:
            hit = self.book.proposed_node(key)
            if hit is not None:
                self._promote(*hit, "kube-scheduler evicts its victims")

    def _preemptor_event(self, key: str, meta: Optional[PodMeta]) -> None:
        hold = self.book.holds.get(key)
        if hold is not None:
            if meta is None:
                self.end(key, "the preemptor is gone")
            elif meta.node and meta.node != hold.node:
                self.end(key, f"the preemptor was bound to {meta.node}")
            elif meta.nominated and meta.nominated != hold.node:
                self.end(key, f"the preemptor was nominated to {meta.nominated}")
        elif meta is not None and meta.nominated and key in self.book.proposals:
            self._promote(key, meta.nominated, "kube-scheduler nominated the node")

    def _promote(self, preemptor: str, node: str, why: str) -> None:
        hold = self.book.promote(preemptor, node)
        if hold is not None:
            self._log("hold", hold, why)

    def apply_budget(self, namespace: str, name: str, spec: Optional[PdbSpec]) -> None:
        """A PodDisruptionBudget changed (None: deleted)."""
        if spec is None:
            self.budgets.pop((namespace, name), None)
        else:
            self.budgets[(namespace, name)] = spec

    def release(self, key: str):
        """Releases a pod's reservation from the view; a victim's slices stay held for its
        preemptor. The reservation released, or None."""
        view = self.state.view
        reservation = view.release(key)
        if reservation is None or not reservation.devices:
            return reservation
        preemptor = self.book.victim_gone(key, self.clock())
        if preemptor is not None:
            view.reserve(replace(reservation, pod=held_key(key), held_for=preemptor))
        return reservation

    # --- holds -----------------------------------------------------------------------------
    def _held(self, preemptor: str) -> list:
        hold = self.book.holds.get(preemptor)
        if hold is None:
            return []
        return [r for r in (self.state.view.reservation(held_key(v)) for v in hold.gone)
                if r is not None and r.held_for == preemptor]

    def take(self, preemptor: str) -> list:
        """Releases the slices held for the preemptor (before it is placed); they are returned
        for `restore` should it not be placed."""
        held = self._held(preemptor)
        for r in held:
            self.state.view.release(r.pod)
        return held

    def restore(self, held: list) -> None:
        """Holds again what `take` released."""
        for r in held:
            if self.state.view.reservation(r.pod) is None:
                self.state.view.reserve(r)

    def end(self, preemptor: str, why: str) -> None:
        """Ends the preemptor's hold: what it held is free."""
        self.take(preemptor)
        hold = self.book.drop(preemptor)
        if hold is not None:
            self._log("ended", hold, why)

    def placed(self, preemptor: str, node: str) -> None:
        """The preemptor was placed: its hold has done its work (or was not needed)."""
        if preemptor in self.book.holds:
            self.end(preemptor, f"the preemptor was placed on {node}")

    def expire(self) -> None:
        """Ends holds that lingered after their victims went (the preemptor never came)."""
        for preemptor in self.book.expired(self.clock()):
            self.end(preemptor, f"nobody came for the slices {self.book.linger_s:.0f} s after "
                                "the victims went")

    def hold_of(self, preemptor: str) -> Optional[Hold]:
        """The preemptor's hold, if any."""
        return self.book.holds.get(preemptor)

    # --- deciding --------------------------------------------------------------------------
    def _quota(self, namespace: str) -> Optional[QuotaRule]:
        limits = self.state.namespace_limits(namespace)
        if not limits:
            return None
        return QuotaRule(namespace, limits, self.state.view.namespace_used(namespace))

    def could_preempt(self, priority: int) -> bool:
        """Whether any pod known has a lower priority (most refused pods stop here: a
        cluster's pods mostly share the lowest priority)."""
        return any(p < priority for p in self._priorities)

    def plan(self, request, priority: int, nodes) -> tuple:
        """(best NodePlan or None, node -> why not) for a pod that fits nowhere now."""
        if not self.could_preempt(priority):
            return None, {}
        return best_plan(self.state.view, self.metas, self.book, request, priority, nodes,
                         list(self.budgets.values()), self._quota(request.namespace),
                         self.state.resources, self.budget)

    def start(self, request, plan: NodePlan, by: str = "hami-control") -> Hold:
        """Records the hold for a plan being carried out."""
        hold = Hold(request.key, plan.node, frozenset(c.key for c in plan.victims),
                    plan.reason, self.clock(), by, pdb_violations=plan.pdb_violations)
        self.book.add(hold)
        self._log("hold", hold, plan.reason)
        return hold

    def answer(self, request, priority: int, offered: dict) -> dict:
        """The preempt verb: node -> NodePlan for each node kube-scheduler offers (its own
        victims there by pod key), those that work recorded as proposals."""
        hold = self.book.holds.get(request.key)
        if hold is not None:            # still running victims only: kube-scheduler finds them
            victims = [self._candidate_like(k) for k in hold.waiting]
            if not victims:
                return {}
            return {hold.node: NodePlan(hold.node, tuple(victims), (), hold.pdb_violations,
                                        hold.reason)}
        plans, proposals = {}, {}
        quota, budgets = self._quota(request.namespace), list(self.budgets.values())
        for node, keys in offered.items():
            plan = node_plan(self.state.view, self.metas, self.book, request, priority, node,
                             keys, budgets, quota, self.state.resources, self.budget)
            plans[node] = plan
            if plan.ok and plan.victims:
                proposals[node] = Hold(request.key, node, frozenset(c.key for c in plan.victims),
                                       plan.reason, self.clock(), "kube-scheduler",
                                       pdb_violations=plan.pdb_violations)
        if proposals:
            self.book.propose(request.key, self.clock(), proposals)
        return plans

    def _candidate_like(self, key: str) -> Candidate:
        meta = self.metas.get(key) or PodMeta()
        return Candidate(key, meta.priority, Reservation(key, "", ()), meta.labels, meta.uid)

    # --- reading ---------------------------------------------------------------------------
    def _log(self, event: str, hold: Hold, why: str) -> None:
        self.version += 1
        self.recent.append({"event": event, "preemptor": hold.preemptor, "node": hold.node,
                            "victims": sorted(hold.victims), "by": hold.by, "why": why,
                            "at": time.time()})

    def snapshot(self) -> dict:
        """Holds, open proposals and recent decisions (for the dashboard)."""
        holds = [{"preemptor": h.preemptor, "node": h.node, "victims": sorted(h.victims),
                  "waiting_for": h.waiting, "by": h.by, "why": h.reason,
                  "pdb_violations": h.pdb_violations} for h in self.book.snapshot()]
        nominated = {k: m.nominated for k, m in self.metas.items() if m.nominated}
        return {"holds": holds, "nominated": nominated, "recent": list(self.recent)}
