"""Scheduling throughput on the real kube-scheduler: our extender, and our DRA driver's
claims allocated by kube-scheduler itself, each vs kube-scheduler alone.

The openb trace's 1,213 GPU nodes become Node objects (the register annotation hami-node would
write; CPU, memory and GPU capacity, nvidia.com/gpucores and gpumem-percentage as plain
extended resources too); no kubelet is needed to schedule. Then, in one run, the same pods of
the default list are created as fast as the API server takes them twice: once for
hami-scheduler (deploy/'s kube-scheduler + our extender; this script plays hami-node's part
after each bind: bind-phase success, node lock released), once for the default kube-scheduler
(GPU resources as plain extended resources); between them, with the DRAConsumableCapacity gate
on, the same pods as claims of hami-py's DRA driver for the default kube-scheduler (bench/
dra_bench.py: the same scheduler configuration, so the same client QPS, as the last run),
and once more for hami-scheduler, whose prioritize extender gives kube-scheduler our node
scores for the claims (the pods carry their ask as the webhook's opt-in records it).
Printed: pods/s from the first creation to the
last binding, per-pod latency creation -> bound (p50/p99), and the ratio; where the time
goes (hami-control's own time per call, the API server's writes per pod, each component's
CPU seconds, decisions vs bindings); packing (GPUs in use per GPU pod) against the in-process
replay of the same pods (hami_sim.replay's placer), computed in the same run.

    sudo .venv/bin/python bench/k8s_throughput.py [--pods 1000] [--threads 32] [--keep]
        [--control-arg=--lock-wait=0 ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from benchlib import print_machine
from dra_bench import (clear_claims, dra_pods, packing_claims, profile_scheduler,
                       publish_slices)
from k8s_counters import apiserver_counters, cpu_seconds, server_times
from k8s_report import report

from hami_common import constants as C
from hami_common import node_register, pod_devices
from hami_control.cluster.kube import KubeApi
from hami_sim.realcluster.cluster import RealCluster
from hami_sim.realcluster.control_plane import start_controller_manager
from hami_sim.replay import catalog
from hami_sim.replay.run import InProcessPlacer, cluster_view
from hami_sim.replay.trace import load_nodes, load_pods

SPLIT = 10


def load_gpu_nodes() -> list:
    """The trace's GPU nodes."""
    return [n for n in load_nodes(catalog.nodes_path()) if n.gpus]
WAIT_S = 30.0          # a run ends when no pod has been bound for this long


def node_object(n) -> tuple:
    """(Node, status) for one trace node."""
    devices = n.devices(SPLIT)
    capacity = {"cpu": f"{n.cpu_milli}m", "memory": f"{n.memory_mib}Mi", "pods": "1000",
                C.RESOURCE_GPU: str(len(devices) * SPLIT),
                C.RESOURCE_CORES: str(100 * len(devices)),
                C.RESOURCE_MEM_PERCENTAGE: str(100 * len(devices))}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": n.name, "annotations": {C.ANNO_NODE_REGISTER: node_register.encode(devices)}}}
    return node, {"status": {"capacity": capacity, "allocatable": capacity}}


def publish(v1, nodes, threads: int) -> None:
    """Creates the nodes and sets their capacity."""
    def one(n):
        node, status = node_object(n)
        v1.create_node(node)
        v1.patch_node_status(n.name, status)
        # The API server taints a new node not-ready; no kubelet (and no node controller)
        # runs here to lift it.
        v1.patch_node(n.name, {"spec": {"taints": []}})
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, nodes))


def pod_body(trace_pod, namespace: str, scheduler: str) -> dict:
    """The trace pod for one scheduler (a bare pause image: nothing runs it). Both runs go
    through the API server's admission, deploy/'s webhook included: it sends the first run's
    pods to hami-scheduler and ignores the second's (label hami.io/webhook: ignore)."""
    pod = trace_pod.pod_object(namespace=namespace)
    pod["spec"]["schedulerName"] = scheduler
    if scheduler != C.SCHEDULER_NAME:      # kube-scheduler alone: our webhook keeps off it
        pod["metadata"]["labels"] = {C.LABEL_WEBHOOK: C.LABEL_WEBHOOK_IGNORE}
    pod["spec"]["containers"][0]["image"] = "hami-k8s.local/pause:1"
    limits = pod["spec"]["containers"][0]["resources"].get("limits")
    if limits:       # extended resources: requests equal to limits
        pod["spec"]["containers"][0]["resources"]["requests"].update(limits)
    return {"apiVersion": "v1", "kind": "Pod", **pod}


class BindWatch:
    """Watches a namespace's pods from a thread, noting when each gets a node; with agent,
    plays hami-node's part for each (bind-phase success, node lock released). Raw JSON
    (hami-control's KubeApi), not the client's models: decoding those costs milliseconds per
    event, and a slow stand-in node agent would hold the node locks longer than hami-node."""

    def __init__(self, v1, namespace: str, want: int, agent: bool):
        self.v1, self.api = v1, KubeApi(v1.api_client)
        self.namespace, self.want, self.agent = namespace, want, agent
        self.bound: dict = {}
        self.nodes: dict = {}           # pod name -> node
        self.decided: dict = {}         # pod name -> when hami-control's decision was seen
        self.errors: list = []
        self._finish = ThreadPoolExecutor(8)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "BindWatch":
        """Starts watching."""
        self._thread.start()
        return self

    def join(self) -> None:
        """Waits until every pod is bound, or none has been for WAIT_S."""
        self._thread.join()
        self._finish.shutdown(wait=True)
        if self.errors:
            raise RuntimeError(self.errors[0])

    def _node_agent(self, name: str, node: str) -> None:
        try:
            self.api.patch_pod_annotations(self.namespace, name,
                                           {C.ANNO_BIND_PHASE: C.BIND_PHASE_SUCCESS})
            self.api.patch_node_annotations(node, {C.ANNO_NODE_LOCK: None})
        except Exception as e:      # noqa: BLE001  (reported at join)
            self.errors.append(f"node agent for {name}: {type(e).__name__}: {e}")

    def _run(self) -> None:
        try:
            _, version = namespace_pods(self.v1, self.namespace)
            last = time.monotonic()
            while len(self.bound) < self.want and time.monotonic() - last < WAIT_S:
                for _, pod in self.api.watch("pods", version, 5,
                                             f"metadata.namespace={self.namespace}"):
                    meta = pod.get("metadata") or {}
                    version = meta.get("resourceVersion") or version
                    name, node = meta.get("name"), (pod.get("spec") or {}).get("nodeName")
                    if name not in self.decided and \
                            C.ANNO_VGPU_NODE in (meta.get("annotations") or {}):
                        self.decided[name] = time.monotonic()
                    if node and name not in self.bound:
                        self.bound[name] = last = time.monotonic()
                        self.nodes[name] = node
                        if self.agent:
                            self._finish.submit(self._node_agent, name, node)
                    if len(self.bound) == self.want:
                        return
        except Exception as e:      # noqa: BLE001  (a dead watcher would look like 0 pods/s)
            self.errors.append(f"watch: {type(e).__name__}: {e}")


def namespace_pods(v1, namespace: str) -> tuple:
    """(pods as JSON, resourceVersion) of a namespace, in one unpaged list. (KubeApi.list
    pages the all-namespaces list; with a metadata.namespace field selector the real API
    server 1.34 resumes its continue token at the wrong key: 170 pods of 120.)"""
    body = json.loads(v1.list_namespaced_pod(namespace, _preload_content=False).data)
    return body["items"], body["metadata"]["resourceVersion"]


def packing_real(v1, namespace: str) -> dict:
    """GPUs in use and pods holding GPUs, from the pods' devices-allocated annotations."""
    pods, _ = namespace_pods(v1, namespace)
    gpus, holding = set(), 0
    for pod in pods:
        value = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            C.ANNO_DEVICES_ALLOCATED)
        if not value or not (pod.get("spec") or {}).get("nodeName"):
            continue
        used = {d.uuid for ctr in pod_devices.decode(value) for d in ctr}
        holding += bool(used)
        gpus |= used
    return {"gpus": len(gpus), "pods": holding}


def packing_replay(nodes, pods) -> dict:
    """The same pods placed in-process (hami-sim replay's placer: parse, the default policy,
    kube-scheduler's CPU/memory fit, reserve), in the trace's order."""
    placer = InProcessPlacer(cluster_view(nodes, SPLIT), "fragaware", 0, pods, timed=False)
    for p in pods:
        placer.place(p.pod_object(namespace="replay"))
    gpus, holding = set(), 0
    for r in placer.view.reservations():
        used = {d.uuid for ctr in r.devices for d in ctr}
        holding += bool(used)
        gpus |= used
    return {"gpus": len(gpus), "pods": holding}


def run(c, pods, namespace: str, scheduler: str, threads: int, agent: bool,
        dra: bool = False, profile=None, scores: bool = False, finalizer: bool = True) -> dict:
    """Creates the pods for scheduler (with `dra`, claims of our DRA driver instead of
    nvidia.com/* resources); the figures once each is bound (or WAIT_S passed without a
    binding)."""
    v1 = c.core_v1
    v1.create_namespace({"metadata": {"name": namespace}})
    v1.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    if dra:
        templates, bodies = dra_pods(pods, namespace, [(d.type, d.id, d.devmem)
                                                       for n in load_gpu_nodes()
                                                       for d in n.devices(SPLIT)],
                                     scheduler if scores else "", finalizer)
        c.apply(templates)
    else:
        bodies = [pod_body(p, namespace, scheduler) for p in pods]
    watcher = BindWatch(v1, namespace, len(pods), agent).start()
    time.sleep(1.0)
    created = {}

    def create(body):
        created[body["metadata"]["name"]] = time.monotonic()
        v1.create_namespaced_pod(namespace, body)
    counters, cpu = apiserver_counters(c), cpu_seconds(c)
    profiling = profile_scheduler(c, profile[0], profile[1]) if profile else None
    start = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, bodies))
    print(f"{namespace}: {len(pods)} pods created in {time.monotonic() - start:.1f} s",
          file=sys.stderr)
    watcher.join()
    if profiling:
        profiling.join()
    bound = watcher.bound
    counters = {k: v - counters.get(k, 0.0) for k, v in apiserver_counters(c).items()}
    cpu = {name: round(t - cpu.get(name, 0.0), 1) for name, t in cpu_seconds(c).items()}
    packing = packing_claims(c, namespace) if dra else \
        packing_real(v1, namespace) if agent else None
    served = server_times(c.control) if agent or scores else None
    if len(bound) < len(pods):      # say why the rest stayed unbound
        left = next(p for p in v1.list_namespaced_pod(namespace).items
                    if not p.spec.node_name)
        print(f"{namespace}: {len(pods) - len(bound)} pods unbound, e.g. {left.metadata.name}: "
              f"{[(x.type, x.reason, x.message) for x in left.status.conditions or []]}",
              file=sys.stderr)
    lat = sorted(bound[n] - created[n] for n in bound)
    span = (max(bound.values()) - start) if bound else float("inf")
    decided = watcher.decided
    if decided:     # the scheduling cycles alone (filter), before the binds' node locks
        waits = [bound[n] - decided[n] for n in decided if n in bound]
        print(f"{namespace}: {len(decided)} decisions in {max(decided.values()) - start:.1f} s, "
              f"{len(bound)} bindings in {span:.1f} s; bind after decision p50 "
              f"{1000 * statistics.median(waits):.0f} ms", file=sys.stderr)
    return {"scheduler": scheduler, "pods": len(pods), "bound": len(bound),
            "pods_per_s": len(bound) / span if bound else 0.0,
            "p50_ms": 1000 * statistics.median(lat) if lat else None,
            "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else None,
            "packing": packing, "hami_control": served,
            "apiserver_writes_per_pod": round(counters["writes"] / len(pods), 2),
            "apiserver_reads_per_pod": round(counters["reads"] / len(pods), 2),
            "apiserver_writes_per_pod_by": {k[2:]: round(v / len(pods), 2)
                                            for k, v in sorted(counters.items())
                                            if k.startswith("w:") and v >= len(pods) / 100},
            "webhook_ms_at_apiserver": round(1000 * counters["webhook_s"] /
                                             counters["webhook_calls"], 2)
            if counters["webhook_calls"] else None, "cpu_s": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=1000, help="first N pods of the default list")
    # "As fast as the API server takes them": with 8 threads the extender run's creations were
    # bound by the webhook's round trip (60-130 ms at the API server on a loaded 2-core machine:
    # 1,000 pods took 23-32 s, 3-6 s without the webhook), not by the API server. A ReplicaSet
    # or Job controller creates in batches of up to 500.
    ap.add_argument("--threads", type=int, default=32, help="threads creating pods")
    ap.add_argument("--control-arg", action="append", default=[], metavar="FLAG",
                    help="one more hami-control flag (repeat), e.g. --control-arg=--threads=32")
    ap.add_argument("--no-dra", dest="dra", action="store_false",
                    help="leave out the DRA run (kube-scheduler allocating claims of our driver)")
    ap.add_argument("--no-dra-prioritize", dest="scores", action="store_false",
                    help="leave out the DRA run through hami-scheduler's prioritize extender")
    ap.add_argument("--no-extender", dest="extender", action="store_false",
                    help="leave out the extender run (DRA and kube-scheduler alone only)")
    ap.add_argument("--dra-without-finalizer", dest="bare", action="store_true",
                    help="one more DRA run whose claims lack the webhook's label, so that "
                         "kube-scheduler adds its delete-protection finalizer itself (the "
                         "write the webhook saves)")
    ap.add_argument("--nodes-to-score", type=int, default=None, metavar="PERCENT",
                    help="percentageOfNodesToScore in every kube-scheduler's configuration "
                         "(default: kube-scheduler's adaptive one)")
    ap.add_argument("--controller-qps", type=int, default=None, metavar="QPS",
                    help="kube-controller-manager's --kube-api-qps (burst twice that) for the "
                         "resourceclaim controller of the DRA run (default: its own, 20)")
    ap.add_argument("--profile", type=int, default=0, metavar="SECONDS",
                    help="save a CPU profile of kube-scheduler over the DRA run's first "
                         "SECONDS (dra-scheduler.pprof in the work folder; implies --keep)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work folder (components' logs) and print where it is")
    args = ap.parse_args()
    print_machine()
    nodes = load_nodes(catalog.nodes_path())
    pods = [p for p in load_pods(catalog.pods_path())][:args.pods]
    c = RealCluster(step=lambda m: print(m, file=sys.stderr), scheduling_only=True,
                    keep=args.keep or bool(args.profile), dra=args.dra)
    if args.nodes_to_score is not None:
        c.scheduler_settings = {"percentageOfNodesToScore": args.nodes_to_score}
        print(f"percentageOfNodesToScore: {args.nodes_to_score} in every kube-scheduler",
              flush=True)
    dra = ours = scored = bare = None
    c.control_args = ["--handshake-interval", "0", "--log-level", "warning",
                      *args.control_arg]
    try:
        c.start()
        t0 = time.monotonic()
        publish(c.core_v1, nodes, args.threads)
        print(f"{len(nodes)} nodes published in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        if args.dra:
            publish_slices(c, nodes, args.threads)
            qps = args.controller_qps
            start_controller_manager(c, controllers="resourceclaim-controller", extra_args=(
                [f"--kube-api-qps={qps}", f"--kube-api-burst={2 * qps}"] if qps else []))
            if qps:
                print(f"kube-controller-manager: --kube-api-qps={qps}", flush=True)
        if args.extender:
            ours = run(c, pods, "bench-extender", C.SCHEDULER_NAME, args.threads, agent=True)
        if args.dra:
            profile = (args.profile, c.root / "dra-scheduler.pprof") if args.profile else None
            dra = run(c, pods, "bench-dra", "default-scheduler", args.threads, agent=False,
                      dra=True, profile=profile)
            last = "bench-dra"
            if args.bare:
                clear_claims(c, last, args.threads)     # the same GPUs free again
                bare = run(c, pods, last := "bench-dra-bare", "default-scheduler",
                           args.threads, agent=False, dra=True, finalizer=False)
            if args.scores:
                clear_claims(c, last, args.threads)
                scored = run(c, pods, "bench-dra-scores", C.SCHEDULER_NAME, args.threads,
                             agent=False, dra=True, scores=True)
        alone = run(c, pods, "bench-default", "default-scheduler", args.threads, agent=False)
    finally:
        c.stop()
        if args.keep or args.profile:
            print(f"logs kept in {c.logs}", file=sys.stderr)
    report(ours, alone, dra, packing_replay(nodes, pods), len(pods), scored, bare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
