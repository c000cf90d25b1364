"""Namespace labels for the webhook's `hami.io/webhook: ignore` rule, cached for a short while
(a namespace's labels rarely change; pods are created in bursts).

The wait for a read is bounded well inside the webhook's own timeout (10 s in deploy/): a slow
API server must not make the API server's call to us time out, since failurePolicy Ignore would
then create the pod unmutated. The read runs on a small pool, so the bound holds whatever the
client's own retries do; a read that is late or fails leaves the labels last seen (none for a
namespace never read), and a late read still refreshes the cache when it lands."""
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Mapping

from hami_control.clock import Clock, SystemClock
from hami_control.cluster.api import ApiError

log = logging.getLogger(__name__)


class NamespaceLabels:
    """Callable: namespace name -> its labels. An unreadable namespace counts as unlabelled
    (the pod is then handled as usual, which is what the API server's own selector does for a
    namespace that has no labels)."""

    def __init__(self, api, clock: Clock = SystemClock(), ttl_s: float = 10.0,
                 wait_s: float = 2.0):
        self.api, self.clock, self.ttl_s, self.wait_s = api, clock, ttl_s, wait_s
        self._cache: dict = {}
        self._reads: dict = {}          # name -> Future of the read in flight
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="namespace-read")

    def __call__(self, name: str) -> Mapping:
        now = self.clock.monotonic()
        with self._lock:
            hit = self._cache.get(name)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
            read = self._reads.get(name)
            if read is None:
                read = self._reads[name] = self._pool.submit(self._read, name, now)
        try:
            return read.result(self.wait_s)
        except (FutureTimeout, ApiError) as e:
            reason = f"no answer within {self.wait_s:g} s" if isinstance(e, FutureTimeout) \
                else str(e)
            log.warning("webhook: cannot read namespace %s (%s); using %s", name, reason,
                        "the labels last seen" if hit else "no labels")
            return hit[1] if hit is not None else {}

    def _read(self, name: str, started: float) -> Mapping:
        try:
            namespace = self.api.get_namespace(name)
            labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
            with self._lock:
                self._cache[name] = (started, labels)
            return labels
        finally:
            with self._lock:
                self._reads.pop(name, None)
