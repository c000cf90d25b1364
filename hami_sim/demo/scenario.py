"""The demo's scenario on a running SimCluster: submit the example pods through the webhook,
let the scheduler double place them through hami-control, the kubelet doubles call Allocate
on hami-node, run their containers, and check each pod against its `demo.hami.io/expect`.

    with SimCluster(record_busy=True) as cluster:
        result = run_scenario(cluster, load_examples(), Reporter())
    result.ok, result.pods       # PodOutcome per example, with its checks
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Optional

from hami_common import constants as C
from hami_common import pod_devices
from hami_common.errors import HamiFormatError
from hami_sim.demo.admission import AdmissionDenied, submit
from hami_sim.demo.expect import Check, ContainerOutcome, PodOutcome, evaluate
from hami_sim.demo.report import Reporter
from hami_sim.demo.runtime import PodRuntime
from hami_sim.demo.scheduler import RefusalNews, SchedulerDouble

DEFAULT_TIMEOUT_S = 90.0
HEALTH_EVERY_S = 1.0


class ScenarioError(RuntimeError):
    """The cluster broke down during the scenario (a piece died)."""


@dataclass
class ScenarioResult:
    """Every example pod's outcome, and how long the scenario took."""

    pods: list = field(default_factory=list)
    wall_s: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Whether every pod met its expectation."""
        return bool(self.pods) and all(p.ok for p in self.pods)

    def pod(self, name: str) -> Optional[PodOutcome]:
        """The outcome of the example pod called name."""
        return next((p for p in self.pods if p.name == name), None)


def pod_gpus(pod: dict) -> list:
    """Per container, the GPUs the scheduler gave it (hami.io/vgpu-devices-allocated)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        C.ANNO_DEVICES_ALLOCATED, "")
    try:
        return [list(ctr) for ctr in pod_devices.decode(value)]
    except HamiFormatError:
        return []


def checked(outcomes: list, denied: dict) -> list:
    """The outcomes, each with its checks (a pod not admitted fails `admitted`)."""
    by_name = {p.name: p for p in outcomes}
    for pod in outcomes:
        pod.checks = ([Check("admitted", False, denied[pod.name])] if pod.name in denied
                      else evaluate(pod, by_name))
    return outcomes


def new_outcome(ex, types: dict, index: dict, denied: dict) -> PodOutcome:
    """An example's outcome before anything is read of its pod (phase Denied if it was not
    admitted)."""
    out = PodOutcome(ex.name, ex.namespace, ex.expectation, ex.shows, gpu_types=types,
                     gpu_index=index)
    if ex.name in denied:
        out.phase = "Denied"
    return out


class Scenario:
    """One run of the examples on a cluster (see run_scenario)."""

    def __init__(self, cluster, examples, reporter: Reporter):
        self.cluster, self.examples, self.reporter = cluster, list(examples), reporter
        self.v1 = cluster.core_v1
        self.types = {d.id: d.type for n in cluster.nodes for d in n.devices}
        self.index = {d.id: d.index for n in cluster.nodes for d in n.devices}
        self.denied: dict = {}
        self._refusals = RefusalNews()
        self.scheduler = SchedulerDouble(self.v1, cluster.control.client, notify=self._scheduled,
                                         backoff=(1.0, 10.0))
        self.runtime = PodRuntime(cluster.nodes, cluster.root / "containers",
                                  notify=reporter.step)

    def run(self, timeout: float) -> ScenarioResult:
        """Submits, waits for every pod to settle (or the timeout), collects and checks."""
        start = time.monotonic()
        self.scheduler.start()
        self.runtime.start()
        try:
            self._submit_all()
            timed_out = not self._wait(timeout)
        finally:
            self.scheduler.stop()
            self.runtime.stop()
        pods = self._collect()
        return ScenarioResult(pods, time.monotonic() - start, timed_out)

    # Steps --------------------------------------------------------------------------------

    def _submit_all(self) -> None:
        self.reporter.step(f"submitting {len(self.examples)} example pods: the API server "
                           "sends each to hami-control's /webhook (AdmissionReview v1) and "
                           "creates it as mutated")
        for ex in self.examples:
            try:
                created = submit(self.v1, ex.pod, ex.namespace)
            except AdmissionDenied as e:
                self.denied[ex.name] = str(e)
                self.reporter.step(f"{ex.namespace}/{ex.name}: not admitted: {e}")
                continue
            limits = {k: v for c in created["spec"]["containers"]
                      for k, v in ((c.get("resources") or {}).get("limits") or {}).items()
                      if k.startswith("nvidia.com/")}
            asks = ", ".join(f"{k.split('/')[1]}={v}" for k, v in limits.items())
            self.reporter.step(f"{ex.namespace}/{ex.name} created (schedulerName "
                               f"{created['spec'].get('schedulerName')}; {asks}): {ex.shows}")

    def _scheduled(self, attempt) -> None:
        if not attempt.scheduled:
            line = self._refusals.line(attempt)
            if line:
                self.reporter.step(line)
            return
        ns, name = attempt.key.split("/", 1)
        raw = self.v1.read_namespaced_pod(name, ns, _preload_content=False).data
        gpus = [d for ctr in pod_gpus(json.loads(raw)) for d in ctr]
        said = ", ".join(f"GPU {self.index.get(d.uuid, '?')} ({d.uuid[:12]}) {d.usedmem} MiB"
                         + (f" {d.usedcores} % cores" if d.usedcores else "") for d in gpus)
        self.reporter.step(f"{attempt.key}: filter chose {attempt.node} ({said}); bound "
                           "through the extender")

    def _settled(self, ex) -> bool:
        if ex.name in self.denied:
            return True
        run = self.runtime.pod(ex.namespace, ex.name)
        if run is not None:
            return run.phase != "Running"
        attempt = self.scheduler.last_attempt(ex.namespace, ex.name)
        return ex.expectation.outcome == "pending" and attempt is not None \
            and not attempt.scheduled

    def _wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout

        def progress() -> str:
            done = sum(self._settled(ex) for ex in self.examples)
            return f"{done}/{len(self.examples)} pods settled"
        checked = 0.0
        with self.reporter.waiting(progress):
            while not all(self._settled(ex) for ex in self.examples):
                if time.monotonic() - checked > HEALTH_EVERY_S:
                    self._healthy()
                    checked = time.monotonic()
                if time.monotonic() > deadline:
                    self.reporter.step(f"gave up waiting after {timeout:.0f} s")
                    return False
                time.sleep(0.1)
        self._healthy()
        return True

    def _healthy(self) -> None:
        problems = self.cluster.problems()
        if problems:
            raise ScenarioError("; ".join(problems))

    # Outcomes -----------------------------------------------------------------------------

    def _collect(self) -> list:
        return checked([self._outcome(ex) for ex in self.examples], self.denied)

    def _outcome(self, ex) -> PodOutcome:
        out = new_outcome(ex, self.types, self.index, self.denied)
        if out.phase == "Denied":
            return out
        attempt = self.scheduler.last_attempt(ex.namespace, ex.name)
        if attempt is not None and not attempt.scheduled:
            out.scheduler_message, out.failed_nodes = attempt.message, attempt.failed_nodes
        raw = self.v1.read_namespaced_pod(ex.name, ex.namespace, _preload_content=False).data
        pod = json.loads(raw)
        out.phase = (pod.get("status") or {}).get("phase", "Pending")
        out.node = (pod.get("spec") or {}).get("nodeName")
        run = self.runtime.pod(ex.namespace, ex.name)
        if run is not None:
            out.containers = [container_outcome(c) for c in run.main]
        return out


def _env_int(value: str) -> int:
    digits = value.rstrip("mM")
    return int(digits) if digits.isdigit() else 0


def container_outcome(c) -> ContainerOutcome:
    """A finished ContainerRun as the checks see it: limits and peak from its shim file (else
    from Allocate's environment), the achieved share from the simulator's timeline (else the
    workload's own figure)."""
    envs = c.allocation.get("envs") or {}
    usage = c.usage[0] if c.usage else None
    memory_limit = usage.limit if usage else _env_int(envs.get(
        "CUDA_DEVICE_MEMORY_LIMIT_0", "")) << 20
    cores = usage.sm_limit if usage else _env_int(envs.get("CUDA_DEVICE_SM_LIMIT", ""))
    share = c.timeline_share if c.timeline_share is not None else c.result.get("share")
    lines = c.output_lines()
    return ContainerOutcome(c.name, c.exit_code, c.visible, memory_limit,
                            usage.peak if usage else 0, cores, share, dict(c.result),
                            lines[-1] if lines else c.stderr_tail(1))


def run_scenario(cluster, examples, reporter: Reporter,
                 timeout: float = DEFAULT_TIMEOUT_S) -> ScenarioResult:
    """Runs the examples on the cluster; the structured result (never raises for a pod that
    misbehaves; ScenarioError when a piece of the cluster died)."""
    return Scenario(cluster, examples, reporter).run(timeout)
