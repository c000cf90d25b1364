"""The trace replay over HTTP (`hami-sim replay --http`): every pod takes the real path.

The API server double and `hami-control` run as processes; the trace's nodes are published the
way node agents and kubelet publish them (register annotation; CPU, memory and GPU capacity).
For each pod, the placer plays the other parts of the cluster:
- the API server: the webhook call, then the pod created as the webhook mutated it;
- kube-scheduler (nodeCacheCapable): its own CPU/memory fit gives the NodeNames, then
  hami-control's filter, then hami-control's bind to the node chosen. Every pod names
  hami-scheduler, the CPU-only ones too: in the replay, as in the paper's simulator, one
  policy places all pods (hami-control places a CPU-only pod of its own on the GPU node
  where it strands the least);
- the node agent: `bind-phase: success` and the node lock released, so the next bind on that
  node is not refused.
Filters are sequential (as kube-scheduler's scheduling cycle is), so the decisions are those of
a one-pod-at-a-time scheduler. Around them, what does not change a decision runs concurrently,
as it does in a cluster: pods are admitted and created a few arrivals ahead (`admit_ahead`),
and binds with the node agent's part run behind on a few threads, one bind at a time per node
(kube-scheduler's binding cycle is asynchronous too).
"""
from __future__ import annotations

import json
import multiprocessing
import queue
import statistics
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numpy as np

from hami_common import constants as C
from hami_common import node_register
from hami_common.request import parse_pod
from hami_sim.extender_client import ExtenderClient, JsonHttp

MERGE = "application/merge-patch+json"
IMAGE = "trace/workload:1"


class ReplayHttpError(RuntimeError):
    """The cluster answered something the replay cannot go on with."""


def publish_nodes(api: JsonHttp, nodes, split_count: int = 10) -> None:
    """Each trace node as a Node: GPUs registered, CPU/memory/GPU capacity and allocatable."""
    for n in nodes:
        devices = n.devices(split_count)
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": n.name, "annotations": {C.ANNO_NODE_REGISTER: node_register.encode(devices)}}}
        _expect(api.post("/api/v1/nodes", body), 201, f"create node {n.name}")
        capacity = {"cpu": f"{n.cpu_milli}m", "memory": f"{n.memory_mib}Mi",
                    C.RESOURCE_GPU: str(len(devices) * split_count), "pods": "1000"}
        _expect(api.post(f"/api/v1/nodes/{n.name}/status",
                         {"status": {"capacity": capacity, "allocatable": capacity}},
                         "PATCH", MERGE), 200, f"node {n.name} status")


def pod_manifest(pod: dict, namespace: str) -> dict:
    """A trace pod dict as a user submits it (apiVersion, kind, an image, the namespace), for
    hami-scheduler."""
    manifest = {"apiVersion": "v1", "kind": "Pod", **pod}
    manifest["metadata"] = dict(pod.get("metadata") or {}, namespace=namespace)
    manifest["spec"] = dict(pod.get("spec") or {}, schedulerName=C.SCHEDULER_NAME)
    manifest["spec"]["containers"] = [dict(c, image=c.get("image") or IMAGE)
                                      for c in manifest["spec"].get("containers") or []]
    return manifest


def _expect(answer: tuple, status: int, what: str):
    if answer[0] != status:
        raise ReplayHttpError(f"{what}: HTTP {answer[0]} {str(answer[1])[:300]}")
    return answer[1]


class ResourceFit:
    """kube-scheduler's CPU/memory fit over the trace nodes: the NodeNames it would send."""

    def __init__(self, nodes):
        self.names = np.array([n.name for n in nodes])
        self.position = {n.name: i for i, n in enumerate(nodes)}
        self.cpu = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.mem = np.array([n.memory_mib for n in nodes], dtype=np.int64)

        self._last = (None, "[]")

    def fitting(self, cpu: int, mem: int) -> str:
        """The JSON list of the nodes with that much CPU and memory free (kube-scheduler, in
        Go, pays little for it; the encoding is kept while the list stays the same)."""
        mask = (self.cpu >= cpu) & (self.mem >= mem)
        if self._last[0] is None or not np.array_equal(mask, self._last[0]):
            self._last = (mask, json.dumps(self.names[mask].tolist()))
        return self._last[1]

    def take(self, node: str, cpu: int, mem: int) -> None:
        """Counts a pod bound to node."""
        i = self.position[node]
        self.cpu[i] -= cpu
        self.mem[i] -= mem


def _create(api: JsonHttp, control: ExtenderClient, pod: dict, namespace: str) -> dict:
    """The webhook, then the pod created as the webhook mutated it."""
    manifest = control.admit(pod_manifest(pod, namespace), namespace)
    return _expect(api.post(f"/api/v1/namespaces/{namespace}/pods", manifest), 201,
                   "create pod")


def admit_ahead(api_url: str, control_url: str, namespace: str, pods: list, out) -> None:
    """The API server's part, in its own process: each pod through the webhook and created,
    in arrival order, into the queue `out` (which bounds how far ahead it runs)."""
    api, control = JsonHttp(api_url), ExtenderClient(control_url)
    for pod in pods:
        try:
            out.put((pod["metadata"]["name"], _create(api, control, pod, namespace)))
        except (ReplayHttpError, OSError) as e:
            out.put((pod["metadata"]["name"], f"{type(e).__name__}: {e}"))
            return


def bind_behind(api_url: str, control_url: str, namespace: str, jobs, results,
                in_flight: int = 4) -> None:
    """kube-scheduler's binding cycle and the node agent's part, in their own process: each
    (pod, uid, node, wants GPU) from `jobs` bound on a few threads, one bind at a time per
    node, then for a GPU pod bind-phase success and the lock released. Puts the list of
    errors on `results` at the end (a None job)."""
    api, control = JsonHttp(api_url), ExtenderClient(control_url)
    node_locks, errors = defaultdict(threading.Lock), []

    def bind(name: str, uid: str, node: str, gpu: bool) -> None:
        with node_locks[node]:     # a second bind would be refused by the lock anyway
            try:
                answer = control.bind(namespace, name, uid, node)
                if answer["Error"]:
                    errors.append(f"{name}: {answer['Error']}")
                    return
                if gpu:
                    finish_allocation(api, namespace, name, node)
            except (ReplayHttpError, OSError, ValueError) as e:
                errors.append(f"{name}: {type(e).__name__}: {e}")

    with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="bind") as pool:
        for job in iter(jobs.get, None):
            pool.submit(bind, *job)
    results.put(errors)


def finish_allocation(api: JsonHttp, namespace: str, name: str, node: str) -> None:
    """The node agent's part. It knows the lock is this pod's (the bind just took it and
    nothing else binds on this node meanwhile), so it removes it without reading it."""
    _expect(api.post(f"/api/v1/namespaces/{namespace}/pods/{name}", {
        "metadata": {"annotations": {C.ANNO_BIND_PHASE: C.BIND_PHASE_SUCCESS}}},
        "PATCH", MERGE), 200, f"bind-phase of {name}")
    _expect(api.post(f"/api/v1/nodes/{node}", {"metadata": {"annotations": {
        C.ANNO_NODE_LOCK: None}}}, "PATCH", MERGE), 200, f"unlock {node}")


class HttpPlacer:
    """The replay's Placer over HTTP. This process plays kube-scheduler's scheduling cycle
    (resource fit, filter); two helper processes run the API server's part ahead of it and
    the binding cycle behind it, so that the timed filter calls share this process (and its
    GIL) with nothing else."""

    def __init__(self, api_url: str, control_url: str, nodes, pods: list,
                 namespace: str = "trace", depth: int = 16, in_flight: int = 2):
        self.api, self.control = JsonHttp(api_url), ExtenderClient(control_url)
        self.namespace, self.fit = namespace, ResourceFit(nodes)
        self.durations: list = []            # filter calls, seconds
        self.bind_errors: list = []
        _expect(self.api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": namespace}}),
                201, f"create namespace {namespace}")
        ctx = multiprocessing.get_context("spawn")
        self._ahead, self._jobs, self._results = ctx.Queue(depth), ctx.Queue(), ctx.Queue()
        self._workers = [
            ctx.Process(target=admit_ahead, name="admit-ahead", daemon=True,
                        args=(api_url, control_url, namespace, pods, self._ahead)),
            ctx.Process(target=bind_behind, name="bind-behind", daemon=True,
                        args=(api_url, control_url, namespace, self._jobs, self._results,
                              in_flight))]
        for worker in self._workers:
            worker.start()

    def _next(self, q, worker, what: str, timeout: float = 120.0):
        """The next item of q, which `worker` fills; a clear error, not a wait for the
        timeout, when that worker has died (a helper's crash never hangs the replay)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return q.get(timeout=0.5)
            except queue.Empty:
                if not worker.is_alive():
                    raise ReplayHttpError(f"the {worker.name} helper exited (status "
                                          f"{worker.exitcode}) before {what}") from None
                if time.monotonic() > deadline:
                    raise ReplayHttpError(f"no {what} within {timeout:.0f} s") from None

    def _stored(self, pod: dict) -> dict:
        name, stored = self._next(self._ahead, self._workers[0],
                                  f"pod {pod['metadata']['name']} was created")
        if isinstance(stored, str):
            raise ReplayHttpError(f"creating pod {name} failed: {stored}")
        if name != pod["metadata"]["name"]:
            raise ReplayHttpError(f"pods arrive out of order: {name} created, "
                                  f"{pod['metadata']['name']} placed")
        return stored

    def place(self, pod: dict) -> Optional[str]:
        """Places one pod (already admitted and created ahead); the node its filter chose."""
        stored = self._stored(pod)
        request = parse_pod(stored)
        body = (f'{{"Pod":{json.dumps(stored)},"NodeNames":'
                f'{self.fit.fitting(request.cpu_milli, request.memory_mib)}}}').encode()
        start = time.perf_counter()
        status, raw = self.control.request("POST", "/filter", body,
                                           {"Content-Type": "application/json"})
        self.durations.append(time.perf_counter() - start)
        if status != 200:
            raise ReplayHttpError(f"filter: HTTP {status} {raw[:300]!r}")
        result = json.loads(raw)
        if result["Error"]:
            raise ReplayHttpError(f"filter {stored['metadata']['name']}: {result['Error']}")
        if not result["NodeNames"]:
            return None
        node = result["NodeNames"][0]
        self.fit.take(node, request.cpu_milli, request.memory_mib)
        self._jobs.put((stored["metadata"]["name"], stored["metadata"]["uid"], node,
                        request.wants_gpu))
        return node

    def drain(self, timeout: float = 300.0) -> None:
        """Waits for the binds in flight and collects their errors."""
        self._jobs.put(None)
        try:
            self.bind_errors = self._next(self._results, self._workers[1],
                                          "the binds in flight finished", timeout)
        finally:
            self.close()

    def close(self) -> None:
        """Stops the helper processes (at once if they still run)."""
        for worker in self._workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
                worker.join()


def filter_stats(durations) -> dict:
    """p50/p99 of the filter calls in ms."""
    ms = sorted(d * 1000 for d in durations)
    if not ms:
        return {"filter_p50_ms": None, "filter_p99_ms": None}
    return {"filter_p50_ms": round(statistics.median(ms), 3),
            "filter_p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 3)}


def overcommitted_devices(api: JsonHttp, nodes, namespace: str, split_count: int) -> int:
    """GPUs whose pods' allocation annotations add up to more than the GPU has."""
    from hami_common import pod_devices
    capacity = {d.id: d for n in nodes for d in n.devices(split_count)}
    pods = _expect(api.post(f"/api/v1/namespaces/{namespace}/pods", None, "GET"), 200,
                   "list pods")["items"]
    usage: dict = {}
    for pod in pods:
        value = (pod["metadata"].get("annotations") or {}).get(C.ANNO_DEVICES_ALLOCATED, "")
        for ctr in pod_devices.decode(value):
            for d in ctr:
                u = usage.setdefault(d.uuid, [0, 0, 0])
                u[0], u[1], u[2] = u[0] + 1, u[1] + d.usedmem, u[2] + d.usedcores
    return sum(1 for uuid, (slots, mem, cores) in usage.items()
               if slots > capacity[uuid].count or mem > capacity[uuid].devmem
               or cores > capacity[uuid].devcore)


def run_http_seed(job: tuple) -> dict:
    """One seed over HTTP, in a fresh API server double and hami-control; the same keys as
    the in-process run, plus pods_per_s, filter_p50_ms/filter_p99_ms, bind_errors and the CPU
    seconds each party used."""
    from hami_sim.control_launch import start_control
    from hami_sim.launch import start_apiserver
    from hami_sim.replay.trace import load_nodes, load_pods
    nodes_path, pods_path, policy, seed, ratio, split = job
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    apiserver = start_apiserver(process=True, extra_args=["--watch-queue", "100000"])
    try:
        publish_nodes(JsonHttp(apiserver.url), nodes, split)
        control = start_control(apiserver.kubeconfig, process=True, extra_args=[
            "--no-leader-elect", "--handshake-interval", "0", "--log-level", "warning",
            "--node-scheduler-policy", policy, "--gpu-scheduler-policy", policy])
        try:
            return _replay_over(apiserver, control, nodes, pods, seed, ratio, split)
        finally:
            control.stop()
    finally:
        apiserver.stop()


def _replay_over(apiserver, control, nodes, pods, seed: int, ratio: float, split: int) -> dict:
    from hami_sim.replay.arrivals import arrivals
    from hami_sim.replay.run import replay
    total_gpus = sum(n.gpus for n in nodes)
    sequence = arrivals(pods, total_gpus, seed, ratio)
    # The same pods, named as replay() names them, admitted ahead of placement.
    placer = HttpPlacer(apiserver.url, control.url, nodes,
                        [p.pod_object(name=f"{p.name}-{i}") for i, p in enumerate(sequence)])
    try:
        parties = {"apiserver": apiserver.process.pid, "control": control.process.pid,
                   "replay": None}
        base = {name: _cpu_seconds(pid) for name, pid in parties.items()}
        start = time.perf_counter()
        result = replay(placer, sequence, total_gpus, seed)
        placer.drain()
        seconds = time.perf_counter() - start
        cpu = {name: round(_cpu_seconds(pid) - base[name], 1) for name, pid in parties.items()}
    finally:
        placer.close()
    # place_ms_* time the filter calls here; seconds include draining the binds in flight.
    return {**result.figures(), "seconds": seconds,
            "overcommitted": overcommitted_devices(placer.api, nodes, placer.namespace, split),
            "pods_per_s": result.pods / seconds, "bind_errors": len(placer.bind_errors),
            "cpu_seconds": cpu, **filter_stats(result.durations)}


def _cpu_seconds(pid: Optional[int]) -> float:
    """CPU seconds of a process (this one: with its finished helper processes)."""
    import psutil
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system + times.children_user + times.children_system
