"""ClaimBook: what DRA claims and the pods waiting for them hold against namespace GPU quotas.

kube-scheduler allocates hami-py's DRA claims itself, so no filter of ours sees them; the
book learns them from the claim watch and counts them in the view's per-namespace use
(`ClusterView.hold_quota`), where the extender's quota check, the quota status, the metrics
and the dashboard already look. A pod the webhook turned to DRA holds what it asked for
from the moment it may be scheduled (its quota gate lifted, or never gated) until every claim
it uses is allocated and counted, so two pods let through one after the other never both
count on the same room. All under the state's lock.
"""
from dataclasses import dataclass
from typing import Optional

from hami_control.placement.claims import ClaimUse
from hami_control.placement.quota import Amount, refusal

_POD = "pod:"        # quota hold keys: a waiting pod's; a claim's is "claim:<ns>/<name>"
_CLAIM = "claim:"


@dataclass
class _Waiting:
    """A DRA pod whose claims are not all counted yet."""

    uid: str
    namespace: str
    ask: Amount
    needed: int            # claims it uses
    gated: bool            # still held back by its quota gate (holds nothing)


class ClaimBook:
    """Claims of our driver and DRA pods, counted in a ClusterView under a lock."""

    def __init__(self, view, lock):
        self.view, self.lock = view, lock
        self._claims: dict = {}           # namespace/name -> ClaimUse
        self._by_pod: dict = {}           # pod UID -> set of claim keys reserved for it
        self._waiting: dict = {}          # pod key -> _Waiting
        self._uids: dict = {}             # pod UID -> pod key, of the waiting pods
        self.version = 0                  # bumped whenever a claim changes (the dashboard)

    # --- claims (sync) -------------------------------------------------------------------
    def apply_claim(self, key: str, use: Optional[ClaimUse]) -> None:
        """A claim as the watch saw it (None: deleted, unallocated, or not of our driver)."""
        with self.lock:
            old = self._claims.pop(key, None)
            if old != use:
                self.version += 1
            for _, uid in (old.pods if old else ()):
                held = self._by_pod.get(uid, set())
                held.discard(key)
                if not held:
                    self._by_pod.pop(uid, None)
            if use is not None:
                self._claims[key] = use
                for _, uid in use.pods:
                    self._by_pod.setdefault(uid, set()).add(key)
            self.view.hold_quota(_CLAIM + key, key.partition("/")[0],
                                 use.amount if use else None)
            for _, uid in (use.pods if use else ()):
                if self._uids.get(uid) in self._waiting:
                    self._settle(self._uids[uid])

    def reconcile_claims(self, listed) -> int:
        """After a relist: forgets the claims the list lacks; returns how many."""
        present = set(listed)
        with self.lock:
            gone = [k for k in self._claims if k not in present]
            for key in gone:
                self.apply_claim(key, None)
        return len(gone)

    def claims(self) -> list:
        """Every allocated claim of our driver (a copy)."""
        with self.lock:
            return list(self._claims.values())

    # --- pods (sync) ---------------------------------------------------------------------
    def apply_pod(self, key: str, uid: str, namespace: str, ask: Optional[Amount], needed: int,
                  gated: bool, gone: bool) -> None:
        """A pod event: `ask` (None: not a DRA pod of the webhook's) is what it holds until its
        `needed` claims are counted; a `gated` pod holds nothing yet; a `gone` (deleted or
        finished) pod nothing any more."""
        with self.lock:
            if gone or ask is None:
                self.forget(key)
                return
            known = self._waiting.get(key)
            if known is not None and known.uid == uid and not known.gated and gated:
                return                # let through already; an older event
            self._waiting[key] = _Waiting(uid, namespace, ask, needed, gated)
            self._uids[uid] = key
            self._settle(key)

    def admit(self, key: str, limits, ask: Optional[Amount] = None) -> Optional[str]:
        """For a gated pod: None, and it holds its ask (`ask` when given: counted afresh)
        from now on, when the ask fits its namespace's quota beside what the namespace holds;
        else why not."""
        with self.lock:
            waiting = self._waiting.get(key)
            if waiting is None or not waiting.gated:
                return None
            if ask is not None:
                waiting.ask = ask
            why = refusal(waiting.namespace, limits or {},
                          self.view.namespace_used(waiting.namespace), waiting.ask)
            if why is None:
                waiting.gated = False
                self._settle(key)
            return why

    def regate(self, key: str) -> None:
        """Undoes `admit` (the gate could not be lifted)."""
        with self.lock:
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting.gated = True
                self.view.hold_quota(_POD + key, waiting.namespace, None)

    def forget(self, key: str) -> None:
        """The pod is gone: it holds nothing."""
        with self.lock:
            waiting = self._waiting.pop(key, None)
            if waiting is not None:
                self._uids.pop(waiting.uid, None)
                self.view.hold_quota(_POD + key, waiting.namespace, None)

    def gated(self) -> list:
        """(pod key, namespace) of the pods still held back by their gate."""
        with self.lock:
            return [(k, w.namespace) for k, w in self._waiting.items() if w.gated]

    def waiting(self, key: str) -> Optional[tuple]:
        """(ask, gated) of a DRA pod whose claims are not all counted, or None."""
        with self.lock:
            w = self._waiting.get(key)
            return None if w is None else (w.ask, w.gated)

    def _settle(self, key: str) -> None:
        waiting = self._waiting[key]
        counted = len(self._by_pod.get(waiting.uid, ()))
        if waiting.needed and counted >= waiting.needed:
            del self._waiting[key]        # its claims count now
            self._uids.pop(waiting.uid, None)
            self.view.hold_quota(_POD + key, waiting.namespace, None)
        else:
            self.view.hold_quota(_POD + key, waiting.namespace,
                                 None if waiting.gated else waiting.ask)
