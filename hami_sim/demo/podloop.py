"""A control loop over the pods nobody has bound yet, as the scheduler double
needs it: a list + watch (hami_sim.kubelet.pods.PodWatcher with an empty spec.nodeName) and a
thread that makes one pass whenever the pods change, and at least every `interval` seconds
(for backoffs)."""
from __future__ import annotations

import threading
from typing import Callable


class UnboundPodLoop:
    """Subclasses implement run_once(); `pods` is uid -> pod dict of the unbound pods."""

    name = "unbound-pods"

    def __init__(self, core_v1, log: Callable[[str], None], interval: float):
        from hami_sim.kubelet.pods import PodWatcher
        self._interval, self._log = interval, log
        self._wake, self._stop = threading.Event(), threading.Event()
        # An empty spec.nodeName selects the pods no one has bound yet.
        self._watcher = PodWatcher(core_v1, "", self._wake.set, log)
        self._thread = threading.Thread(target=self._loop, daemon=True, name=self.name)

    @property
    def pods(self) -> dict:
        """A snapshot of the unbound pods."""
        return dict(self._watcher.pods)

    @property
    def stopping(self) -> bool:
        """Whether stop() was called."""
        return self._stop.is_set()

    def start(self):
        """Starts watching and the loop."""
        self._watcher.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the loop and the watch."""
        self._stop.set()
        self._wake.set()
        self._watcher.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except Exception as e:  # noqa: BLE001 one failed pass must not end the loop
                self._log(f"{self.name}: pass failed ({type(e).__name__}: {e}); retrying")

    def run_once(self) -> None:
        """One pass over self.pods."""
        raise NotImplementedError
