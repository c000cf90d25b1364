"""A small kube-scheduler double: what kube-scheduler does for pods of the `hami-scheduler`
profile with hami-py's extender configuration (deploy/scheduler-config.yaml), and no more.

For each unbound pod whose schedulerName is ours, oldest first:
1. the candidate nodes: every node that is Ready and not cordoned (kube-scheduler's own
   plugins would also check CPU, memory, taints and affinity; the double does not);
2. POST /filter with their names (`nodeCacheCapable: true`);
3. one node back: POST /bind (the extender binds: `bindVerb`), then a `Scheduled` Event;
   none: the pod stays Pending with `PodScheduled=False` (reason Unschedulable) and a Warning
   `FailedScheduling` Event whose message is kube-scheduler's ("0/2 nodes are available: ...",
   from the extender's FailedNodes), and is tried again after a backoff (1 s doubling to 10 s,
   kube-scheduler's defaults). An extender error or a refused bind is retried the same way.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

from hami_common import constants as C
from hami_sim.demo.events import EventRecorder, now_rfc3339
from hami_sim.extender_client import ExtenderError
from hami_sim.demo.podloop import UnboundPodLoop



def fit_error(total: int, failed: dict) -> str:
    """kube-scheduler's message for a pod no node accepted: reasons counted over nodes."""
    counts = Counter(reason for reason in failed.values() if reason)
    reasons = sorted(f"{n} {reason}" for reason, n in counts.items())
    message = f"0/{total} nodes are available:"
    return message + (f" {', '.join(reasons)}." if reasons else "")


def node_schedulable(node: dict) -> bool:
    """Ready and not cordoned."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class Attempt:
    """The outcome of one scheduling attempt of one pod."""

    key: str
    node: Optional[str] = None            # bound to it
    message: str = ""                     # why not
    failed_nodes: dict = field(default_factory=dict)   # the extender's per-node reasons
    at: float = field(default_factory=time.monotonic)

    @property
    def scheduled(self) -> bool:
        """Whether the pod was bound."""
        return self.node is not None


class RefusalNews:
    """Says a pod's FailedScheduling once per distinct message (not at every retry)."""

    def __init__(self):
        self._said: dict = {}

    def line(self, attempt: Attempt) -> Optional[str]:
        """The line to show for a refused attempt, or None when it says nothing new."""
        if attempt.scheduled or self._said.get(attempt.key) == attempt.message:
            return None
        self._said[attempt.key] = attempt.message
        retry = "" if "retries" in attempt.message else " (retried with a backoff)"
        return f"{attempt.key}: FailedScheduling: {attempt.message}{retry}"


class SchedulerDouble(UnboundPodLoop):
    """Schedules our pods through hami-control's /filter and /bind, from a thread."""

    name = "scheduler"

    def __init__(self, core_v1, extender, *, scheduler_name: str = C.SCHEDULER_NAME,
                 notify: Callable[[Attempt], None] = lambda _a: None,
                 backoff: tuple = (1.0, 10.0), log: Callable[[str], None] = lambda _m: None,
                 interval: float = 0.2):
        super().__init__(core_v1, log, interval)
        self._v1, self._extender, self.scheduler_name = core_v1, extender, scheduler_name
        self._notify, self._backoff, self._log = notify, backoff, log
        self._events = EventRecorder(core_v1, scheduler_name, log)
        self._lock = threading.Lock()
        self._retry: dict = {}           # uid -> (attempts, monotonic time of the next try)
        self._bound: set = set()         # uids bound, until the watch sees them leave
        self.attempts: dict = {}         # "ns/name" -> last Attempt

    def last_attempt(self, namespace: str, name: str) -> Optional[Attempt]:
        """The latest attempt for a pod, or None."""
        with self._lock:
            return self.attempts.get(f"{namespace}/{name}")

    def _ours(self, pod: dict) -> bool:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        return (spec.get("schedulerName") == self.scheduler_name and not spec.get("nodeName")
                and status.get("phase") not in C.POD_FINISHED_PHASES
                and not pod["metadata"].get("deletionTimestamp"))

    def run_once(self) -> None:
        """One pass: tries every pending pod of ours whose backoff has passed."""
        pods = self.pods
        gone = [uid for uid in list(self._retry) + list(self._bound) if uid not in pods]
        for uid in gone:
            self._retry.pop(uid, None)
            self._bound.discard(uid)
        self._events.forget(gone)
        now = time.monotonic()
        queue = sorted((p for uid, p in pods.items() if self._ours(p) and uid not in self._bound
                        and self._retry.get(uid, (0, 0.0))[1] <= now),
                       key=lambda p: p["metadata"].get("creationTimestamp", ""))
        for pod in queue:
            if self.stopping:
                return
            self.schedule(pod)

    # One pod ------------------------------------------------------------------------------

    def schedule(self, pod: dict) -> Attempt:
        """Filter, then bind or record why not; returns the attempt."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        try:
            nodes = self._candidates()
            result = self._extender.filter(pod, nodes)
            attempt = self._decide(key, pod, nodes, result)
        except (ExtenderError, OSError) as e:
            attempt = Attempt(key, message=f"the scheduler extender failed: {e}")
        with self._lock:
            self.attempts[key] = attempt
        if attempt.scheduled:
            self._bound.add(meta["uid"])
            self._retry.pop(meta["uid"], None)
            self._events.record(pod, "Normal", "Scheduled",
                                f"Successfully assigned {key} to {attempt.node}")
        else:
            self._unschedulable(pod, attempt)
        self._notify(attempt)
        return attempt

    def _candidates(self) -> list:
        raw = self._v1.list_node(_preload_content=False).data
        return sorted(n["metadata"]["name"] for n in json.loads(raw)["items"]
                      if node_schedulable(n))

    def _decide(self, key: str, pod: dict, nodes: list, result: dict) -> Attempt:
        if result.get("Error"):
            return Attempt(key, message=f"the scheduler extender refused: {result['Error']}")
        chosen = result.get("NodeNames") or []
        failed = dict(result.get("FailedNodes") or {})
        failed.update(result.get("FailedAndUnresolvableNodes") or {})
        if not chosen:
            return Attempt(key, message=fit_error(len(nodes), failed), failed_nodes=failed)
        node = chosen[0]
        meta = pod["metadata"]
        answer = self._extender.bind(meta["namespace"], meta["name"], meta["uid"], node)
        if answer.get("Error"):
            return Attempt(key, message=f"binding rejected: {answer['Error']}")
        return Attempt(key, node=node)

    def _unschedulable(self, pod: dict, attempt: Attempt) -> None:
        from kubernetes.client.rest import ApiException
        meta = pod["metadata"]
        tries = self._retry.get(meta["uid"], (0, 0.0))[0] + 1
        delay = min(self._backoff[0] * 2 ** (tries - 1), self._backoff[1])
        self._retry[meta["uid"]] = (tries, time.monotonic() + delay)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": attempt.message, "lastTransitionTime": now_rfc3339(),
                     "lastProbeTime": None}
        try:
            self._v1.patch_namespaced_pod_status(meta["name"], meta["namespace"],
                                                 {"status": {"conditions": [condition]}},
                                                 _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                self._log(f"cannot set the PodScheduled condition of {attempt.key}: {e.status}")
        self._events.record(pod, "Warning", "FailedScheduling", attempt.message)
