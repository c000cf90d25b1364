"""Kubernetes Events on pods, as controllers record them: one Event per (pod, reason, message),
its count and lastTimestamp bumped when the same thing happens again (so a pod retried for
minutes shows one line with a count in `kubectl describe`, not hundreds)."""
from __future__ import annotations

import threading
import time
from typing import Callable

from hami_sim.apiserver.strategy import rfc3339


def now_rfc3339() -> str:
    """The current time as Kubernetes writes timestamps."""
    return rfc3339(time.time())


class EventRecorder:
    """Records core/v1 Events for one component (e.g. `hami-scheduler`)."""

    def __init__(self, core_v1, component: str, log: Callable[[str], None] = lambda _m: None):
        self._v1, self.component, self._log = core_v1, component, log
        self._lock = threading.Lock()
        self._seen: dict = {}        # (uid, reason, message) -> (event name, count)

    def record(self, pod: dict, event_type: str, reason: str, message: str) -> None:
        """One Event on pod (type Normal or Warning); API errors are logged, not raised."""
        from kubernetes.client.rest import ApiException
        meta = pod["metadata"]
        key = (meta.get("uid"), reason, message)
        now = now_rfc3339()
        with self._lock:
            known = self._seen.get(key)
        try:
            if known:
                name, count = known
                self._v1.patch_namespaced_event(name, meta["namespace"], {
                    "count": count + 1, "lastTimestamp": now}, _preload_content=False)
                with self._lock:
                    self._seen[key] = (name, count + 1)
                return
            body = {"metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                    "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                                       "namespace": meta["namespace"], "uid": meta.get("uid")},
                    "reason": reason, "message": message, "type": event_type, "count": 1,
                    "firstTimestamp": now, "lastTimestamp": now,
                    "source": {"component": self.component},
                    "reportingComponent": self.component}
            created = self._v1.create_namespaced_event(meta["namespace"], body)
            with self._lock:
                self._seen[key] = (created.metadata.name, 1)
        except ApiException as e:
            self._log(f"cannot record event {reason} on {meta['namespace']}/{meta['name']}: "
                      f"{e.status} {e.reason}")

    def forget(self, uids) -> None:
        """Drops what is remembered about pods that are gone."""
        gone = set(uids)
        with self._lock:
            for key in [k for k in self._seen if k[0] in gone]:
                del self._seen[key]
