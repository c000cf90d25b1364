"""Holds: the GPU slices that preemption freed, kept for the pod they were freed for.

A hold names a preemptor, a node and its victims. While a victim still runs it holds its
slices itself; when it is gone (deleted, or finished) its reservation in the view is not
released but moved under a key of its own (`held:<victim>`, `held_for` the preemptor), so no
third pod's filter can take the slices in between. The preemptor's own filter releases them
first (as it releases its own earlier reservation), is placed, and the hold ends; if it does
not fit after all, they are reserved again.

A hold ends when the preemptor is placed (wherever), bound, deleted or finished, nominated to
another node, or `linger_s` after its last victim went without the preemptor being placed
(kube-scheduler retries a pod within seconds of a victim's deletion; a hold that outlives that
strands GPU slices).

Proposals are kube-scheduler's side: the preempt verb answers victims for several nodes and
kube-scheduler evicts on ONE of them. A proposal becomes the hold when kube-scheduler shows its
hand: the preemptor nominated to that node, or a proposed victim terminating or gone.
"""
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional

HELD_PREFIX = "held:"


@dataclass(frozen=True)
class PodMeta:
    """What preemption reads of a pod besides its reservation."""

    uid: str = ""
    priority: int = 0
    labels: Mapping = field(default_factory=dict)
    terminating: bool = False
    nominated: str = ""
    node: str = ""
    never: bool = False             # preemptionPolicy: Never

    @classmethod
    def of(cls, pod: Mapping) -> "PodMeta":
        """From a v1.Pod dict."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        try:
            priority = int(spec.get("priority") or 0)
        except (TypeError, ValueError):
            priority = 0
        return cls(str(meta.get("uid") or ""), priority, dict(meta.get("labels") or {}),
                   bool(meta.get("deletionTimestamp")),
                   str((pod.get("status") or {}).get("nominatedNodeName") or ""),
                   str(spec.get("nodeName") or ""), spec.get("preemptionPolicy") == "Never")


@dataclass
class Hold:
    """Slices freed (or being freed) on `node` for `preemptor`."""

    preemptor: str
    node: str
    victims: frozenset
    reason: str = ""
    created_s: float = 0.0
    by: str = "hami-control"         # who evicts: hami-control, or kube-scheduler
    gone: set = field(default_factory=set)
    all_gone_s: Optional[float] = None
    pdb_violations: int = 0

    @property
    def waiting(self) -> list:
        """The victims still running (or terminating)."""
        return sorted(self.victims - self.gone)


class HoldBook:
    """Holds by preemptor, the victims they wait for, and kube-scheduler's open proposals."""

    def __init__(self, linger_s: float = 30.0, proposal_s: float = 60.0):
        self.linger_s, self.proposal_s = linger_s, proposal_s
        self.holds: dict = {}             # preemptor -> Hold
        self._victim: dict = {}           # victim -> preemptor, while the victim runs
        self.proposals: dict = {}         # preemptor -> (time, {node: Hold})

    # --- making holds --------------------------------------------------------------------
    def add(self, hold: Hold) -> None:
        """Records a hold (replacing the preemptor's earlier one, whose victims are let go)."""
        self.drop(hold.preemptor)
        self.holds[hold.preemptor] = hold
        for victim in hold.victims:
            self._victim[victim] = hold.preemptor

    def propose(self, preemptor: str, now_s: float, by_node: Mapping) -> None:
        """kube-scheduler was offered victims on these nodes (node -> Hold)."""
        self.proposals[preemptor] = (now_s, dict(by_node))

    def victim_of(self, key: str) -> Optional[str]:
        """The preemptor a running victim makes room for, or None."""
        return self._victim.get(key)

    def promote(self, preemptor: str, node: str) -> Optional[Hold]:
        """kube-scheduler chose `node` for a proposal: it becomes the hold."""
        _, by_node = self.proposals.pop(preemptor, (0, {}))
        hold = by_node.get(node)
        if hold is not None:
            self.add(hold)
        return hold

    def proposed_node(self, victim: str) -> Optional[tuple]:
        """(preemptor, node) of an open proposal that names this victim, or None."""
        for preemptor, (_, by_node) in self.proposals.items():
            for node, hold in by_node.items():
                if victim in hold.victims:
                    return preemptor, node
        return None

    # --- victims leave -------------------------------------------------------------------
    def victim_gone(self, key: str, now_s: float) -> Optional[str]:
        """A victim left: the preemptor whose hold keeps its slices, or None."""
        preemptor = self._victim.pop(key, None)
        hold = self.holds.get(preemptor) if preemptor else None
        if hold is None:
            return None
        hold.gone.add(key)
        if hold.gone >= hold.victims:
            hold.all_gone_s = now_s
        return preemptor

    # --- ending holds --------------------------------------------------------------------
    def drop(self, preemptor: str) -> Optional[Hold]:
        """Ends the preemptor's hold (and proposals); the hold, or None."""
        self.proposals.pop(preemptor, None)
        hold = self.holds.pop(preemptor, None)
        if hold is not None:
            for victim in hold.victims:
                if self._victim.get(victim) == preemptor:
                    del self._victim[victim]
        return hold

    def expired(self, now_s: float) -> list:
        """Preemptors whose hold lingered too long after its last victim went; stale
        proposals are forgotten."""
        for preemptor in [p for p, (t, _) in self.proposals.items()
                          if now_s - t > self.proposal_s]:
            del self.proposals[preemptor]
        return [p for p, h in self.holds.items()
                if h.all_gone_s is not None and now_s - h.all_gone_s > self.linger_s]

    def snapshot(self) -> list:
        """Copies of the holds (for the dashboard)."""
        return [replace(h, gone=set(h.gone)) for h in self.holds.values()]


def held_key(victim: str) -> str:
    """The view key under which a gone victim's slices stay held."""
    return HELD_PREFIX + victim
