"""GPU health: critical XID events and NVML probes, with recovery after a quiet time.

Rules (docs/node.md, "Health"):
- a critical XID not in the ignored list marks that GPU unhealthy at once (an event the driver
  cannot attribute to a GPU marks them all);
- a GPU that does not answer an NVML probe is unhealthy (unknown health is unhealthy);
- an unhealthy GPU becomes healthy again once nothing bad happened to it for
  `recovery_s` seconds and it answers NVML;
- if XID events cannot be watched for a GPU, its health comes from the probes alone (logged,
  so the operator knows).
"""
import time
from typing import Callable, Iterable, Optional

from hami_node.plugin.backend import DeviceBackend, XidEvent
from hami_node.plugin.devices import DeviceTable
from hami_node.plugin.errors import BackendError
from hami_node.plugin.worker import Worker

EVENT_WAIT_S = 0.2      # longest wait for an event before the probes get a turn
PROBE_INTERVAL_S = 1.0
REOPEN_DELAY_S = 1.0


class HealthMonitor(Worker):
    """A thread that keeps `table` up to date from `backend`."""

    def __init__(self, backend: DeviceBackend, table: DeviceTable, ignored_xids: Iterable[int],
                 recovery_s: float, *, clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] = print,
                 on_xid: Optional[Callable[[XidEvent, bool], None]] = None):
        self.backend, self.table = backend, table
        self.ignored = frozenset(ignored_xids)
        self.recovery_s = recovery_s
        self.clock, self.log = clock, log
        self.on_xid = on_xid or (lambda event, critical: None)
        super().__init__("health")
        self._next_probe = 0.0
        self._complained = False

    def handle_event(self, event: XidEvent) -> None:
        """Applies one XID event."""
        critical = event.xid not in self.ignored
        self.on_xid(event, critical)
        if not critical:
            self.log(f"GPU {event.uuid or '?'}: XID {event.xid} ignored (non-critical list)")
            return
        now = self.clock()
        targets = [event.uuid] if event.uuid else [g.uuid for g in self.table.gpus]
        for uuid in targets:
            # Logged even when already unhealthy: each event restarts the quiet time.
            self.table.mark(uuid, False, f"critical XID {event.xid}", now)
            self.log(f"GPU {uuid}: critical XID {event.xid}; its virtual devices are Unhealthy "
                     f"(healthy again after {self.recovery_s:g}s without errors)")

    def check(self) -> None:
        """Probes every GPU; recovers those quiet for long enough."""
        now = self.clock()
        for state in self.table.states():
            uuid = state.gpu.uuid
            problem = self.backend.probe(uuid)
            if problem:
                if self.table.mark(uuid, False, problem, now):
                    self.log(f"GPU {uuid}: unhealthy: {problem}")
            elif not state.healthy and now - state.last_bad >= self.recovery_s:
                if self.table.mark(uuid, True):
                    self.log(f"GPU {uuid}: healthy again (no errors for {self.recovery_s:g}s "
                             "and NVML answers)")

    def _open(self):
        try:
            watch = self.backend.watch_xids([g.uuid for g in self.table.gpus])
        except BackendError as e:
            if not self._complained:
                self.log(f"cannot watch XID events ({e}); health from NVML probes only until "
                         f"it works (retrying every {REOPEN_DELAY_S:g}s)")
                self._complained = True
            return None
        self._complained = False
        for uuid in sorted(watch.unsupported):
            self.log(f"GPU {uuid}: XID events not supported; its health comes from NVML "
                     "probes only")
        return watch

    def _run(self) -> None:
        watch, next_open = None, 0.0
        while not self._stop.is_set():
            if watch is None and time.monotonic() >= next_open:
                watch = self._open()
                next_open = time.monotonic() + REOPEN_DELAY_S
            event = None
            if watch is None:
                self._stop.wait(EVENT_WAIT_S)
            else:
                try:
                    event = watch.wait(EVENT_WAIT_S)
                except BackendError as e:
                    self._fail_all(str(e))
                    watch.close()
                    watch = None
                    continue
            if event is not None:
                self.handle_event(event)
            if self.clock() >= self._next_probe:
                self._next_probe = self.clock() + PROBE_INTERVAL_S
                self.check()
        if watch is not None:
            watch.close()

    def _fail_all(self, reason: str) -> None:
        now = self.clock()
        self.log(f"{reason}; every GPU is Unhealthy until NVML answers again")
        for gpu in self.table.gpus:
            self.table.mark(gpu.uuid, False, reason, now)
