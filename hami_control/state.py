"""SchedulerState: the placement view and engine behind one lock, shared by the cluster sync
(which applies what the API server says) and the extender (which places and reserves).

The pods' annotations are the truth: the view holds what they say, plus the reservations the
extender made and is writing. While a filter writes a pod's annotations, the pod is `pending`:
watch events for it (possibly older than the write) are held back until the write succeeds
(`confirm`, with the version it produced: only a newer event still applies) or fails
(`rollback`: the newest event held back is the truth, e.g. a write that landed although its
answer was lost; without one, the reservation from before). Events older than the last version
applied to a pod are ignored, so a late event never undoes a newer decision.

When the engine's learned workload model is re-estimated, every cached score is stale; the
`rescorer` (an engine sharing the same policies and caches that does not learn) re-scores the
recent kinds of pods at once, so that the following filters are not each a full pass.
"""
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Optional

from hami_control.placement import ClusterView, Engine, PlacementConfig, PlacementError, \
    Reservation
from hami_control.placement.registry import PolicyRegistry

log = logging.getLogger(__name__)
_RECENT = 64


def make_state(node_policy: str = "fragaware", gpu_policy: str = "fragaware") -> \
        "SchedulerState":
    """The server's state: the engine (it explains refusals) and a non-learning rescorer over
    the same policies. PlacementError for an unknown policy name."""
    registry = PolicyRegistry()
    engine = Engine(PlacementConfig(node_policy=node_policy, gpu_policy=gpu_policy),
                    registry=registry)
    rescorer = Engine(PlacementConfig(node_policy=node_policy, gpu_policy=gpu_policy,
                                      explain=False, learn=False), registry=registry)
    return SchedulerState(engine, rescorer=rescorer)


@dataclass
class _PodRecord:
    rv: Optional[int] = None        # newest resourceVersion applied
    pending: int = 0                # token of the filter writing the pod's annotations
    held: Optional[tuple] = None    # (rv, reservation) of the newest event while pending


def _newer(rv: Optional[int], than: Optional[int]) -> bool:
    return rv is None or than is None or rv > than


@dataclass(frozen=True)
class Placement:
    """What `decide` did: the decision, the reservation it replaced, and the filter's token."""

    decision: object
    previous: Optional[Reservation]
    token: int


class SchedulerState:
    """The cluster view, the engine, and the bookkeeping that keeps them consistent."""

    def __init__(self, engine: Engine, view: Optional[ClusterView] = None,
                 rescorer: Optional[Engine] = None):
        self.engine, self.rescorer = engine, rescorer
        self.view = view or ClusterView()
        self.lock = threading.RLock()
        self._pods: dict = {}
        self._registrations: dict = {}    # node name -> NodeRegistration applied
        self._tokens = itertools.count(1)
        self._recent: dict = {}           # signature -> the latest request of that kind

    # --- nodes (sync) --------------------------------------------------------------------
    def apply_node(self, name: str, registration) -> bool:
        """Registers (or re-registers) a node; False when nothing changed."""
        with self.lock:
            if self._registrations.get(name) == registration:
                return False
            self._registrations[name] = registration
            self.view.upsert_node(name, registration.devices, registration.cpu_milli,
                                  registration.memory_mib, registration.cordoned)
            return True

    def remove_node(self, name: str) -> bool:
        """Drops a node from placement (its pods' reservations stay); False if unknown."""
        with self.lock:
            if self._registrations.pop(name, None) is None:
                return False
            self.view.remove_node(name)
            return True

    def node_names(self) -> list:
        """The registered nodes."""
        with self.lock:
            return list(self._registrations)

    # --- pods (sync) ---------------------------------------------------------------------
    def apply_pod(self, key: str, rv: Optional[int], reservation: Optional[Reservation],
                  deleted: bool = False) -> None:
        """Applies what the API server says a pod holds (None: nothing)."""
        with self.lock:
            if deleted:
                self.view.release(key)
                self._pods.pop(key, None)
                return
            record = self._pods.setdefault(key, _PodRecord())
            if rv is not None and record.rv is not None and rv <= record.rv:
                return
            if record.pending:
                if record.held is None or _newer(rv, record.held[0]):
                    record.held = (rv, reservation)
                return
            record.rv = rv
            self._set(key, reservation)

    def _set(self, key: str, reservation: Optional[Reservation]) -> None:
        current = self.view.reservation(key)
        if current == reservation:
            return
        if current is not None:
            self.view.release(key)
        if reservation is not None:
            self.view.reserve(reservation)

    def reconcile_pods(self, listed: Iterable[str], list_rv: Optional[int]) -> int:
        """After a relist: forgets pods the list lacks (deleted while no watch ran), except
        those written since the list was taken. Returns how many were forgotten."""
        present = set(listed)
        gone = 0
        with self.lock:
            for key in [k for k in self._pods if k not in present]:
                record = self._pods[key]
                if record.pending or (record.rv is not None and list_rv is not None
                                      and record.rv > list_rv):
                    continue
                self.view.release(key)
                del self._pods[key]
                gone += 1
        return gone

    # --- filter --------------------------------------------------------------------------
    def decide(self, request, nodes: Optional[Iterable[str]]) -> Placement:
        """Releases the pod's earlier reservation, places it, reserves the result at once, and
        marks the pod pending until `confirm` or `rollback`."""
        with self.lock:
            previous = self.view.release(request.key)
            model = self._model_version()
            try:
                decision = self.engine.place(self.view, request, nodes)
            except Exception:
                if previous is not None:
                    self.view.reserve(previous)
                raise
            if self._model_version() != model:
                self._rescore_recent(request.signature)
            self._recent.pop(request.signature, None)
            self._recent[request.signature] = request
            if len(self._recent) > _RECENT:
                self._recent.pop(next(iter(self._recent)))
            if decision.ok:
                self.view.reserve(Reservation.of(request, decision))
            token = next(self._tokens)
            self._pods.setdefault(request.key, _PodRecord()).pending = token
            return Placement(decision, previous, token)

    def confirm(self, key: str, token: int, rv: Optional[int]) -> None:
        """The filter's write landed at version rv: the reservation stands."""
        with self.lock:
            record = self._pods.get(key)
            if record is None or record.pending != token:
                return
            record.pending = 0
            if rv is not None:
                record.rv = max(rv, record.rv or 0)
            held, record.held = record.held, None
            if held is not None and held[0] is not None and \
                    (record.rv is None or held[0] > record.rv):
                record.rv = held[0]
                self._set(key, held[1])

    def rollback(self, key: str, placement: Placement) -> None:
        """The filter's write failed: back to the reservation the pod held before."""
        with self.lock:
            record = self._pods.get(key)
            if record is None or record.pending != placement.token:
                return            # deleted meanwhile: nothing to restore
            record.pending = 0
            held, record.held = record.held, None
            if held is not None:
                record.rv = held[0] if held[0] is not None else record.rv
                self._set(key, held[1])
            else:
                self._set(key, placement.previous)

    def _model_version(self):
        return self.engine.registry.learner.version

    def _rescore_recent(self, current) -> None:
        """The learned workload was just re-estimated, which invalidates every cached score:
        re-score the recent kinds of pods now, in one go, rather than one slow filter per kind
        afterwards (the rescorer does not learn, so nothing is counted twice)."""
        if self.rescorer is None:
            return
        start = time.perf_counter()
        for signature, request in list(self._recent.items()):
            if signature == current:
                continue
            try:
                self.rescorer.place(self.view, request)
            except PlacementError as e:
                log.debug("re-scoring %s: %s", request.key, e)
                self._recent.pop(signature, None)
        log.info("workload model re-estimated: %d kinds of pods re-scored in %.0f ms",
                 len(self._recent), (time.perf_counter() - start) * 1000)

    # --- reading -------------------------------------------------------------------------
    def reservation(self, key: str) -> Optional[Reservation]:
        """The pod's reservation, if any."""
        with self.lock:
            return self.view.reservation(key)

    def overcommitted(self) -> list:
        """Devices whose reservations exceed their capacity (should always be empty)."""
        with self.lock:
            return self.view.overcommitted()
