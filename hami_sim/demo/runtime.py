"""The simulated nodes' container runtime: once a node's kubelet double has admitted a pod
(Allocate answered), its containers run as local processes with what Allocate returned
(hami_sim/container.py: environment, preloaded shim, visible GPUs mapped onto the node's
simulated GPUs), init containers one after another first. When they have all exited, the pod
is reported Succeeded or Failed through the kubelet double; a pod deleted meanwhile has its
processes killed.

Emulation choices: the image is ignored (the command runs on this machine); `python3` and
`python` mean this interpreter (it has cuda-python); containers run once (no restarts).
After a container exits, what its shim's accounting file says (memory limit and peak, compute
limit) and, for workloads that report a time window, the share of the GPU's time its process
got on the simulator's timeline (ground truth) are kept with its outcome.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from hami_common import constants as C
from hami_node.shim import CacheFileError, read_usage
from hami_sim.container import ContainerError, container_env, start_container
from hami_sim.demo.cluster import tail
from hami_sim.demo.workloads import RESULT_KEY

CACHE_VAR = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
PYTHON_NAMES = ("python", "python3")


@dataclass
class ContainerRun:
    """One container: its allocation, process, log files and, once exited, its outcome."""

    namespace: str
    pod: str
    name: str
    node: str
    allocation: dict
    out_path: Path
    err_path: Path
    proc: Optional[subprocess.Popen] = None
    started_ns: int = 0
    exit_code: Optional[int] = None
    result: dict = field(default_factory=dict)      # the workload's JSON line
    usage: list = field(default_factory=list)       # DeviceUsage per device, from the shim
    timeline_share: Optional[float] = None          # percent of device time (simulator)
    error: str = ""                                 # could not start

    @property
    def key(self) -> str:
        """ns/pod/container."""
        return f"{self.namespace}/{self.pod}/{self.name}"

    @property
    def visible(self) -> list:
        """The GPU UUIDs Allocate gave it (NVIDIA_VISIBLE_DEVICES)."""
        value = (self.allocation.get("envs") or {}).get("NVIDIA_VISIBLE_DEVICES", "")
        return [u for u in value.split(",") if u.startswith("GPU-")]

    def output_lines(self) -> list:
        """Its stdout without the JSON result line."""
        try:
            text = self.out_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line and not line.startswith("{")]

    def stderr_tail(self, lines: int = 5) -> str:
        """The end of its stderr."""
        return tail(self.err_path, lines)


def workload_result(text: str) -> dict:
    """The last `{"hami-demo": {...}}` line of a workload's output ({} if none)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{") and RESULT_KEY in line:
            try:
                return json.loads(line)[RESULT_KEY]
            except (ValueError, KeyError, TypeError):
                return {}
    return {}


def local_command(argv: list) -> list:
    """The container's argv on this machine: `python3` is this interpreter."""
    if argv and argv[0] in PYTHON_NAMES:
        return [sys.executable] + list(argv[1:])
    return list(argv)


@dataclass
class PodRun:
    """A pod's containers on one node: init containers in order, then the rest together."""

    namespace: str
    name: str
    uid: str
    node: str
    init: list
    main: list
    phase: str = "Running"
    message: str = ""

    def all(self) -> list:
        """Every container, init first."""
        return self.init + self.main


class PodRuntime:
    """Runs admitted pods' containers on the simulated nodes, from a thread."""

    def __init__(self, nodes, log_dir: Path, notify: Callable[[str], None] = lambda _m: None,
                 on_finished: Callable[[PodRun], None] = lambda _r: None,
                 interval: float = 0.1):
        self.nodes, self.log_dir, self._notify = list(nodes), Path(log_dir), notify
        self._on_finished, self._interval = on_finished, interval
        self.runs: dict = {}                    # pod uid -> PodRun
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="runtime")

    def start(self) -> "PodRuntime":
        """Starts the loop."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the loop and kills every container still running."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._lock:
            runs = list(self.runs.values())
        for run in runs:
            for c in run.all():
                _kill(c)

    def pod(self, namespace: str, name: str) -> Optional[PodRun]:
        """The latest run of a pod, or None."""
        with self._lock:
            return next((r for r in reversed(list(self.runs.values()))
                         if (r.namespace, r.name) == (namespace, name)), None)

    # The loop -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            for node in self.nodes:
                if node.recorder is not None:
                    node.recorder.poll()
                self._sync(node)

    def _sync(self, node) -> None:
        kubelet = node.kubelet.kubelet
        pods = dict(kubelet.pods.pods)
        for uid, pod in pods.items():
            meta = pod["metadata"]
            if uid in self.runs or (pod.get("status") or {}).get("phase") in \
                    C.POD_FINISHED_PHASES:
                continue
            if kubelet.admitted(meta["namespace"], meta["name"]):
                run = self._new_run(node, pod, kubelet.allocations(meta["namespace"],
                                                                   meta["name"]))
                with self._lock:
                    self.runs[uid] = run
        for uid, run in list(self.runs.items()):
            if run.node != node.name or run.phase != "Running":
                continue
            if uid not in pods:
                for c in run.all():
                    _kill(c)
                run.phase, run.message = "Deleted", "the pod was deleted"
                continue
            self._advance(node, run)

    def _new_run(self, node, pod: dict, allocations) -> PodRun:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        by_name = {a.container: a.to_dict() for a in allocations}

        def runs(containers):
            out = []
            for c in containers:
                alloc = by_name.get(c["name"]) or {
                    "container": c["name"], "envs": {}, "mounts": [],
                    "command": list(c.get("command") or []), "args": list(c.get("args") or []),
                    "spec_env": {e["name"]: e.get("value", "") for e in c.get("env") or []}}
                base = self.log_dir / f"{meta['namespace']}_{meta['name']}_{c['name']}"
                out.append(ContainerRun(meta["namespace"], meta["name"], c["name"], node.name,
                                        alloc, base.with_suffix(".out"),
                                        base.with_suffix(".err")))
            return out
        return PodRun(meta["namespace"], meta["name"], meta["uid"], node.name,
                      runs(spec.get("initContainers") or []), runs(spec.get("containers") or []))

    def _advance(self, node, run: PodRun) -> None:
        for c in run.all():
            if c.proc is not None and c.exit_code is None and c.proc.poll() is not None:
                self._finished(node, c)
        pending_init = [c for c in run.init if c.exit_code is None]
        failed = [c for c in run.all() if c.exit_code not in (None, 0)]
        if failed:
            run.phase = "Failed"
            run.message = f"container {failed[0].name} exited with {failed[0].exit_code}"
            for c in run.all():
                _kill(c)
        elif pending_init:
            if pending_init[0].proc is None:
                self._start(node, pending_init[0])
            return
        elif any(c.proc is None for c in run.main):
            for c in run.main:
                if c.proc is None:
                    self._start(node, c)
            return
        elif all(c.exit_code == 0 for c in run.main):
            run.phase = "Succeeded"
        else:
            return
        node.kubelet.kubelet.set_pod_phase(run.namespace, run.name, run.phase, run.message,
                                           {c.name: c.exit_code if c.exit_code is not None
                                            else 137 for c in run.main})
        self._notify(f"pod {run.namespace}/{run.name} on {run.node}: {run.phase}"
                     + (f" ({run.message})" if run.message else ""))
        self._on_finished(run)

    def _start(self, node, c: ContainerRun) -> None:
        env_path = os.path.dirname(sys.executable) + os.pathsep + node.env.get("PATH", "")
        extra = {"PATH": env_path}
        try:
            argv = local_command(c.allocation.get("command", []) + c.allocation.get("args", []))
            if not argv:
                raise ContainerError(f"container {c.name} has no command; the demo runs "
                                     "commands, not images")
            with open(c.out_path, "wb") as out, open(c.err_path, "wb") as err:
                c.proc = start_container(c.allocation, node.env, command=argv, extra_env=extra,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        except (ContainerError, OSError) as e:
            c.error, c.exit_code = str(e), 127
            self._notify(f"container {c.key} could not start: {e}")
            return
        c.started_ns = time.monotonic_ns()
        gpus = ", ".join(u[:12] for u in c.visible) or "no GPU"
        self._notify(f"container {c.key} started on {c.node} (pid {c.proc.pid}, {gpus})")

    def _finished(self, node, c: ContainerRun) -> None:
        c.exit_code = c.proc.returncode
        try:
            c.result = workload_result(c.out_path.read_text(errors="replace"))
        except OSError:
            c.result = {}
        cache = container_env(c.allocation, node.env).get(CACHE_VAR)
        if cache and c.visible:
            try:
                c.usage = read_usage(cache).devices
            except CacheFileError:
                c.usage = []      # its processes never reached the shim
        c.timeline_share = self._timeline_share(node, c)
        said = "; ".join(c.output_lines()[-2:]) or c.stderr_tail(2)
        self._notify(f"container {c.key} exited {c.exit_code}" + (f": {said}" if said else ""))

    @staticmethod
    def _timeline_share(node, c: ContainerRun) -> Optional[float]:
        r = c.result
        if node.recorder is None or not c.visible or not {"pid", "start_ns", "end_ns"} <= set(r):
            return None
        index = node.gpu_index.get(c.visible[0])
        if index is None or r["end_ns"] <= r["start_ns"]:
            return None
        node.recorder.poll()
        return 100.0 * node.recorder.share(index, [r["pid"]], r["start_ns"], r["end_ns"])


def _kill(c: ContainerRun) -> None:
    if c.proc is None or c.proc.poll() is not None:
        return
    try:
        os.killpg(c.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    c.proc.wait(timeout=10)
