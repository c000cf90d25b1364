"""Filter latency over HTTP on the 1,213-node cluster of Alibaba's trace.

Starts the API server double and `hami-control` as processes, publishes the trace's nodes the
way node agents do (register annotation, allocatable GPUs), creates pods from the trace in a
seeded arrival order, and times kube-scheduler's filter call for each (NodeNames: every node,
as nodeCacheCapable sends them). Prints the figures as name=value lines.

Reference measured in the same run: the same pods placed in-process (parse, place, reserve in
a cluster view, as `hami-sim replay` does), so the HTTP filter is also a multiple of the
decision it wraps.

    python bench/filter_latency.py [--pods N] [--seed 42] [--policy fragaware]
    python bench/filter_latency.py --compare-quotas [--pods N]

--compare-quotas runs two clusters side by side in one run, hami-control with --no-quotas and
with quotas on and a ResourceQuota on the pods' namespace (limits far above what the trace
asks, so that both place alike and only the quota's cost differs); each pod is filtered on both,
in alternating order, and the p99 of each and their ratio are printed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from hami_sim.control_launch import start_control
from hami_sim.extender_client import JsonHttp
from hami_sim.launch import start_apiserver
from hami_sim.replay import catalog
from hami_sim.replay.arrivals import arrivals
from hami_sim.replay.http_placer import pod_manifest, publish_nodes
from hami_sim.replay.run import InProcessPlacer, cluster_view
from hami_sim.replay.trace import load_nodes, load_pods

from benchlib import print_machine, ratio


def percentile(values, q: float) -> float:
    """The q-th percentile (nearest rank) of values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered))) - 1))]


def in_process_ms(nodes, pods, sequence, policy: str, seed: int) -> list:
    """Per-pod ms of the same arrivals placed in-process on the same nodes."""
    placer = InProcessPlacer(cluster_view(nodes), policy, seed, pods)
    for i, trace_pod in enumerate(sequence):
        placer.place(trace_pod.pod_object(name=f"pod-{i}"))
    return [d * 1000 for d in placer.durations]
NO_LIMIT = {"limits.nvidia.com/gpu": "1000000", "limits.nvidia.com/gpumem": "1000000000",
            "limits.nvidia.com/gpucores": "1000000000"}


class Cluster:
    """The API server double with the trace's nodes, and hami-control, both as processes."""

    def __init__(self, nodes, policy: str, quotas: bool):
        self.apiserver = start_apiserver(process=True, extra_args=["--watch-queue", "100000"])
        self.control = None
        try:
            self.api = JsonHttp(self.apiserver.url)
            publish_nodes(self.api, nodes)
            if quotas:
                status, body = self.api.post("/api/v1/namespaces/default/resourcequotas", {
                    "metadata": {"name": "gpu"}, "spec": {"hard": NO_LIMIT}})
                assert status == 201, body
            self.control = start_control(self.apiserver.kubeconfig, process=True, extra_args=[
                "--no-leader-elect", "--handshake-interval", "0", "--log-level", "warning",
                "--quotas" if quotas else "--no-quotas",
                "--node-scheduler-policy", policy, "--gpu-scheduler-policy", policy])
        except BaseException:
            self.stop()
            raise
        self.durations, self.placed = [], 0

    def filter(self, trace_pod, name: str, names) -> None:
        """Creates the pod and times its filter call."""
        pod = self.control.client.admit(pod_manifest(trace_pod.pod_object(name=name),
                                                     "default"))
        status, stored = self.api.post("/api/v1/namespaces/default/pods", pod)
        assert status == 201, stored
        t0 = time.perf_counter()
        result = self.control.client.filter(stored, names)
        self.durations.append(time.perf_counter() - t0)
        assert not result["Error"], result["Error"]
        self.placed += bool(result["NodeNames"])

    def stop(self) -> None:
        """Stops both processes."""
        if self.control is not None:
            self.control.stop()
        self.apiserver.stop()


def _figures(label: str, durations) -> dict:
    ms = [d * 1000 for d in durations]
    return {f"{label}p50_ms": round(percentile(ms, 50), 3),
            f"{label}p99_ms": round(percentile(ms, 99), 3),
            f"{label}mean_ms": round(statistics.fmean(ms), 3), f"{label}max_ms": round(max(ms), 3)}


def compare_quotas(nodes, sequence, policy: str) -> dict:
    """Filter figures with quotas off and on, side by side (alternating), and their ratio."""
    clusters = []
    try:
        clusters = [Cluster(nodes, policy, False)]
        clusters.append(Cluster(nodes, policy, True))
        names = [n.name for n in nodes]
        for i, trace_pod in enumerate(sequence):
            for cluster in clusters[::(-1) ** i]:
                cluster.filter(trace_pod, f"pod-{i}", names)
    finally:
        for cluster in clusters:
            cluster.stop()
    off, on = clusters
    assert off.placed == on.placed, (off.placed, on.placed)
    figures = {**_figures("filter_quotas_off_", off.durations),
               **_figures("filter_quotas_on_", on.durations), "placed": on.placed}
    figures["p99_ratio_on_off"] = round(figures["filter_quotas_on_p99_ms"] /
                                        figures["filter_quotas_off_p99_ms"], 3)
    return figures


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    catalog.add_arguments(p, "--pod-list")
    p.add_argument("--pods", type=int, default=0,
                   help="filter only the first N arrivals (default: all, ~10,800 for seed 42)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--policy", default="fragaware")
    p.add_argument("--compare-quotas", action="store_true",
                   help="quotas off and on side by side in one run (see above)")
    args = p.parse_args(argv)
    nodes_csv, pods_csv = catalog.resolve(args, "pod_list")
    nodes, pods = load_nodes(nodes_csv), load_pods(pods_csv)
    sequence = arrivals(pods, sum(n.gpus for n in nodes), args.seed)[:args.pods or None]
    if args.compare_quotas:
        start = time.perf_counter()
        figures = compare_quotas(nodes, sequence, args.policy)
        print(f"{len(sequence)} pods filtered on two {len(nodes)}-node clusters, quotas off and "
              f"on, seed {args.seed}, policy {args.policy}, {time.perf_counter() - start:.1f} s")
        for key, value in figures.items():
            print(f"{key}={value}")
        print(json.dumps({**figures, "pods": len(sequence), "seed": args.seed}))
        return 0
    cluster = Cluster(nodes, args.policy, False)
    names = [n.name for n in nodes]
    start = time.perf_counter()
    try:
        for i, trace_pod in enumerate(sequence):
            cluster.filter(trace_pod, f"pod-{i}", names)
        wall = time.perf_counter() - start
    finally:
        cluster.stop()
    ms = [d * 1000 for d in cluster.durations]
    local = in_process_ms(nodes, pods, sequence, args.policy, args.seed)
    print_machine()
    print(f"{len(ms)} filter calls over {len(names)} nodes ({cluster.placed} placed), "
          f"seed {args.seed}, policy {args.policy}, {wall:.1f} s")
    print(f"filter_p50_ms={percentile(ms, 50):.2f}")
    print(f"filter_p99_ms={percentile(ms, 99):.2f}")
    print(f"filter_mean_ms={statistics.fmean(ms):.2f}")
    print(f"filter_max_ms={max(ms):.2f}")
    print(f"in_process_p50_ms={percentile(local, 50):.3f}")
    ratio("filter_p50", percentile(ms, 50), percentile(local, 50), "over HTTP",
          "in-process (parse + place + reserve)", " ms")
    ratio("filter_p99", percentile(ms, 99), percentile(local, 99), "over HTTP", "in-process",
          " ms")
    print(json.dumps({"filter_p50_ms": round(percentile(ms, 50), 3),
                      "filter_p99_ms": round(percentile(ms, 99), 3), "pods": len(ms),
                      "nodes": len(names), "seed": args.seed, "policy": args.policy}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
