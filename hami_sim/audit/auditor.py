"""The auditor: runs every rule (checks.py) over snapshot after snapshot, continuously in a
thread or pass by pass, and keeps each violation once (first seen), printed with the objects
involved."""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional, TextIO

from hami_sim.audit import checks
from hami_sim.audit.model import Bounds, Snapshot, Violation


class Auditor:
    """Checks snapshots; remembers what stays orphaned between passes and what it found."""

    def __init__(self, bounds: Bounds = Bounds(), out: Optional[TextIO] = None,
                 excuse: Optional[Callable[[dict], Optional[str]]] = None):
        self.bounds, self.out, self.excuse = bounds, out, excuse
        self.first_seen: dict = {}           # leftover -> first seen orphaned
        self.room_since: dict = {}           # pending pod -> room for it first seen
        self.violations: list = []           # each once, in the order found
        self.excused: list = []              # endings excuse() explained (not violations)
        self._keys: set = set()
        self.passes = 0
        self.missed = 0                      # passes without a snapshot (API down)
        self.missed_why: list = []
        self.pod_processes: set = set()      # pids of pods' processes it checked
        self.pods_seen: set = set()          # uids of the pods it checked
        self.metrics_samples = 0             # container usage samples read from /metrics
        self.errors: list = []               # passes that failed in the auditor itself

    def observe(self, snap: Snapshot) -> list:
        """The violations new in this snapshot (each also kept and printed)."""
        self.passes += 1
        self.pod_processes.update(p.pid for p in snap.processes if p.pod_uid)
        self.pods_seen.update((p.get("metadata") or {}).get("uid") for p in snap.pods)
        self.metrics_samples += (snap.metrics or "").count("vGPU_device_memory_usage_in_bytes{")
        new = []
        for v in checks.run_all(snap, self.first_seen, self.bounds, self.room_since,
                                self.excuse):
            if v.key in self._keys:
                continue
            self._keys.add(v.key)
            excused = v.check in checks.EXCUSED
            (self.excused if excused else self.violations).append(v)
            if not excused:
                new.append(v)
            if self.out is not None:
                print(f"{'EXCUSED' if excused else 'VIOLATION'} {snap.now:%H:%M:%S} {v}",
                      file=self.out, flush=True)
        return new

    def by_check(self) -> dict:
        """check name -> how many distinct violations."""
        counts: dict = {}
        for v in self.violations:
            counts[v.check] = counts.get(v.check, 0) + 1
        return counts


class AuditLoop:
    """Runs an Auditor over source() every interval seconds in a thread until stopped."""

    def __init__(self, auditor: Auditor, source: Callable[[], Snapshot], interval: float = 2.0):
        self.auditor, self.source, self.interval = auditor, source, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="auditor", daemon=True)

    def start(self) -> "AuditLoop":
        """Starts the thread."""
        self._thread.start()
        return self

    def _run(self) -> None:
        from hami_sim.audit.collect import SourceError
        while not self._stop.is_set():
            try:
                self.once(SourceError)
            except Exception as e:        # kept and reported: a soak with one is not clean
                self.auditor.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(self.interval)

    def once(self, tolerated=()) -> list:
        """One pass; a snapshot that fails with a tolerated error counts as missed."""
        try:
            snap = self.source()
        except tolerated as e:
            self.auditor.missed += 1
            self.auditor.missed_why = (self.auditor.missed_why + [str(e)])[-5:]
            return []
        return self.auditor.observe(snap)

    def stop(self, final_pass: bool = True) -> list:
        """Stops the thread; with final_pass, one more pass after it ended (retried while the
        API server does not answer, up to a minute)."""
        from hami_sim.audit.collect import SourceError
        self._stop.set()
        self._thread.join(timeout=60)
        if not final_pass:
            return self.auditor.violations
        deadline = time.monotonic() + 60
        while True:
            try:
                self.auditor.observe(self.source())
                break
            except SourceError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        return self.auditor.violations


def report_violations(violations: list) -> str:
    """The violations, one per line (or a line saying there were none)."""
    if not violations:
        return "violations: 0"
    return f"violations: {len(violations)}\n" + "\n".join(f"  {v}" for v in violations)


__all__ = ["Auditor", "AuditLoop", "Violation", "report_violations"]
