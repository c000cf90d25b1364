"""Helpers of the end-to-end tier: `hami-sim` commands as processes, and finding what is
left of them."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _interruptible() -> None:
    """In the child: Ctrl-C as a terminal gives it. A suite started in the background of a
    shell (`nohup make test &`) passes SIGINT on ignored, and Python then never raises
    KeyboardInterrupt: the Ctrl-C checks failed that way in every such run."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Command:
    """A `hami-sim ...` process in its own session, its stdout read line by line."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen([sys.executable, "-m", "hami_sim.cli", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True,
                                     env=dict(os.environ, **(env or {})),
                                     preexec_fn=_interruptible)
        self.lines: list = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        """Everything printed so far."""
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> str:
        """Waits for a line containing text; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((line for line in list(self.lines) if text in line), None)
            if hit is not None:
                return hit
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line with {text!r} after {timeout} s:\n{self.output}")

    def finish(self, timeout: float) -> int:
        """Waits for the exit status (the reader drained); an AssertionError with the
        command's output and its threads' stacks when it did not end within timeout."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGUSR1)  # faulthandler: every thread's stack
            time.sleep(1)
            raise AssertionError(f"still running {timeout} s later:\n{self.output}") from None
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        """Kills the command and, after a failed test, every process of its cluster (they run
        in sessions of their own), and removes its work directory."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        line = next((line for line in list(self.lines) if "(kubeconfig " in line), None)
        if line is None:
            return
        workdir = workdir_of(line)
        for pid in processes_mentioning(workdir):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(workdir, ignore_errors=True)


def processes_mentioning(text: str) -> list:
    """Live processes whose command line contains text (e.g. a work directory)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            words = " ".join(p.info["cmdline"] or []) + " " + " ".join(
                (p.info["environ"] or {}).values())
        except (psutil.Error, TypeError):
            continue
        if text in words and p.pid != os.getpid():
            found.append(p.pid)
    return found


def workdir_of(output_line: str) -> str:
    """The demo's work directory from its `... (kubeconfig DIR/kubeconfig)` line."""
    path = output_line.split("(kubeconfig ", 1)[1].rstrip(")")
    return str(Path(path).parent)
