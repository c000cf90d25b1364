"""Allocate and GetPreferredAllocation against the cluster: find the pod kubelet is starting,
answer for its containers, and record the outcome in its annotations.

kubelet does not say which pod an Allocate is for, so the pod is found as HAMi does: the owner
of the node lock (`hami.io/mutex.lock`) first, else the pods bound to this node with
`hami.io/bind-phase: allocating` and entries left in `hami.io/vgpu-devices-to-allocate`, oldest
`hami.io/bind-time` first, preferring one whose next entries match kubelet's device counts.
When none matches while a pod on the node asks for GPUs without a decision (bound by another
scheduler: the webhook was bypassed), the Allocate fails and no pod is touched, since it may be
that pod's and must never take another pod's entries.

Success: the entries are emptied, `bind-phase: success` once no entry is left, then the node
lock is released; all pod changes in one patch guarded by the pod's resourceVersion (a
concurrent change makes it start over). Failure: nothing of the answer is kept (shared
directories removed, no entry consumed), `bind-phase: failed`, the lock released, a Warning
event on the pod, and a gRPC error whose message says what to fix.
"""
import os
import threading
import time
from typing import Callable, Optional, Sequence

from hami_common import constants as C
from hami_common import node_lock
from hami_common.errors import HamiFormatError
from hami_node.plugin import layout as L
from hami_node.plugin.allocate import (ContainerAnswer, Limits, consumed, decode_entries,
                                       next_positions, plan_container, pod_containers,
                                       preferred_devices)
from hami_node.plugin.cluster import CONFLICT, ClusterApi
from hami_node.plugin.devices import DeviceTable
from hami_node.plugin.errors import AllocationError, ClusterError
from hami_node.plugin.mig import MigManager, pod_allocations
from hami_common.mig import encode_allocations

MAX_ATTEMPTS = 5
# Real kubelet fails a pod for good when Allocate fails (UnexpectedAdmissionError), so a short
# API hiccup is retried inside the call, for up to RETRY_BUDGET_S: any failed read while the pod
# is looked up (nothing has changed yet), and a write that failed with a "try again" status.
TRANSIENT = frozenset({0, 429, 500, 502, 503, 504})
RETRY_BUDGET_S = 10.0
RETRY_FIRST_S = 0.2
FAILS_POD = ("kubelet fails the pod for good (UnexpectedAdmissionError): its controller "
             "creates a new one; a bare pod must be created again")
# A lock whose owner already finished is only removed once it is this old: the scheduler may
# have just taken it for a pod that carries an earlier attempt's bind-phase.
STALE_LOCK_GRACE_S = 10.0


class _Conflict(Exception):
    """The pod changed between our read and our write: start over."""


class _Transient(Exception):
    """The API server said "try again" (nothing of the answer was kept); `pod` is the pod
    being started when it was known."""

    def __init__(self, error: ClusterError, pod: Optional[dict] = None):
        super().__init__(str(error))
        self.error, self.pod = error, pod


def _meta(pod: dict) -> dict:
    return pod.get("metadata") or {}


def _ann(obj: dict) -> dict:
    return _meta(obj).get("annotations") or {}


def pod_key(pod: dict) -> str:
    """namespace/name."""
    return f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"


def _undecided(pod: dict) -> bool:
    """An unfinished pod that asks for our resources but carries no scheduler decision."""
    if (pod.get("status") or {}).get("phase") in C.POD_FINISHED_PHASES or \
            _meta(pod).get("deletionTimestamp") or C.ANNO_DEVICES_TO_ALLOCATE in _ann(pod):
        return False
    spec = pod.get("spec") or {}
    return any(key in ((ctr.get("resources") or {}).get("limits") or {})
               for ctr in (spec.get("containers") or []) + (spec.get("initContainers") or [])
               for key in C.GPU_RESOURCES)


def _bind_order(pod: dict) -> tuple:
    try:
        bind_time = int(_ann(pod).get(C.ANNO_BIND_TIME, ""))
    except ValueError:
        bind_time = 1 << 62   # unknown bind time: after every known one
    return bind_time, _meta(pod).get("creationTimestamp", ""), pod_key(pod)


class Allocator:
    """Allocate / GetPreferredAllocation for one node. Thread-safe (Allocates are serial)."""

    def __init__(self, cluster: ClusterApi, table: DeviceTable, node_name: str, limits: Limits,
                 layout: L.HostLayout, *, clock: Callable[[], float] = time.time,
                 log: Callable[[str], None] = print,
                 observe: Optional[Callable[[str, float], None]] = None,
                 device_present: Callable[[str], bool] = os.path.exists,
                 retry_budget_s: float = RETRY_BUDGET_S,
                 sleep: Callable[[float], None] = time.sleep,
                 mig: Optional[MigManager] = None):
        self.cluster, self.table, self.node = cluster, table, node_name
        self.device_present = device_present
        self.retry_budget_s, self.sleep = retry_budget_s, sleep
        self.limits, self.layout = limits, layout
        self.clock, self.log = clock, log
        self.observe = observe or (lambda result, seconds: None)
        self._lock = threading.Lock()
        self.mig = mig
        self._realized = []     # this attempt's MIG instances (Realized), recorded at commit

    # Finding the pod ---------------------------------------------------------------------

    def _waiting(self, pod: Optional[dict]) -> bool:
        """Bound here, allocating, entries left: a pod kubelet may be starting."""
        if not pod:
            return False
        ann = _ann(pod)
        if ann.get(C.ANNO_BIND_PHASE) != C.BIND_PHASE_ALLOCATING or \
                ann.get(C.ANNO_VGPU_NODE, self.node) != self.node:
            return False
        if (pod.get("spec") or {}).get("nodeName") != self.node or \
                (pod.get("status") or {}).get("phase") in C.POD_FINISHED_PHASES or \
                _meta(pod).get("deletionTimestamp"):
            return False
        try:
            return any(decode_entries(pod))
        except AllocationError:
            return True   # chosen, then failed with the decoding error's message

    def _fits(self, pod: dict, counts: Sequence[int]) -> bool:
        try:
            entries = decode_entries(pod)
        except AllocationError:
            return False
        positions = next_positions(entries, len(counts))
        return [len(entries[p]) for p in positions] == list(counts)

    def _lock_owner(self, node: dict) -> Optional[node_lock.NodeLock]:
        value = _ann(node).get(C.ANNO_NODE_LOCK)
        if not value:
            return None
        try:
            return node_lock.decode(value)
        except HamiFormatError as e:
            self.log(f"node lock {value!r} is malformed ({e}); ignoring it")
            return None

    def find_pod(self, counts: Sequence[int], node: Optional[dict] = None) -> dict:
        """The pod kubelet is starting a container of; AllocationError when there is none.
        `node`: the Node as just read (else it is read here)."""
        owner = self._lock_owner(node if node is not None else self.cluster.get_node(self.node))
        if owner and owner.pod:
            pod = self.cluster.get_pod(owner.namespace, owner.pod)
            if self._waiting(pod) and self._fits(pod, counts):
                return pod
        on_node = self.cluster.list_node_pods(self.node)
        pods = sorted((p for p in on_node if self._waiting(p)), key=_bind_order)
        if not pods:
            raise AllocationError(
                f"no pod on node {self.node} is waiting for GPUs: expected one bound here with "
                f"{C.ANNO_BIND_PHASE}={C.BIND_PHASE_ALLOCATING} and entries in "
                f"{C.ANNO_DEVICES_TO_ALLOCATE}; make sure the pod is scheduled by "
                f"{C.SCHEDULER_NAME} (schedulerName) and that hami-control's webhook saw it")
        fitting = next((p for p in pods if self._fits(p, counts)), None)
        if fitting is not None:
            return fitting
        undecided = [pod_key(p) for p in on_node if _undecided(p)]
        if undecided:
            # Never another pod's entries: the container kubelet starts may be one of these.
            raise AllocationError(
                f"kubelet asks for {list(counts)} GPU(s) per container; no pod waiting on node "
                f"{self.node} ({', '.join(pod_key(p) for p in pods)}) has that many left, and "
                f"{', '.join(undecided)} asks for GPUs without a decision from "
                f"{C.SCHEDULER_NAME} (bound by another scheduler: its webhook was bypassed). "
                "Such a pod gets no GPUs: delete it and create it again once the webhook works")
        return pods[0]      # the only candidates: fail it with what is wrong with its entries

    # Allocate ----------------------------------------------------------------------------

    def allocate(self, requests: Sequence[Sequence[str]]) -> list:
        """ContainerAnswer per container request (each a list of kubelet's device IDs)."""
        started = time.monotonic()
        with self._lock:
            try:
                answers = self._retrying(requests, started)
            except (AllocationError, ClusterError):
                self.observe("failure", time.monotonic() - started)
                raise
            self.observe("success", time.monotonic() - started)
            return answers

    def _retrying(self, requests: Sequence[Sequence[str]], started: float) -> list:
        """Attempts until one succeeds: at once after a conflict, with backoff while the API
        server says "try again" and the budget lasts."""
        conflicts, delay = 0, RETRY_FIRST_S
        while True:
            try:
                return self._attempt(requests)
            except _Conflict:
                conflicts += 1
                if conflicts >= MAX_ATTEMPTS:
                    raise AllocationError(f"the pod changed under every one of {MAX_ATTEMPTS} "
                                          f"attempts; {FAILS_POD}") from None
            except _Transient as t:
                if time.monotonic() - started + delay > self.retry_budget_s:
                    if t.pod is not None:
                        self._fail(t.pod, t.error)
                    raise AllocationError(
                        f"the API server kept failing for {self.retry_budget_s:g} s ({t.error}); "
                        f"{FAILS_POD}") from t.error
                self.log(f"Allocate: the API server failed ({t.error}); retrying in "
                         f"{delay:g} s")
                self.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _attempt(self, requests: Sequence[Sequence[str]]) -> list:
        try:
            node = self.cluster.get_node(self.node)
            pod = self.find_pod([len(r) for r in requests], node)
        except AllocationError as e:
            self.release_stale_lock()
            raise AllocationError(str(e)) from e
        except ClusterError as e:      # a read: harmless to repeat, whatever went wrong
            raise _Transient(ClusterError(f"cannot look up the pod being started (nothing "
                                          f"changed): {e}", e.status)) from e
        answers = []
        try:
            answers = self._plan(pod, requests)
            self._prepare(pod, answers)
            self._commit(pod, requests, node)
        except _Conflict:
            self._undo(pod, answers)
            raise
        except (AllocationError, ClusterError, OSError) as e:
            self._undo(pod, answers)
            if isinstance(e, ClusterError) and e.status in TRANSIENT:
                raise _Transient(e, pod) from e
            self._fail(pod, e)
            raise AllocationError(f"pod {pod_key(pod)}: {e}") from e
        for answer in answers:
            for warning in answer.warnings:
                self.log(f"pod {pod_key(pod)}: {warning}")
        self.log(f"pod {pod_key(pod)}: allocated "
                 f"{', '.join(a.envs['NVIDIA_VISIBLE_DEVICES'] for a in answers)} to "
                 f"{', '.join(a.container for a in answers)}")
        return answers

    def _plan(self, pod: dict, requests: Sequence[Sequence[str]]) -> list:
        missing = [p for p in (self.layout.lib, self.layout.preload) if not p.exists()]
        if missing:
            raise AllocationError(f"the shim is not installed on node {self.node} "
                                  f"({', '.join(map(str, missing))} missing): run "
                                  "`hami-node install-shim` there (the DaemonSet's init "
                                  "container and the systemd unit's ExecStartPre do)")
        entries = decode_entries(pod)
        positions = next_positions(entries, len(requests))
        if len(positions) < len(requests):
            raise AllocationError(f"kubelet asked for {len(requests)} container(s) but only "
                                  f"{len(positions)} have GPUs left to allocate in "
                                  f"{C.ANNO_DEVICES_TO_ALLOCATE}")
        specs = pod_containers(pod)
        uid = _meta(pod).get("uid", "")
        allocs = pod_allocations(pod) if self.mig is not None else []
        self._realized, answers = [], []
        for ids, p in zip(requests, positions):
            mine = [a for a in allocs if a.container_index == p]
            made = self.mig.realize(mine) if mine else []
            self._realized += made
            answers.append(plan_container(ids, entries[p], specs[p], uid, self.table,
                                          self.limits, self.layout, self.device_present,
                                          instances=made))
        return answers

    def _prepare(self, pod: dict, answers: Sequence[ContainerAnswer]) -> None:
        meta = _meta(pod)
        for answer in answers:
            L.prepare_container(self.layout, meta.get("uid", ""), answer.container, {
                "namespace": meta.get("namespace"), "pod": meta.get("name"),
                "uid": meta.get("uid"), "container": answer.container,
                "devices": [{"uuid": u, "memory_mib": m, "cores": c}
                            for u, m, c in answer.limits],
                "allocated_at": self.clock()})

    def _undo(self, pod: dict, answers: Sequence[ContainerAnswer]) -> None:
        for answer in answers:
            L.remove_container(self.layout, _meta(pod).get("uid", ""), answer.container)

    def _commit(self, pod: dict, requests: Sequence[Sequence[str]], node: dict) -> None:
        entries = decode_entries(pod)
        positions = next_positions(entries, len(requests))
        left = any(e for i, e in enumerate(entries) if i not in positions)
        annotations = {C.ANNO_DEVICES_TO_ALLOCATE: consumed(entries, positions)}
        if self._realized:       # the instances made, for the reconciler and for HAMi
            done = {(r.allocation.container_index, r.allocation.device_index): r.allocation
                    for r in self._realized}
            annotations[C.ANNO_MIG_ALLOCATIONS] = encode_allocations(
                [done.get((a.container_index, a.device_index), a) for a in pod_allocations(pod)])
        if not left:
            annotations[C.ANNO_BIND_PHASE] = C.BIND_PHASE_SUCCESS
        meta = _meta(pod)
        try:
            self.cluster.patch_pod_annotations(meta["namespace"], meta["name"], annotations,
                                               meta.get("resourceVersion"))
        except ClusterError as e:
            if e.status == CONFLICT:
                raise _Conflict() from e
            raise ClusterError(f"recording the allocation failed: {e}", e.status) from e
        if self._realized:
            self.mig.recorded(self._realized)
        if not left:
            self.release_lock(pod, node)

    def _fail(self, pod: dict, error: Exception) -> None:
        meta = _meta(pod)
        self.log(f"pod {pod_key(pod)}: allocation failed: {error}")
        try:
            self.cluster.patch_pod_annotations(meta["namespace"], meta["name"],
                                               {C.ANNO_BIND_PHASE: C.BIND_PHASE_FAILED})
        except ClusterError as e:
            self.log(f"pod {pod_key(pod)}: cannot set {C.ANNO_BIND_PHASE}=failed: {e}")
        self.release_lock(pod)
        try:
            self.cluster.create_event(dict(pod, kind="Pod"), "GPUAllocationFailed",
                                      f"hami-node on {self.node}: {error}")
        except ClusterError as e:
            self.log(f"pod {pod_key(pod)}: cannot record an event: {e}")

    # The node lock -----------------------------------------------------------------------

    def _remove_lock_if(self, wanted: Callable[[node_lock.NodeLock], bool],
                        node: Optional[dict] = None) -> bool:
        """Removes the node lock when wanted(lock); guarded by the node's resourceVersion.
        `node`: a recent read to try first (saves a request; a 409 makes it read again)."""
        for _ in range(3):
            try:
                node = node if node is not None else self.cluster.get_node(self.node)
                lock = self._lock_owner(node)
                if lock is None or not wanted(lock):
                    return False
                self.cluster.patch_node_annotations(self.node, {C.ANNO_NODE_LOCK: None},
                                                    _meta(node).get("resourceVersion"))
                return True
            except ClusterError as e:
                if e.status != CONFLICT:
                    self.log(f"cannot release the node lock ({e}); the periodic check retries")
                    return False
                node = None
        return False

    def release_lock(self, pod: dict, node: Optional[dict] = None) -> bool:
        """Releases the node lock if this pod holds it."""
        meta = _meta(pod)
        return self._remove_lock_if(lambda lock: (lock.namespace, lock.pod) ==
                                    (meta.get("namespace"), meta.get("name")), node)

    def release_stale_lock(self) -> bool:
        """Releases a lock whose owner is gone, has finished, or has finished allocating (kept
        otherwise)."""
        def stale(lock: node_lock.NodeLock) -> bool:
            if not lock.pod:
                return False   # an old-format lock: left to expire
            owner = self.cluster.get_pod(lock.namespace, lock.pod)
            if owner is None or (owner.get("status") or {}).get("phase") in \
                    C.POD_FINISHED_PHASES:
                return True     # gone, or failed by kubelet (say while we could not release)
            old = self.clock() - lock.time.timestamp() > STALE_LOCK_GRACE_S
            return old and _ann(owner).get(C.ANNO_BIND_PHASE) in (C.BIND_PHASE_SUCCESS,
                                                                  C.BIND_PHASE_FAILED)
        released = self._remove_lock_if(stale)
        if released:
            self.log("released a stale node lock (its pod is gone, finished, or allocated)")
        return released

    # GetPreferredAllocation --------------------------------------------------------------

    def preferred(self, requests: Sequence[tuple]) -> list:
        """For (available, must_include, size) per container: the IDs kubelet should pick."""
        uuids = [[] for _ in requests]
        try:
            pod = self.find_pod([size for _, _, size in requests])
            entries = decode_entries(pod)
            for i, p in enumerate(next_positions(entries, len(requests))):
                uuids[i] = [d.uuid for d in entries[p]]
        except (AllocationError, ClusterError) as e:
            self.log(f"GetPreferredAllocation without a pod to steer by: {e}")
        return [preferred_devices(available, must, size, wanted)
                for (available, must, size), wanted in zip(requests, uuids)]
