"""The demo's examples through the real cluster: each pod is created through the real API
server (our webhook mutates it), scheduled by the real kube-scheduler through our extender,
admitted by the real kubelet (Allocate on hami-node) and run by containerd + runc; then each is
checked against its `demo.hami.io/expect` with the demo's own checks (hami_sim.demo.expect).

    result = run_real_scenario(cluster, load_examples(), Reporter())
    result.ok, result.pods
"""
from __future__ import annotations

import json
import time

from hami_common import constants as C
from hami_node.plugin.layout import CACHE_FILE, HostLayout
from hami_node.shim import CacheFileError, read_usage
from hami_sim.demo.expect import ContainerOutcome, PodOutcome
from hami_sim.demo.runtime import workload_result
from hami_sim.demo.scenario import (ScenarioError, ScenarioResult, checked, new_outcome,
                                    pod_gpus)

DEFAULT_TIMEOUT_S = 150.0
FINISHED = tuple(C.POD_FINISHED_PHASES)


def read_pod(v1, namespace: str, name: str) -> dict:
    """The pod as JSON (no model conversion)."""
    return json.loads(v1.read_namespaced_pod(name, namespace, _preload_content=False).data)


def unschedulable_message(pod: dict) -> str:
    """The PodScheduled=False message kube-scheduler wrote ('' while none)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                and cond.get("reason") == "Unschedulable":
            return cond.get("message") or ""
    return ""


def container_log(v1, pod: dict, container: str, previous: bool = False) -> str:
    """A container's output through the API server's logs API (what `kubectl logs` reads:
    the API server asks kubelet), '' when there is none (not started, or gone); previous:
    the run before the last restart (`kubectl logs --previous`)."""
    from kubernetes.client.rest import ApiException
    meta = pod["metadata"]
    try:
        resp = v1.read_namespaced_pod_log(meta["name"], meta["namespace"], container=container,
                                          previous=previous, _preload_content=False)
    except ApiException as e:
        if e.status in (400, 404):      # waiting to start, or no such (previous) container
            return ""
        raise
    return resp.data.decode(errors="replace")


def example_groups(examples) -> list:
    """The examples in order, in groups: one tied to the previous by `same-gpu-as` joins its
    group. The demo's two nodes keep its pods apart by node; here one node has all four GPUs,
    and which GPU a pod gets depends on which pods still run. So a group is created together
    and the next only once it has settled: the placements the examples expect then do not
    depend on how fast this machine runs them."""
    groups: list = []
    for ex in examples:
        last = groups[-1] if groups else []
        names = {e.name for e in last}
        if ex.expectation.same_gpu_as in names or \
                any(e.expectation.same_gpu_as == ex.name for e in last):
            last.append(ex)
        else:
            groups.append([ex])
    return groups


class RealScenario:
    """One run of the examples on a RealCluster."""

    def __init__(self, cluster, examples, reporter):
        self.cluster, self.examples, self.reporter = cluster, list(examples), reporter
        self.v1 = cluster.core_v1
        node = cluster.node
        self.types = {d.id: d.type for d in node.devices}
        self.index = {d.id: d.index for d in node.devices}
        self.layout = HostLayout(node.shim_dir)
        self.denied: dict = {}

    def run(self, timeout: float) -> ScenarioResult:
        """Creates the pods group by group (example_groups), waits for each group to settle,
        then collects and checks them all."""
        start = time.monotonic()
        timed_out = False
        for group in example_groups(self.examples):
            self._create(group)
            left = timeout - (time.monotonic() - start)
            if not self._wait(group, max(left, 1.0)):
                timed_out = True
                break
        return ScenarioResult(self._collect(), time.monotonic() - start, timed_out)

    def _create(self, examples) -> None:
        from kubernetes.client.rest import ApiException
        for ex in examples:
            try:
                self.v1.create_namespaced_pod(ex.namespace, ex.pod)
                self.reporter.step(f"{ex.namespace}/{ex.name} created: {ex.shows}")
            except ApiException as e:
                self.denied[ex.name] = f"{e.status} {e.reason}: {e.body}"
                self.reporter.step(f"{ex.namespace}/{ex.name}: not admitted: {e.reason}")

    def _settled(self, ex) -> bool:
        if ex.name in self.denied:
            return True
        pod = read_pod(self.v1, ex.namespace, ex.name)
        if (pod.get("status") or {}).get("phase") in FINISHED:
            return True
        return ex.expectation.outcome == "pending" and bool(unschedulable_message(pod))

    def _wait(self, examples, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not all(self._settled(ex) for ex in examples):
            problems = self.cluster.problems()
            if problems:
                raise ScenarioError("; ".join(problems))
            if time.monotonic() > deadline:
                self.reporter.step(f"gave up waiting after {timeout:.0f} s")
                return False
            time.sleep(0.5)
        return True

    def _collect(self) -> list:
        return checked([self._outcome(ex) for ex in self.examples], self.denied)

    def _outcome(self, ex) -> PodOutcome:
        out = new_outcome(ex, self.types, self.index, self.denied)
        if out.phase == "Denied":
            return out
        pod = read_pod(self.v1, ex.namespace, ex.name)
        out.phase = (pod.get("status") or {}).get("phase", "Pending")
        out.node = (pod.get("spec") or {}).get("nodeName")
        message = unschedulable_message(pod)
        if message and out.node is None:
            # kube-scheduler folds the extender's FailedNodes into the message, per node.
            out.scheduler_message = message
            out.failed_nodes = {self.cluster.spec.name: message}
        gpus = pod_gpus(pod)
        specs = (pod.get("spec") or {}).get("containers") or []
        offset = len((pod.get("spec") or {}).get("initContainers") or [])
        for i, spec in enumerate(specs):
            devices = gpus[offset + i] if offset + i < len(gpus) else []
            out.containers.append(self._container(pod, spec["name"], devices))
        return out

    def _container(self, pod: dict, name: str, devices: list) -> ContainerOutcome:
        status = next((s for s in (pod.get("status") or {}).get("containerStatuses") or []
                       if s.get("name") == name), {})
        exit_code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
        text = container_log(self.v1, pod, name)
        lines = [line for line in text.splitlines() if line and not line.startswith("{")]
        cache = self.layout.container_dir(pod["metadata"]["uid"], name) / CACHE_FILE
        try:
            usage = read_usage(str(cache)).devices
        except CacheFileError:
            usage = []
        first = usage[0] if usage else None
        result = workload_result(text)
        return ContainerOutcome(name, exit_code, [d.uuid for d in devices],
                                first.limit if first else 0, first.peak if first else 0,
                                first.sm_limit if first else 0, result.get("share"), result,
                                lines[-1] if lines else "")


def run_real_scenario(cluster, examples, reporter,
                      timeout: float = DEFAULT_TIMEOUT_S) -> ScenarioResult:
    """Runs the examples on the real cluster; the structured result."""
    return RealScenario(cluster, examples, reporter).run(timeout)
