"""DecisionWriter: the filter's annotation writes, off the filter's answer path.

A filter decides and reserves at once, then answers kube-scheduler; writing the decision onto
the pod (an API round trip) happens on a small pool meanwhile. Nothing can act on the decision
before the write has landed: the bind of that pod waits for it and fails (releasing nothing,
since it took nothing yet) if it did not land, and a new filter of the same pod waits for it
before deciding again. A write that fails rolls the reservation back, as a synchronous one
would; the pod is then refused at bind and filtered again.
"""
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Optional

log = logging.getLogger(__name__)
_KEEP = 4096            # finished writes remembered (a bind asks about its pod's last one)


class DecisionWriter:
    """Runs one write per pod at a time; remembers each pod's last write until its bind."""

    def __init__(self, workers: int = 4):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decision-write")
        self._writes: dict = {}
        self._lock = threading.Lock()

    def submit(self, key: str, write: Callable[[], Optional[str]]) -> None:
        """Runs write() (which returns None, or what went wrong) for pod key."""
        future = self._pool.submit(write)
        with self._lock:
            self._writes[key] = future
            if len(self._writes) > _KEEP:
                self._prune()

    def _prune(self) -> None:
        done = [k for k, f in self._writes.items() if f.done() and f.result() is None]
        for key in done[:len(self._writes) - _KEEP // 2]:
            del self._writes[key]

    def wait(self, key: str, timeout: float = 30.0) -> Optional[str]:
        """Waits for pod key's last write; None if it landed (or there is none), else why not."""
        with self._lock:
            future: Optional[Future] = self._writes.get(key)
        if future is None:
            return None
        try:
            return future.result(timeout)
        except FutureTimeout:
            return f"writing the decision is still in progress after {timeout:.0f} s"

    def forget(self, key: str) -> None:
        """Drops pod key's last write once its bind has used it."""
        with self._lock:
            future = self._writes.get(key)
            if future is not None and future.done():
                del self._writes[key]

    def close(self) -> None:
        """Waits for the writes in flight."""
        self._pool.shutdown(wait=True)
