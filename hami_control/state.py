"""SchedulerState: the placement view and engine behind one lock, shared by the cluster sync
(which applies what the API server says) and the extender (which places and reserves).

The pods' annotations are the truth: the view holds what they say, plus the reservations the
extender made and is writing. While a filter writes a pod's annotations, the pod is `pending`:
watch events for it (possibly older than the write) are held back until the write succeeds
(`confirm`, with the version it produced: only a newer event still applies) or fails
(`rollback`: the newest event held back is the truth, e.g. a write that landed although its
answer was lost; without one, the reservation from before). Events older than the last version
applied to a pod are ignored, so a late event never undoes a newer decision.

With `resources` the view also holds the nodes' CPU and memory and every bound pod's requests;
the engine then scores with them (fragaware sees GPUs that CPU or memory would strand) and
checks them a second time (kube-scheduler has checked them before the filter).
"""
import dataclasses
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from hami_control.claims.book import ClaimBook
from hami_control.placement import ClusterView, Engine, PlacementConfig, Reservation
from hami_control.placement.quota import effective_limits, node_summary, place_within_quota
from hami_control.preemption.state import Preemptions


def make_state(node_policy: str = "fragaware", gpu_policy: str = "fragaware",
               resources: bool = True, linger_s: float = 30.0) -> "SchedulerState":
    """The server's state: one engine that explains refusals. PlacementError for an unknown
    policy name."""
    return SchedulerState(Engine(PlacementConfig(
        node_policy=node_policy, gpu_policy=gpu_policy, resource_fit=resources)),
        linger_s=linger_s)


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
                 clock: Callable[[], float] = time.monotonic, linger_s: float = 30.0):
        self.engine = engine
        self.view = view or ClusterView()
        self.lock = threading.RLock()
        self._pods: dict = {}
        self._registrations: dict = {}    # node name -> NodeRegistration applied
        self._tokens = itertools.count(1)
        self._quotas: dict = {}           # namespace -> {quota name: QuotaSpec}
        self._limits: dict = {}           # namespace -> effective limits (key -> value)
        self.preemption = Preemptions(self, clock, linger_s)
        self.claims = ClaimBook(self.view, self.lock)     # DRA claims against quotas

    @property
    def resources(self) -> bool:
        """Whether the view holds CPU and memory (requests are placed with theirs)."""
        return self.engine.config.resource_fit

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

    def unknown_nodes(self, names) -> list:
        """Those of the names that register no GPUs."""
        with self.lock:
            return list(self.view.candidates(names)[1])

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
                self.preemption.release(key)
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
            if reservation is None:
                self.preemption.release(key)     # a victim's slices stay held
            else:
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
                self.preemption.release(key)
                del self._pods[key]
                gone += 1
        return gone

    # --- quotas (sync) -------------------------------------------------------------------
    def apply_quota(self, namespace: str, name: str, spec) -> None:
        """Applies a ResourceQuota's HAMi limits (spec None: it sets none, or it was deleted)."""
        with self.lock:
            specs = self._quotas.setdefault(namespace, {})
            if spec is None:
                specs.pop(name, None)
            else:
                specs[name] = spec
            self._limits[namespace] = effective_limits(specs.values())
            if not specs:
                del self._quotas[namespace]
                del self._limits[namespace]

    def reconcile_quotas(self, listed) -> int:
        """After a relist: forgets the quotas the list lacks; returns how many."""
        present = set(listed)
        with self.lock:
            gone = [(ns, name) for ns, specs in self._quotas.items() for name in specs
                    if (ns, name) not in present]
        for namespace, name in gone:
            self.apply_quota(namespace, name, None)
        return len(gone)

    def quota_usage(self) -> list:
        """(QuotaSpec, Amount its namespace holds) for every quota with HAMi limits."""
        with self.lock:
            return [(spec, self.view.namespace_used(ns)) for ns, specs in self._quotas.items()
                    for spec in specs.values()]

    def node_summaries(self) -> dict:
        """node name -> its allocation summary line (quota.node_summary)."""
        with self.lock:
            return {node.name: node_summary(node) for node in self.view.nodes}

    def namespace_quotas(self) -> list:
        """(namespace, effective limits, Amount it holds) for every namespace with a quota."""
        with self.lock:
            return [(ns, dict(limits), self.view.namespace_used(ns))
                    for ns, limits in self._limits.items()]

    # --- filter --------------------------------------------------------------------------
    def decide(self, request, nodes: Optional[Iterable[str]]) -> Placement:
        """Releases the pod's earlier reservation (and the slices preemption holds for it),
        places it within its namespace's quota (on its hold's node first), reserves the result
        at once (so that it counts against the quota for the next pod), and marks the pod
        pending until `confirm` or `rollback`."""
        with self.lock:
            self.preemption.expire()         # holds matter to filters only: end stale ones here
            previous = self.view.release(request.key)
            held = self.preemption.take(request.key)
            try:
                decision = self._place(request, nodes)
            except Exception:
                if previous is not None:
                    self.view.reserve(previous)
                self.preemption.restore(held)
                raise
            if decision.ok:
                self.view.reserve(Reservation.of(request, decision))
                self.preemption.placed(request.key, decision.node)
            else:
                self.preemption.restore(held)
            token = next(self._tokens)
            self._pods.setdefault(request.key, _PodRecord()).pending = token
            return Placement(decision, previous, token)

    def _place(self, request, nodes):
        limits = self._limits.get(request.namespace)
        hold = self.preemption.hold_of(request.key)
        if hold is not None and (nodes is None or hold.node in nodes):
            decision = place_within_quota(self.engine, self.view, request, [hold.node], limits)
            if decision.ok:
                return decision
        return place_within_quota(self.engine, self.view, request, nodes, limits)

    def namespace_limits(self, namespace: str) -> dict:
        """The namespace's effective GPU quota limits (empty: none)."""
        with self.lock:
            return dict(self._limits.get(namespace) or {})

    def fit_all(self, workloads) -> list:
        """For each kueue.fit.WorkloadPods in turn: (the index of its first pod that fits
        nowhere, -1 if all fit; why). The pods of a workload that fits stay reserved while the
        next workloads are tried (two workloads never count on the same room); everything is
        released before returning."""
        taken, out = [], []
        with self.lock:
            try:
                for workload in workloads:
                    mine, failed_at, why = [], -1, ""
                    for i, (_, request) in enumerate(workload.pods):
                        if not request.wants_gpu:
                            continue
                        probe = dataclasses.replace(request, name=f"{request.name}.kueue-check")
                        decision = place_within_quota(self.engine, self.view, probe, None,
                                                      self._limits.get(probe.namespace))
                        if not decision.ok:
                            failed_at, why = i, decision.message
                            break
                        self.view.reserve(Reservation.of(probe, decision))
                        mine.append(probe.key)
                    for key in (mine if failed_at >= 0 else ()):
                        self.view.release(key)
                    taken += mine if failed_at < 0 else []
                    out.append((failed_at, why))
            finally:
                for key in taken:
                    self.view.release(key)
        return out

    # --- preemption ----------------------------------------------------------------------
    def note_pod(self, key: str, pod: dict, deleted: bool) -> None:
        """A pod event for preemption's bookkeeping (priorities, holds); before apply_pod."""
        with self.lock:
            self.preemption.note_pod(key, pod, deleted)

    def apply_budget(self, namespace: str, name: str, spec) -> None:
        """A PodDisruptionBudget (None: deleted)."""
        with self.lock:
            self.preemption.apply_budget(namespace, name, spec)

    def reconcile_budgets(self, listed) -> None:
        """After a relist: forgets the budgets the list lacks."""
        present = set(listed)
        with self.lock:
            for ns_name in [k for k in self.preemption.budgets if k not in present]:
                self.preemption.apply_budget(*ns_name, None)

    def preempt_answer(self, request, priority: int, offered_uids: dict) -> dict:
        """The preempt verb: node -> NodePlan for kube-scheduler's offer (node -> its victims'
        UIDs; UIDs the view does not know stay as `uid:<UID>`)."""
        with self.lock:
            by_uid = self.preemption.by_uid
            offered = {node: [by_uid.get(uid, f"uid:{uid}") for uid in uids]
                       for node, uids in offered_uids.items()}
            return self.preemption.answer(request, priority, offered)

    def hold_of(self, key: str):
        """A copy of the pod's hold (None: none)."""
        with self.lock:
            hold = self.preemption.hold_of(key)
            return None if hold is None else dataclasses.replace(hold, gone=set(hold.gone))

    def expire_holds(self) -> None:
        """Ends holds that nobody came for."""
        with self.lock:
            self.preemption.expire()

    def preemption_snapshot(self) -> dict:
        """Holds, nominated pods and recent preemption decisions."""
        with self.lock:
            return self.preemption.snapshot()

    def preempt(self, request, priority: int, nodes) -> tuple:
        """For a pod that fits nowhere: (the plan carried out, or None; node -> why not). A
        plan found is recorded as the pod's hold at once."""
        with self.lock:
            if self.preemption.hold_of(request.key) is not None:
                return None, {}
            plan, why = self.preemption.plan(request, priority, nodes)
            if plan is not None:
                self.preemption.start(request, plan)
            return plan, why

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

    # --- reading -------------------------------------------------------------------------
    def reservation(self, key: str) -> Optional[Reservation]:
        """The pod's reservation, if any."""
        with self.lock:
            return self.view.reservation(key)

    def unhealthy(self, node: str, uuids: Iterable[str]) -> list:
        """Those of the GPUs that the node's registration, as last watched, marks unhealthy
        (or no longer lists)."""
        with self.lock:
            registration = self._registrations.get(node)
            healthy = {d.id for d in registration.devices if d.health} if registration else set()
        return sorted(set(uuids) - healthy)

    def overcommitted(self) -> list:
        """Devices whose reservations exceed their capacity (should always be empty)."""
        with self.lock:
            return self.view.overcommitted()
