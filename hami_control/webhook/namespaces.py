"""Namespace labels for the webhook's `hami.io/webhook: ignore` rule, cached for a short while
(a namespace's labels rarely change; pods are created in bursts)."""
import logging
import threading
from typing import Mapping

from hami_control.clock import Clock, SystemClock
from hami_control.cluster.api import ApiError

log = logging.getLogger(__name__)


class NamespaceLabels:
    """Callable: namespace name -> its labels. An unreadable namespace counts as unlabelled
    (the pod is then handled as usual, which is what the API server's own selector does for a
    namespace that has no labels)."""

    def __init__(self, api, clock: Clock = SystemClock(), ttl_s: float = 10.0):
        self.api, self.clock, self.ttl_s = api, clock, ttl_s
        self._cache: dict = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> Mapping:
        now = self.clock.monotonic()
        with self._lock:
            hit = self._cache.get(name)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        try:
            namespace = self.api.get_namespace(name)
        except ApiError as e:
            log.warning("webhook: cannot read namespace %s (its labels are taken as none): %s",
                        name, e)
            return {}
        labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        with self._lock:
            self._cache[name] = (now, labels)
        return labels
