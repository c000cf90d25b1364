"""Load on the simulated GPUs: the `throttle_worker` C program (c/loadgen) started as real
processes, for the compute limiter's benchmark and tests. The caller supplies the environment
(the simulator's, plus the shim's for a limited container) and owns the processes: each runs
in its own session, and `stop()` ends it (also when the caller failed halfway)."""
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional

from hami_sim.gpu.env import SimGpuError, lib_dir
from hami_sim.gpu.timeline import BusyRecorder

MODES = ("batch", "long", "sync", "graph", "routes", "threads", "mixed", "grow", "persistent",
         "shapes", "tiny")


def worker_path() -> Path:
    """The built load generator; SimGpuError when it is not built."""
    path = lib_dir() / "throttle_worker"
    if not path.is_file():
        raise SimGpuError(f"{path} is not built; run `make -C c`")
    return path


class Worker:
    """One throttle_worker process: started, ready, then stopped for its result."""

    def __init__(self, mode: str, seconds: float, env: Mapping[str, str], device: int = 0,
                 threads: Optional[int] = None):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        argv = [str(worker_path()), mode, f"{seconds:g}", str(device)]
        argv += [str(threads)] if threads else []
        self.proc = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Blocks until the worker is set up; RuntimeError (with its stderr) if it failed or
        said nothing within timeout seconds."""
        from hami_sim.launch import read_first_line
        line = read_first_line(self.proc, timeout)
        if line != "ready":
            self.stop()
            raise RuntimeError(f"throttle_worker did not start: {line!r} "
                               f"{self.proc.stderr.read().strip()}")

    def stop(self, timeout: float = 10) -> dict:
        """Ends the worker (SIGTERM, then SIGKILL of its session); its JSON result or {}."""
        try:
            self.proc.send_signal(signal.SIGTERM)
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out = ""
        except ValueError:  # already stopped and its pipes closed
            return {}
        finally:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        lines = [line for line in (out or "").splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}


def start_all(workers: List[Worker]) -> None:
    """Waits until every worker is ready (stopping all of them if one failed)."""
    try:
        for w in workers:
            w.wait_ready()
    except RuntimeError:
        for w in workers:
            w.stop()
        raise


@dataclass
class Tenant:
    """Workers that share one limit (one container) on one simulated GPU, and what the
    device's timeline says they got in the measured window (filled in by run_round)."""
    name: str
    device: int
    workers: List[Worker]
    share: float = 0.0         # fraction of the window's device time
    busy_ns: int = 0
    bins: List[float] = field(default_factory=list)  # shares per 100 ms bin
    results: List[dict] = field(default_factory=list)  # the workers' own JSON lines

    @property
    def pids(self) -> List[int]:
        return [w.pid for w in self.workers]


def run_round(tenants: List[Tenant], state_dir: Path, settle: float, window: float,
              at_edges: Optional[Callable[[], Any]] = None, bin_ns: int = 100_000_000):
    """Starts every tenant's workers, lets them settle, measures the window from the device
    timelines and stops them all (also on failure). Returns what `at_edges()` answered at the
    window's start and end (for figures read elsewhere, e.g. the shim's shared files)."""
    workers = [w for t in tenants for w in t.workers]
    edges = []
    try:
        start_all(workers)
        t0 = time.monotonic_ns()
        recorder = BusyRecorder(state_dir, sorted({t.device for t in tenants}))
        recorder.run_in_background(0.02)  # 20 us kernel loops log ~25,000 intervals a second
        try:
            time.sleep(settle)
            edges.append(at_edges() if at_edges else None)
            time.sleep(window)
            edges.append(at_edges() if at_edges else None)
        finally:
            recorder.stop()
    finally:
        results = [w.stop() for w in workers]
    start, end = t0 + int(settle * 1e9), t0 + int((settle + window) * 1e9)
    for t in tenants:
        t.busy_ns = recorder.busy_ns(t.device, t.pids, start, end)
        t.share = t.busy_ns / (end - start)
        t.bins = recorder.shares_by_bin(t.device, t.pids, start, end, bin_ns)
        t.results = [results[workers.index(w)] for w in t.workers]
    if recorder.lost:
        raise RuntimeError(f"{recorder.lost} busy intervals were overwritten before they were "
                           "read: poll more often")
    return edges
