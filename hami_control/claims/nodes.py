"""DraNodes: the DRA nodes' GPUs as our placement core sees them, and the node scores of a
claim pod (the extender's prioritize).

Fed by the cluster sync: our driver's ResourceSlices (the GPUs), the allocated claims (what
each consumed), the nodes (CPU and memory) and the bound pods (their CPU and memory). Scored
by fragaware with first-fit devices, as kube-scheduler's allocator will place them
(placement/dra.py). kube-scheduler writes a claim's allocation only after it chose the node,
so a pod scored is assumed at once on the node it scores best (where, with the extender's
weight, kube-scheduler puts it), until its claims come, it is bound or deleted, or
`assume_s` passes: pods scored one after the other do not all count on the same room.
A node this model does not know gets 0 (logged once per node); a pod it cannot read gets 0
on every node: never an error, so kube-scheduler always schedules.
"""
import logging
import random
import threading
from typing import Optional

from hami_common.errors import HamiFormatError, RequestError
from hami_common.quantity import cpu_millis, memory_mib
from hami_common.request import parse_filters, pod_cpu_memory
from hami_control.clock import Clock, SystemClock
from hami_control.cluster.objects import pod_key
from hami_control.placement import ClusterView, Engine, PlacementConfig, Reservation
from hami_control.placement.annotations import pod_reservation
from hami_control.placement.dra import (claim_request, claim_reservation, priorities,
                                        slice_gpus)
from hami_control.placement.registry import PolicyRegistry
from hami_control.webhook.dra import recorded_asks

log = logging.getLogger(__name__)
_TOLD_MAX = 4096
NODE_POLICY, GPU_POLICY = "fragaware", "kubedra"     # kubedra's GPU pick: first fit


class DraNodes:
    """The model, under its own lock."""

    def __init__(self, clock: Clock = SystemClock(), assume_s: float = 30.0):
        self.clock, self.assume_s = clock, assume_s
        self.view = ClusterView()
        rng = random.Random(0)
        self.engine = Engine(PlacementConfig(node_policy=NODE_POLICY, gpu_policy=GPU_POLICY,
                                             resource_fit=True, explain=False),
                             registry=PolicyRegistry(rng=rng, allow_baselines=True), rng=rng)
        self.lock = threading.Lock()
        self._slices: dict = {}         # slice name -> SliceGpus
        self._pools: dict = {}          # pool name -> node name
        self._by_node: dict = {}        # node name -> its GPUs (DeviceInfo tuple)
        self._sizes: dict = {}          # node name -> (millicores, MiB) allocatable
        self._claims: dict = {}         # claim key -> ClaimUse (allocated, ours)
        self._assumed: dict = {}        # pod UID -> (expiry, view key)
        self._told: set = set()         # nodes and pods already logged as unknown

    # --- sync ----------------------------------------------------------------------------
    def apply_slice(self, obj: dict, deleted: bool) -> None:
        """A ResourceSlice of our driver as the watch saw it."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            gpus = None if deleted else slice_gpus(obj)
        except HamiFormatError as e:
            log.warning("%s; the node's GPUs get no prioritize score until it is fixed", e)
            gpus = None
        with self.lock:
            old = self._slices.pop(name, None)
            if gpus is not None:
                self._slices[name] = gpus
            if gpus == old:
                return        # a relist or resync: re-placing every claim per slice was
                #               1,213 x the claims (bench/k8s_throughput.py)
            self._pools = {s.pool: s.node for s in self._slices.values()}
            self._by_node = {s.node: s.gpus for s in self._slices.values()}
            if old is not None and (gpus is None or old.node != gpus.node):
                self.view.remove_node(old.node)
            if gpus is not None:
                self._upsert(gpus.node, gpus.gpus)
            self._replace_claims({s.pool for s in (old, gpus) if s is not None})

    def reconcile_slices(self, listed) -> None:
        """After a relist: forgets the slices the list lacks."""
        present = set(listed)
        with self.lock:
            gone = [n for n in self._slices if n not in present]
        for name in gone:
            self.apply_slice({"metadata": {"name": name}}, deleted=True)

    def apply_node(self, node: dict, deleted: bool) -> None:
        """A Node: its allocatable CPU and memory (for fragaware's stranded GPUs)."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        try:
            size = None if deleted else _allocatable(node)
        except HamiFormatError as e:
            log.warning("node %s: status.allocatable: %s; scored as if unbounded", name, e)
            size = None
        with self.lock:
            if self._sizes.get(name) == size:
                return
            if size is None:
                self._sizes.pop(name, None)
            else:
                self._sizes[name] = size
            gpus = self._gpus_of(name)
            if gpus is not None:
                self._upsert(name, gpus)

    def apply_pod(self, pod: dict, deleted: bool) -> None:
        """A pod: its CPU and memory once bound; its assumption ends once bound or gone."""
        key = pod_key(pod)
        try:
            held = None if deleted else pod_reservation(pod, True, False)
        except HamiFormatError:
            held = None               # the sync has said so
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        with self.lock:
            if deleted or (pod.get("spec") or {}).get("nodeName"):
                self._unassume(uid)
            current = self.view.reservation(key)
            if current == held:
                return
            if current is not None:
                self.view.release(key)
            if held is not None:
                self.view.reserve(held)

    def apply_claim(self, key: str, use) -> None:
        """An allocated claim of our driver (None: gone, not allocated, not ours)."""
        with self.lock:
            if use is None:
                self._claims.pop(key, None)
            else:
                self._claims[key] = use
                for _, uid in use.pods:
                    self._unassume(uid)
            self._place_claim(key)

    def reconcile_claims(self, listed) -> None:
        """After a relist: forgets the claims the list lacks."""
        present = set(listed)
        with self.lock:
            gone = [k for k in self._claims if k not in present]
        for key in gone:
            self.apply_claim(key, None)

    # --- prioritize ----------------------------------------------------------------------
    def score(self, pod: dict, names: list) -> list:
        """kube-scheduler's HostPriorityList for a pod over the candidate `names`."""
        asks = recorded_asks(pod)
        if not asks:
            return priorities({}, names)          # not a claim pod of the webhook's: no view
        meta = pod.get("metadata") or {}
        try:
            cpu, mem = pod_cpu_memory(pod)
            request = claim_request(str(meta.get("namespace") or "default"),
                                    str(meta.get("name") or ""), str(meta.get("uid") or ""),
                                    asks.values(), parse_filters(meta.get("annotations") or {}),
                                    cpu, mem)
        except RequestError as e:
            with self.lock:
                self._tell(f"pod {pod_key(pod)}", "pod %s: its ask is unreadable (%s); every "
                           "node scores 0", pod_key(pod), e)
            return priorities({}, names)
        with self.lock:
            self._expire()
            self._unassume(request.uid)
            scores = self.engine.node_scores(self.view, request, names)
            unknown = self.view.candidates(names)[1]
            for name in unknown:
                self._tell(name, "node %s publishes no GPU of our DRA driver (no ResourceSlice "
                           "seen); its prioritize score is 0", name)
            answer = priorities(scores, names)
            self._assume(request, answer)
        return answer

    def assumed(self) -> dict:
        """pod UID -> the node it is assumed on (a copy)."""
        with self.lock:
            return {uid: self.view.reservation(key).node
                    for uid, (_, key) in self._assumed.items()}

    # --- inside the lock -----------------------------------------------------------------
    def _gpus_of(self, node: str) -> Optional[tuple]:
        return self._by_node.get(node)

    def _upsert(self, node: str, gpus: tuple) -> None:
        cpu, mem = self._sizes.get(node, (None, None))
        self.view.upsert_node(node, gpus, cpu, mem)

    def _replace_claims(self, pools: set) -> None:
        """Places again the claims on the given pools' devices."""
        for key, use in list(self._claims.items()):
            if any(d.node in pools for d in use.devices):
                self._place_claim(key)

    def _place_claim(self, key: str) -> None:
        use = self._claims.get(key)
        held = None
        if use is not None:
            held = claim_reservation(use, self._pools)
        current = self.view.reservation(f"claim:{key}")
        if current == held:
            return
        if current is not None:
            self.view.release(current.pod)
        if held is not None:
            self.view.reserve(held)

    def _assume(self, request, answer: list) -> None:
        top = answer_max(answer)
        best = [a["Host"] for a in answer if a["Score"] == top]
        if not request.uid or len(best) != 1 or top == 0:
            return
        decision = self.engine.place(self.view, request, best)
        if not decision.ok:
            return
        key = f"assumed:{request.key}"
        self.view.reserve(Reservation(key, decision.node, decision.devices))
        self._assumed[request.uid] = (self.clock.monotonic() + self.assume_s, key)

    def _unassume(self, uid: str) -> None:
        held = self._assumed.pop(uid, None)
        if held is not None:
            self.view.release(held[1])

    def _expire(self) -> None:
        now = self.clock.monotonic()
        for uid in [u for u, (until, _) in self._assumed.items() if until <= now]:
            self._unassume(uid)

    def _tell(self, subject: str, message: str, *args) -> None:
        if subject in self._told:
            return
        if len(self._told) >= _TOLD_MAX:
            self._told.clear()
        self._told.add(subject)
        log.info(message, *args)


def _allocatable(node: dict) -> Optional[tuple]:
    """(millicores, MiB) a Node offers; None when it says nothing of them."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if "cpu" not in allocatable or "memory" not in allocatable:
        return None
    return cpu_millis(allocatable["cpu"]), memory_mib(allocatable["memory"])


def answer_max(answer: list) -> int:
    """The highest score of a HostPriorityList (0 when empty)."""
    return max((a["Score"] for a in answer), default=0)
