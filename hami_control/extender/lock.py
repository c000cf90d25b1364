"""`hami.io/mutex.lock`: the per-node bind lock, shared with HAMi's scheduler and node agents.

Taken at bind by a compare-and-swap on the node's resourceVersion (two binds never both win),
released by the node agent once it has allocated the pod's devices, or by the extender at once
when the bind fails. A lock older than its expiry, or whose owner pod no longer exists or has
finished (kubelet failed it at admission, say, while the node agent could not reach the API to
release the lock: it will never be allocated), is taken over; a lock without an owner (old HAMi)
only expires.

A bind that finds the node locked by another pod waits a little (`wait_s`) for the node agent
to release it, watching the node's cached copy, before it refuses: a refused bind sends the
pod into kube-scheduler's backoff (1 s, doubling to 10 s), and consecutive pods of a packing
policy tend to go to the same node, so refusing at once cost most of the throughput on the
real kube-scheduler (bench/k8s_throughput.py). At most `max_waiters` binds wait at a time (they
hold HTTP worker threads, which filters need too); beyond that a bind refuses at once.
"""
import logging
import threading
import time
from datetime import timedelta
from typing import Callable, Optional

from hami_common import node_lock
from hami_common.constants import ANNO_NODE_LOCK, POD_FINISHED_PHASES
from hami_common.errors import HamiFormatError
from hami_control.cluster.api import ApiError, Conflict, Invalid, NotFound
from hami_control.cluster.objects import annotations
from hami_control.errors import LockError

log = logging.getLogger(__name__)
_ATTEMPTS = 4
_POLL_S = 0.05          # a waiting bind looks at the node's cached copy at least this often
_POINTER = "/metadata/annotations/" + ANNO_NODE_LOCK.replace("~", "~0").replace("/", "~1")


class LockHeld(Exception):
    """The node is locked by another pod: the lock's value and the error that says so."""

    def __init__(self, value: str, error: LockError):
        super().__init__(str(error))
        self.value, self.error = value, error


class NodeLocker:
    """Takes and releases node locks for pods; `cached` gives the node as last watched."""

    def __init__(self, api, clock, expiry: timedelta = node_lock.LOCK_EXPIRY,
                 cached: Callable[[str], Optional[tuple]] = lambda name: None,
                 wait_s: float = 0.0, max_waiters: int = 8,
                 changed: Callable[[float], None] = time.sleep):
        self.api, self.clock, self.expiry, self.cached = api, clock, expiry, cached
        # changed(timeout) returns when a watched node changed (or after timeout).
        self.wait_s, self.changed = wait_s, changed
        self._waiters = threading.BoundedSemaphore(max(1, max_waiters))

    def acquire(self, node: str, namespace: str, pod: str) -> str:
        """Locks node for namespace/pod; returns the lock value. LockError says who holds it
        (after waiting up to wait_s for its release).

        A bind that may wait trusts the watched copy that the lock is held: it waits for the
        watch to show it released, and asks the API server (the node, and whether the holder
        still exists: two GETs) only before it refuses. Confirming first cost those two GETs
        for most binds of a burst, where consecutive pods go to the same node."""
        try:
            return self._acquire(node, namespace, pod, confirm=False)
        except LockHeld as e:
            held = e
        if self.wait_s <= 0 or not self._waiters.acquire(blocking=False):
            return self._confirmed(node, namespace, pod)
        try:
            deadline = time.monotonic() + self.wait_s
            while self._released(node, held.value, deadline):
                try:
                    return self._acquire(node, namespace, pod, confirm=False)
                except LockHeld as e:      # another bind took it first: wait for that one
                    held = e
            return self._confirmed(node, namespace, pod)
        finally:
            self._waiters.release()

    def _confirmed(self, node: str, namespace: str, pod: str) -> str:
        """The lock, if the API server says it can be taken after all; else LockError."""
        try:
            return self._acquire(node, namespace, pod, confirm=True)
        except LockHeld as e:
            raise e.error from None

    def _released(self, node: str, value: str, deadline: float) -> bool:
        """Waits until the watched copy of node no longer holds lock value (True), or the
        deadline (False). Without a watched copy, polls the API server."""
        while time.monotonic() < deadline:
            # Wait first: a lock just read from the API server may not be in the watched
            # copy yet, which would otherwise look released and cost a GET per turn.
            self.changed(min(_POLL_S, max(0.0, deadline - time.monotonic())))
            known = self.cached(node)
            if known is None or known[1] != value:
                return True          # released (or no watched copy: _acquire reads the node)
        return False

    def _acquire(self, node: str, namespace: str, pod: str, confirm: bool) -> str:
        """The lock, or LockHeld; with confirm, a lock held in the watched copy is read from
        the API server before LockHeld."""
        value = node_lock.encode(node_lock.NodeLock(self.clock.now(), namespace, pod))
        # The watched copy saves a GET when it is current; a stale one only costs a Conflict.
        known = self.cached(node)
        from_cache = known is not None
        for _ in range(_ATTEMPTS):
            if known is None:
                known, from_cache = self._read(node), False
            rv, current = known
            if current and not self._free(node, current, namespace, pod, ask=not from_cache):
                if from_cache and confirm:
                    known = None                 # confirm with the API server before refusing
                    continue
                raise LockHeld(current, self._held(node, current))
            try:
                self.api.patch_node_annotations(node, {ANNO_NODE_LOCK: value}, rv)
                return value
            except Conflict:
                known = None                     # the node changed: read it and judge again
            except ApiError as e:
                raise LockError(f"could not lock node {node}: {e}") from e
        raise LockError(f"node {node} changed under every attempt to lock it; kube-scheduler "
                        "retries the pod")

    def _read(self, node: str) -> tuple:
        try:
            obj = self.api.get_node(node)
        except ApiError as e:
            raise LockError(f"could not read node {node} to lock it: {e}") from e
        if obj is None:
            raise LockError(f"node {node} does not exist")
        return (obj.get("metadata") or {}).get("resourceVersion"), \
            annotations(obj).get(ANNO_NODE_LOCK)

    def _free(self, node: str, current: str, namespace: str, pod: str, ask: bool) -> bool:
        """Whether a held lock may be taken: ours already, expired, or (when `ask`, which costs
        a GET) its owner pod gone."""
        try:
            lock = node_lock.decode(current)
        except HamiFormatError as e:
            log.warning("node %s: unreadable lock %r taken over: %s", node, current, e)
            return True
        if (lock.namespace, lock.pod) == (namespace, pod):
            return True
        if lock.expired(self.clock.now(), self.expiry):
            log.info("node %s: lock of %s/%s expired; taken over", node, lock.namespace, lock.pod)
            return True
        if ask and lock.pod and self._owner_done(lock.namespace, lock.pod):
            log.info("node %s: lock owner %s/%s no longer exists or has finished; taken over",
                     node, lock.namespace, lock.pod)
            return True
        return False

    def _owner_done(self, namespace: str, pod: str) -> bool:
        """Whether the lock's owner is gone or finished (it will never be allocated)."""
        try:
            owner = self.api.get_pod(namespace, pod)
        except ApiError:
            return False          # unknown: assume the owner is alive
        return owner is None or (owner.get("status") or {}).get("phase") in POD_FINISHED_PHASES

    def _held(self, node: str, current: str) -> LockError:
        lock = node_lock.decode(current)
        owner = f"{lock.namespace}/{lock.pod}" if lock.pod else "an unnamed pod"
        return LockError(
            f"node {node} is locked by {owner} since {node_lock.format_time(lock.time)} (its "
            f"GPUs are being allocated); the lock is released when the node agent has "
            f"allocated them, taken over after {int(self.expiry.total_seconds())} s or when "
            f"that pod is deleted or has finished; kube-scheduler retries this pod")

    def release(self, node: str, value: str) -> bool:
        """Removes the lock if it still is `value` (one atomic JSON patch); True if removed."""
        return release_node_lock(self.api, node, value)


def release_node_lock(api, node: str, value: str) -> bool:
    """Removes node's lock if it still holds `value` (what the node agent does after Allocate);
    False when it holds something else or nothing."""
    try:
        api.json_patch_node(node, [{"op": "test", "path": _POINTER, "value": value},
                                   {"op": "remove", "path": _POINTER}])
        return True
    except (Invalid, NotFound):
        return False              # no longer ours (taken over or already released)
