"""Load on the simulated GPUs: the `throttle_worker` C program (c/loadgen) started as real
processes, for the compute limiter's benchmark and tests. The caller supplies the environment
(the simulator's, plus the shim's for a limited container) and owns the processes: each runs
in its own session, and `stop()` ends it (also when the caller failed halfway)."""
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import List, Mapping, Optional

from hami_sim.gpu.env import SimGpuError, lib_dir

MODES = ("batch", "long", "sync", "graph", "routes", "threads")


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

    def wait_ready(self) -> None:
        """Blocks until the worker is set up; RuntimeError (with its stderr) if it failed."""
        line = self.proc.stdout.readline().strip()
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
