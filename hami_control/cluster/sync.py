"""ClusterSync: keeps the SchedulerState current from the API server by list + watch.

One thread per kind (nodes, pods, resourcequotas unless quotas are off, the DRA driver's
resourceclaims unless claims are off, its resourceslices when the DRA nodes are modelled for
the extender's prioritize): list, apply,
watch from the list's version; a watch that ends or breaks is resumed from the last version
seen, a 410 (version too old) or a resync period leads to a fresh list, reconciled with what
the state holds. One more thread applies the handshake rule as time passes and, on the leader,
writes the handshake requests.
"""
import logging
import threading
from dataclasses import dataclass
from typing import Callable, Optional

from hami_common.constants import (ANNO_NODE_GPU_SUMMARY, ANNO_NODE_HANDSHAKE, ANNO_NODE_LOCK,
                                   DRA_DRIVER, POD_FINISHED_PHASES, SCHEDULER_NAME)
from hami_common.errors import HamiFormatError
from hami_control.clock import Clock, SystemClock
from hami_control.cluster import handshake
from hami_control.cluster.api import ApiError, Expired, NotFound
from hami_control.cluster.objects import (annotations, pod_key, registration_source,
                                          resource_version, scheduler_name)
from hami_control.placement.annotations import node_registration, pod_reservation
from hami_control.placement.claims import parse_claim
from hami_control.placement.pdb import parse_pdb
from hami_control.placement.quota import parse_quota

log = logging.getLogger(__name__)
KINDS = ("nodes", "pods")
QUOTAS = "resourcequotas"
BUDGETS = "poddisruptionbudgets"
CLAIMS = "resourceclaims"
SLICES = "resourceslices"
# Kinds a cluster may not serve (resource.k8s.io/v1 is 1.34+) or RBAC may not grant: without
# them hami-control works on, counting less, and says so.
OPTIONAL = {CLAIMS: "DRA claims are not counted against namespace GPU quotas",
            SLICES: "DRA claim pods get no node scores (prioritize answers 0)"}
# The pods kube-scheduler's own informer watches: "status.phase!=Succeeded,status.phase!=Failed".
UNFINISHED = ",".join(f"status.phase!={phase}" for phase in POD_FINISHED_PHASES)


@dataclass(frozen=True)
class PodScope:
    """Which pods the view counts, and what of each.

    `resources` (the default): every unfinished pod is watched, whatever its scheduler (the
    selector kube-scheduler's own pod informer uses), and holds its CPU and memory on its node
    once bound; pods of `scheduler` also hold their GPU decision. Without it only the pods of
    `scheduler` are watched (fewer events; the view is GPUs only). `all_pods`: every pod's GPU
    decision counts (another scheduler name places HAMi GPU pods in the cluster)."""

    scheduler: str = SCHEDULER_NAME
    resources: bool = True
    all_pods: bool = False

    @property
    def selector(self) -> str:
        """The pod watch's field selector."""
        if self.resources:
            return UNFINISHED
        return "" if self.all_pods else f"spec.schedulerName={self.scheduler}"

    def decisions(self, pod: dict) -> bool:
        """Whether the pod's GPU decision counts."""
        return self.all_pods or scheduler_name(pod) == self.scheduler


@dataclass(frozen=True)
class NodeInfo:
    """The latest state of a node as the watch delivered it."""

    registration: object          # placement.annotations.NodeRegistration, or None
    source: tuple                 # the annotation values it was read from
    health: handshake.NodeHealth
    resource_version: str
    lock: Optional[str]
    summary: Optional[str] = None   # hami.io/node-gpu-allocated as last written


class ClusterSync:
    """List + watch of nodes and pods into a SchedulerState."""

    def __init__(self, source, state, clock: Clock = SystemClock(), resync_s: float = 300.0,
                 handshake_interval_s: float = 30.0, writer=None,
                 is_leader: Callable[[], bool] = lambda: True, backoff_s: float = 1.0,
                 pods: PodScope = PodScope(), quotas: bool = True, budgets: bool = False,
                 on_pod: Callable[[dict, bool], None] = lambda pod, deleted: None,
                 claims: bool = False,
                 whole_mib: Callable[[str, str], int] = lambda pool, device: 0,
                 dra_nodes=None):
        self.source, self.state, self.clock = source, state, clock
        self.resync_s, self.backoff_s = resync_s, backoff_s
        self.pods, self.on_pod = pods, on_pod
        self.kinds = KINDS + ((QUOTAS,) if quotas else ()) + ((BUDGETS,) if budgets else ()) \
            + ((CLAIMS,) if claims else ()) + ((SLICES,) if dra_nodes is not None else ())
        self.selectors = {"nodes": "", "pods": pods.selector, QUOTAS: "", BUDGETS: "",
                          CLAIMS: "", SLICES: f"spec.driver={DRA_DRIVER}"}
        self.dra_nodes = dra_nodes        # claims/nodes.DraNodes: fed nodes, pods, claims
        self.whole_mib = whole_mib
        self.handshake_interval_s, self.writer, self.is_leader = \
            handshake_interval_s, writer, is_leader
        self._nodes: dict = {}
        # A Condition: binds waiting for a node lock's release wake on each node change.
        self._nodes_lock = threading.Condition()
        self._bad_registrations: dict = {}
        self._synced = {kind: threading.Event() for kind in self.kinds}
        self._stop = threading.Event()
        self._threads: list = []

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> "ClusterSync":
        """Starts the sync threads."""
        targets = [(self._run, (kind,), f"sync-{kind}") for kind in self.kinds]
        targets.append((self._health_loop, (), "sync-handshake"))
        for target, args, name in targets:
            thread = threading.Thread(target=target, args=args, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stops the threads (ending their watches)."""
        self._stop.set()
        self.source.close_watches()
        for thread in self._threads:
            thread.join(timeout=5)

    @property
    def synced(self) -> bool:
        """Whether nodes, pods (and quotas) have all been listed once: until then a filter
        could pass a pod over its namespace's quota."""
        return all(event.is_set() for event in self._synced.values())

    @property
    def healthy(self) -> bool:
        """Whether every sync thread still runs (a dead one is a bug: restart the process)."""
        return all(t.is_alive() for t in self._threads) or self._stop.is_set()

    def node_info(self, name: str) -> Optional[NodeInfo]:
        """The node as last seen, or None."""
        with self._nodes_lock:
            return self._nodes.get(name)

    def wait_node_change(self, timeout: float) -> None:
        """Returns when a node has changed, or after timeout (a notification may slip
        between a caller's look at node_info and this wait: keep timeout short)."""
        with self._nodes_lock:
            self._nodes_lock.wait(timeout)

    # --- list + watch --------------------------------------------------------------------
    def _run(self, kind: str) -> None:
        rv = None
        next_list = 0.0
        while not self._stop.is_set():
            try:
                if rv is None or self.clock.monotonic() >= next_list:
                    rv = self._relist(kind)
                    next_list = self.clock.monotonic() + self.resync_s
                timeout = max(1.0, next_list - self.clock.monotonic())
                for etype, obj in self.source.watch(kind, rv, timeout, self.selectors[kind]):
                    if self._stop.is_set():
                        return
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if etype != "BOOKMARK":
                        self._apply(kind, etype, obj)
            except Expired:
                log.info("watch %s: version %s expired; listing again", kind, rv)
                rv = None
            except ApiError as e:
                if kind in OPTIONAL and (isinstance(e, NotFound) or e.status == 403):
                    self._missing(kind, e)
                    rv = None
                    continue
                log.warning("sync %s: %s; retrying in %.1f s", kind, e, self.backoff_s)
                self._stop.wait(self.backoff_s)

    def _missing(self, kind: str, e: ApiError) -> None:
        """An optional kind the API server does not serve us: synced as empty, asked again
        after a resync period."""
        log.warning("cannot list %s (%s): %s; hami-control carries on without (grant list and "
                    "watch of %s to its ServiceAccount, as deploy/ does, on Kubernetes 1.34+); "
                    "asking again in %.0f s", kind, e, OPTIONAL[kind], kind, self.resync_s)
        self._synced[kind].set()
        self._stop.wait(self.resync_s)

    def _relist(self, kind: str) -> str:
        items, rv = self.source.list(kind, self.selectors[kind])
        for obj in items:
            self._apply(kind, "ADDED", obj)
        if kind == "pods":
            gone = self.state.reconcile_pods((pod_key(o) for o in items), _int(rv))
            if gone:
                log.info("relist: %d pods were deleted while unwatched; released", gone)
        elif kind == QUOTAS:
            self.state.reconcile_quotas(_namespaced_id(o) for o in items)
        elif kind == BUDGETS:
            self.state.reconcile_budgets(_namespaced_id(o) for o in items)
        elif kind == CLAIMS:
            keys = ["/".join(_namespaced_id(o)) for o in items]
            self.state.claims.reconcile_claims(keys)
            if self.dra_nodes is not None:
                self.dra_nodes.reconcile_claims(keys)
        elif kind == SLICES:
            self.dra_nodes.reconcile_slices((o.get("metadata") or {}).get("name")
                                            for o in items)
        else:
            self._reconcile_nodes({(o.get("metadata") or {}).get("name") for o in items})
        self._synced[kind].set()
        log.debug("listed %d %s at version %s", len(items), kind, rv)
        return rv

    def _apply(self, kind: str, etype: str, obj: dict) -> None:
        if kind == "pods":
            self._apply_pod(obj, deleted=etype == "DELETED")
        elif kind == QUOTAS:
            self._apply_quota(obj, deleted=etype == "DELETED")
        elif kind == BUDGETS:
            self.state.apply_budget(*_namespaced_id(obj), None if etype == "DELETED" else
                                    parse_pdb(obj))
        elif kind == CLAIMS:
            self._apply_claim(obj, deleted=etype == "DELETED")
        elif kind == SLICES:
            self.dra_nodes.apply_slice(obj, deleted=etype == "DELETED")
        else:
            self._apply_node(obj, deleted=etype == "DELETED")

    # --- pods ----------------------------------------------------------------------------
    def _apply_pod(self, pod: dict, deleted: bool) -> None:
        key = pod_key(pod)
        self.state.note_pod(key, pod, deleted)
        reservation = None
        if not deleted:
            try:
                reservation = pod_reservation(pod, self.pods.resources,
                                              self.pods.decisions(pod))
            except HamiFormatError as e:
                log.warning("pod %s: unreadable GPU annotations or resources, counted as holding "
                            "nothing: %s",
                            key, e)
        self.state.apply_pod(key, resource_version(pod), reservation, deleted)
        if self.dra_nodes is not None:
            self.dra_nodes.apply_pod(pod, deleted)
        self.on_pod(pod, deleted)

    # --- quotas --------------------------------------------------------------------------
    def _apply_quota(self, obj: dict, deleted: bool) -> None:
        namespace, name = _namespaced_id(obj)
        try:
            spec = None if deleted else parse_quota(obj)
        except HamiFormatError as e:
            log.warning("%s; its earlier limits (if any) stay until it is fixed", e)
            return
        self.state.apply_quota(namespace, name, spec)

    # --- DRA claims ----------------------------------------------------------------------
    def _apply_claim(self, obj: dict, deleted: bool) -> None:
        key = "/".join(_namespaced_id(obj))
        try:
            use = None if deleted else parse_claim(obj, self.whole_mib)
        except HamiFormatError as e:
            log.warning("%s; the claim is counted as holding nothing", e)
            use = None
        self.state.claims.apply_claim(key, use)
        if self.dra_nodes is not None:
            self.dra_nodes.apply_claim(key, use)

    # --- nodes ---------------------------------------------------------------------------
    def _registration(self, name: str, node: dict, source: tuple):
        # Most node events (lock, handshake, status) leave the registration as it was: reuse it.
        known = self.node_info(name)
        if known is not None and known.source == source:
            return known.registration
        try:
            registration = node_registration(node, self.pods.resources)
        except HamiFormatError as e:
            if self._bad_registrations.get(name) != source:
                self._bad_registrations[name] = source
                log.warning("node %s: its GPU registration is unreadable, so it gets no GPU "
                            "pods until its agent publishes a valid one: %s", name, e)
            return None
        self._bad_registrations.pop(name, None)
        return registration

    def _apply_node(self, node: dict, deleted: bool) -> None:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return
        if self.dra_nodes is not None:
            self.dra_nodes.apply_node(node, deleted)
        if deleted:
            with self._nodes_lock:
                self._nodes.pop(name, None)
            self.state.remove_node(name)
            return
        source = registration_source(node)
        info = NodeInfo(self._registration(name, node, source), source,
                        handshake.NodeHealth.of(node),
                        str(meta.get("resourceVersion") or ""),
                        annotations(node).get(ANNO_NODE_LOCK),
                        annotations(node).get(ANNO_NODE_GPU_SUMMARY))
        with self._nodes_lock:
            self._nodes[name] = info
            self._nodes_lock.notify_all()
        self._evaluate(name, info)

    def _evaluate(self, name: str, info: NodeInfo) -> None:
        if info.registration is None:
            if self.state.remove_node(name):
                log.info("node %s publishes no GPUs any more; removed from placement", name)
        elif info.health.gone(self.clock.now()):
            if self.state.remove_node(name):
                log.warning("node %s: its agent left the handshake unanswered for 60 s and "
                            "kubelet offers no GPU; removed from placement until it reports",
                            name)
        elif self.state.apply_node(name, info.registration):
            log.debug("node %s registered %d GPUs", name, len(info.registration.devices))

    def _reconcile_nodes(self, present: set) -> None:
        with self._nodes_lock:
            missing = [n for n in self._nodes if n not in present]
            for name in missing:
                del self._nodes[name]
        for name in set(missing) | (set(self.state.node_names()) - present):
            self.state.remove_node(name)

    # --- handshake -----------------------------------------------------------------------
    def _health_loop(self) -> None:
        period = min(10.0, self.handshake_interval_s or 10.0)
        last_request = None
        while not self._stop.wait(period):
            with self._nodes_lock:
                nodes = list(self._nodes.items())
            for name, info in nodes:
                self._evaluate(name, info)
            now = self.clock.monotonic()
            if self.handshake_interval_s and self.writer is not None and self.is_leader() and \
                    (last_request is None or now - last_request >= self.handshake_interval_s):
                last_request = now
                self._request_handshakes(nodes)

    def _request_handshakes(self, nodes) -> None:
        value = handshake.request_value(self.clock.now())
        for name, info in nodes:
            if info.registration is None or not info.health.needs_request():
                continue
            try:
                self.writer.patch_node_annotations(name, {ANNO_NODE_HANDSHAKE: value})
            except ApiError as e:
                log.warning("node %s: could not write %s: %s", name, ANNO_NODE_HANDSHAKE, e)


def _namespaced_id(obj: dict) -> tuple:
    """(namespace, name) of a namespaced object."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _int(value) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
