"""Pods the webhook never saw: say so on the pod, with what to do.

The webhook gives GPU pods our scheduler name. When the API server could not call it (no
endpoints during a leader change, an empty caBundle after `kubectl apply -f deploy/`, or a
failurePolicy of Ignore), a pod asking for our resources keeps the default scheduler: a gpumem
pod then stays Pending for ever ("Insufficient nvidia.com/gpumem"), and a pod asking only for
nvidia.com/gpu may be bound by the default scheduler and refused at Allocate. deploy/ makes the
webhook fail closed for such pods (matchConditions + failurePolicy: Fail), so this is the
second line: the leader finds unscheduled pods that ask for our resources under the default
scheduler and records one Warning Event on each, naming the cause and the fix. Pods that name
another scheduler, or carry `hami.io/webhook: ignore`, chose to bypass us and are left alone.
It sees every unfinished pod only while hami-control tracks CPU and memory (the default); with
--no-track-cpu-memory it watches its own scheduler's pods alone and finds none.
"""
import logging
import threading
from typing import Callable

from hami_common import constants as C
from hami_control.clock import Clock, SystemClock
from hami_control.cluster.events import warn_pod
from hami_control.webhook.admission import DEFAULT_SCHEDULER, asks_gpu_slices

log = logging.getLogger(__name__)

REASON = "GPUWebhookBypassed"
_REMEMBERED = 10000     # pods already told (by UID); forgotten when deleted or bound


class StrandedPods:
    """observe(pod) for each pod event of the sync; forget(uid) when a pod goes."""

    def __init__(self, api, scheduler: str, is_leader: Callable[[], bool],
                 clock: Clock = SystemClock(), component: str = "hami-control"):
        self.api, self.scheduler, self.is_leader = api, scheduler, is_leader
        self.clock, self.component = clock, component
        self._told: set = set()
        self._lock = threading.Lock()

    def stranded(self, pod: dict) -> bool:
        """Unscheduled, under the default scheduler, asking for our resources, not opted out."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("nodeName") or meta.get("deletionTimestamp"):
            return False
        if spec.get("schedulerName") not in (None, "", DEFAULT_SCHEDULER):
            return False
        if (meta.get("labels") or {}).get(C.LABEL_WEBHOOK) == C.LABEL_WEBHOOK_IGNORE:
            return False
        if (pod.get("status") or {}).get("phase") in C.POD_FINISHED_PHASES:
            return False
        return asks_gpu_slices(pod)

    def observe(self, pod: dict) -> bool:
        """Records the Event once per pod when it is stranded and this replica leads; whether
        it did."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        if not self.stranded(pod):
            self.forget(uid)
            return False
        with self._lock:
            if uid in self._told or not self.is_leader():
                return False
            if len(self._told) >= _REMEMBERED:
                self._told.clear()
            self._told.add(uid)
        namespace, name = meta.get("namespace", "default"), meta.get("name", "")
        scheduler = (pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER
        log.warning("pod %s/%s asks for GPU slices but its scheduler is %s: the webhook did "
                    "not see it", namespace, name, scheduler)
        warn_pod(self.api, self.component, self.clock.now(), namespace, name, uid, REASON,
                 f"this pod asks for nvidia.com/* GPU resources but its schedulerName is "
                 f"{scheduler}, so hami-control's webhook did not see it (unreachable, an "
                 f"empty caBundle in MutatingWebhookConfiguration hami-control, or "
                 f"failurePolicy Ignore) and no scheduler will place it. Check `kubectl get "
                 f"endpoints -n hami-system hami-control` and the caBundle, then delete and "
                 f"recreate the pod; or set schedulerName: {self.scheduler} in its spec.")
        return True

    def on_pod(self, pod: dict, deleted: bool) -> None:
        """The sync's per-pod hook."""
        if deleted:
            self.forget((pod.get("metadata") or {}).get("uid", ""))
        else:
            self.observe(pod)

    def forget(self, uid: str) -> None:
        """The pod is gone or no longer stranded."""
        with self._lock:
            self._told.discard(uid)
