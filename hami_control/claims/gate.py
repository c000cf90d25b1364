"""QuotaGate: namespace GPU quotas for pods whose GPUs kube-scheduler allocates itself.

A pod the webhook turns to DRA claims never reaches the extender, where quotas are checked.
So in a namespace with a GPU quota the webhook also gives it the scheduling gate
`hami.io/gpu-quota` (kube-scheduler leaves a gated pod Pending, `SchedulingGated`), and the
leader lifts the gates in the pods' creation order, each once what the pod asks fits beside
what its namespace holds (allocated claims, pods let through whose claims are not allocated
yet, extender pods): the quota is kept before any GPU is allocated, as the extender keeps it.
A pod that does not fit stays gated with a Warning Event `GPUQuotaExceeded` giving the
numbers (once per reason), and is tried again as claims and pods come and go.
"""
import logging
import threading
from typing import Callable

from hami_common.constants import POD_FINISHED_PHASES
from hami_common.request import parse_filters
from hami_control.clock import Clock, SystemClock
from hami_control.cluster.api import ApiError, Invalid, NotFound
from hami_control.cluster.events import warn_pod
from hami_control.cluster.objects import pod_key
from hami_control.placement.claims import ask_amount
from hami_control.webhook.dra import QUOTA_GATE, recorded_asks

log = logging.getLogger(__name__)
REASON = "GPUQuotaExceeded"


def gate_index(pod: dict) -> int:
    """The position of our gate in the pod's schedulingGates; -1 if it has none."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return next((i for i, g in enumerate(gates) if (g or {}).get("name") == QUOTA_GATE), -1)


class QuotaGate:
    """on_pod(pod, deleted) from the sync; lifts gates from its own thread, on the leader."""

    def __init__(self, state, api, published, is_leader: Callable[[], bool],
                 clock: Clock = SystemClock(), period_s: float = 2.0,
                 component: str = "hami-control",
                 synced: Callable[[], bool] = lambda: True):
        self.state, self.api, self.published = state, api, published
        self.is_leader, self.clock, self.period_s = is_leader, clock, period_s
        self.synced = synced          # no gate is lifted before quotas and claims are listed
        self.component = component
        self._pods: dict = {}             # key -> the gated pod as last seen
        self._told: dict = {}             # key -> the reason last recorded in an Event
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="quota-gate")

    def _ask(self, pod: dict, asks: dict):
        sizes = []
        if any(a.mem_percent and not a.mem_mib for a in asks.values()):
            filters = parse_filters((pod.get("metadata") or {}).get("annotations") or {})
            sizes = self.published.sizes(filters)
        return ask_amount(asks.values(), sizes)

    def on_pod(self, pod: dict, deleted: bool) -> None:
        """Counts a DRA pod of the webhook's until its claims are; remembers a gated one."""
        key, meta = pod_key(pod), pod.get("metadata") or {}
        asks = recorded_asks(pod)
        gone = deleted or (pod.get("status") or {}).get("phase") in POD_FINISHED_PHASES
        gated = gate_index(pod) >= 0
        self.state.claims.apply_pod(key, str(meta.get("uid") or ""),
                                    str(meta.get("namespace") or "default"),
                                    self._ask(pod, asks) if asks and not gone else None,
                                    len(asks), gated, gone)
        with self._lock:
            if gated and asks and not gone:
                self._pods[key] = pod
            elif self._pods.pop(key, None) is not None or gone:
                self._told.pop(key, None)
        if gone or gated:
            self._wake.set()          # room may have come free, or a pod waits

    def lift_ready(self) -> int:
        """One round (the leader's): lifts the gates of the pods that fit, oldest first;
        returns how many."""
        with self._lock:
            pods = sorted(self._pods.items(), key=lambda kv: (
                str((kv[1].get("metadata") or {}).get("creationTimestamp") or ""), kv[0]))
        lifted = 0
        for key, pod in pods:
            meta = pod.get("metadata") or {}
            namespace = str(meta.get("namespace") or "default")
            why = self.state.claims.admit(key, self.state.namespace_limits(namespace),
                                          self._ask(pod, recorded_asks(pod)))
            if why is not None:
                self._tell(key, meta, why)
                continue
            if self._lift(key, pod):
                lifted += 1
        return lifted

    def _lift(self, key: str, pod: dict) -> bool:
        meta, index = pod.get("metadata") or {}, gate_index(pod)
        ops = [{"op": "test", "path": f"/spec/schedulingGates/{index}/name",
                "value": QUOTA_GATE}, {"op": "remove", "path": f"/spec/schedulingGates/{index}"}]
        try:
            self.api.json_patch_pod(meta.get("namespace"), meta.get("name"), ops)
        except (Invalid, NotFound):
            self.state.claims.regate(key)     # changed or gone: its next event says how
            with self._lock:
                self._pods.pop(key, None)
            return False
        except ApiError as e:
            log.warning("lifting the GPU quota gate of pod %s failed (%s); retrying", key, e)
            self.state.claims.regate(key)
            return False
        with self._lock:
            self._pods.pop(key, None)
            self._told.pop(key, None)
        return True

    def _tell(self, key: str, meta: dict, why: str) -> None:
        with self._lock:
            if self._told.get(key) == why:
                return
            self._told[key] = why
        warn_pod(self.api, self.component, self.clock.now(), meta.get("namespace"),
                 meta.get("name"), meta.get("uid"), REASON,
                 f"{why}; the pod stays gated ({QUOTA_GATE}) until its namespace has room")

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.period_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self.is_leader() and self.synced():
                self.lift_ready()

    def start(self) -> "QuotaGate":
        """Starts the worker."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the worker."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
