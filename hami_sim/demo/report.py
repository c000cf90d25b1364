"""What a person sees: each step as it happens (with the time since the start), a progress
indicator while waiting (a spinner on a terminal; a plain line every few seconds otherwise,
so logs and CI stay readable), and the closing table per pod."""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Callable, Optional, Sequence, Union

from hami_sim.demo.expect import MIB, PodOutcome

SPINNER = "|/-\\"


class Reporter:
    """Thread-safe step lines and progress on one stream."""

    def __init__(self, stream=None, tty: Optional[bool] = None,
                 clock: Callable[[], float] = time.monotonic, heartbeat: float = 5.0):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock, self.heartbeat = clock, heartbeat
        self.t0 = clock()
        self._lock = threading.Lock()
        self._spinning = False

    def elapsed(self) -> float:
        """Seconds since the reporter was made."""
        return self.clock() - self.t0

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def step(self, message: str) -> None:
        """One line, stamped."""
        with self._lock:
            if self._spinning:
                self._write("\r\033[K")
            self._write(f"[{self.elapsed():5.1f}s] {message}\n")

    def line(self, text: str = "") -> None:
        """An unstamped line (tables, summaries)."""
        with self._lock:
            if self._spinning:
                self._write("\r\033[K")
            self._write(text + "\n")

    @contextlib.contextmanager
    def waiting(self, what: Union[str, Callable[[], str]]):
        """Shows progress until the block ends: what() is re-read each time it is shown."""
        describe = what if callable(what) else (lambda: what)
        stop = threading.Event()
        thread = threading.Thread(target=self._progress, args=(describe, stop), daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=2)
            with self._lock:
                if self._spinning:
                    self._write("\r\033[K")
                self._spinning = False

    def _progress(self, describe: Callable[[], str], stop: threading.Event) -> None:
        started, turn = self.clock(), 0
        period = 0.1 if self.tty else self.heartbeat
        while not stop.wait(period):
            waited = self.clock() - started
            with self._lock:
                if stop.is_set():
                    return
                if self.tty:
                    self._spinning = True
                    self._write(f"\r\033[K{SPINNER[turn % len(SPINNER)]} {describe()} "
                                f"({waited:.0f} s)")
                    turn += 1
                else:
                    self._write(f"[{self.elapsed():5.1f}s] ... {describe()} "
                                f"({waited:.0f} s so far)\n")


# The closing table ----------------------------------------------------------------------------

HEADERS = ("POD", "NODE", "GPU", "MEMORY limit/peak", "COMPUTE limit/achieved", "OUTCOME",
           "EXPECTED")


def _mib(n: int) -> str:
    return f"{n // MIB} MiB" if n else "-"


def short_type(gpu_type: str) -> str:
    """A registered type without the vendor prefix (NVIDIA-Tesla T4 -> Tesla T4)."""
    for prefix in ("NVIDIA-", "NVIDIA "):
        if gpu_type.startswith(prefix):
            return gpu_type[len(prefix):]
    return gpu_type


def gpu_cell(pod: PodOutcome) -> str:
    """Index, model and UUID prefix of each GPU of the pod."""
    return ", ".join(f"{pod.gpu_index.get(u, '?')} {short_type(pod.gpu_types.get(u, '?'))} "
                     f"({u[:12]})" for u in pod.gpus) or "-"


def outcome_cell(pod: PodOutcome) -> str:
    """What happened, in a few words."""
    if pod.node is None:
        return f"{pod.phase}: " + (pod.scheduler_message or "not scheduled")
    words = [pod.phase]
    for c in pod.containers:
        r = c.result
        if r.get("error"):
            words.append(f"{r['error']} at {r.get('used_mib')} MiB used")
        elif r.get("mode") == "info":
            words.append(f"saw {r.get('name')}")
        elif r.get("failed"):
            words.append(f"failed: {r['failed']}")
        elif c.exit_code not in (0, None):
            words.append(f"exit {c.exit_code}")
    return ", ".join(words)


def pod_row(pod: PodOutcome) -> tuple:
    """The table row of one pod."""
    mem = "/".join((_mib(sum(c.memory_limit for c in pod.containers)),
                    _mib(sum(c.memory_peak for c in pod.containers))))
    limited = [c for c in pod.containers if c.cores_limit]
    if limited:
        compute = ", ".join(f"{c.cores_limit} % / "
                            + ("?" if c.share is None else f"{c.share:.1f} %") for c in limited)
    else:
        compute = "-"
    return (pod.name, pod.node or "-", gpu_cell(pod), mem if pod.containers else "-", compute,
            outcome_cell(pod), "ok" if pod.ok else "FAILED")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in [headers, *rows]]
    return "\n".join(lines)


def checks_text(pods: Sequence[PodOutcome]) -> str:
    """Each pod's checks, one line each: clause, verdict, what was seen."""
    rows = [(pod.name, check.clause, "ok" if check.ok else "FAILED", check.detail)
            for pod in pods for check in pod.checks]
    return "\n".join("  " + line for line in format_table(("POD", "CLAUSE", "", "SEEN"),
                                                           rows).splitlines()[1:])
