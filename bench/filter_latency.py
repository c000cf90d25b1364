"""Filter latency over HTTP on the 1,213-node cluster of Alibaba's trace.

Starts the API server double and `hami-control` as processes, publishes the trace's nodes the
way node agents do (register annotation, allocatable GPUs), creates pods from the trace in a
seeded arrival order, and times kube-scheduler's filter call for each (NodeNames: every node,
as nodeCacheCapable sends them). Prints the figures as name=value lines.

Reference measured in the same run: the same pods placed in-process (parse, place, reserve in
a cluster view, as `hami-sim replay` does), so the HTTP filter is also a multiple of the
decision it wraps.

    python bench/filter_latency.py [--pods N] [--seed 42] [--policy fragaware]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from hami_control.launch import start_control
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    catalog.add_arguments(p, "--pod-list")
    p.add_argument("--pods", type=int, default=0,
                   help="filter only the first N arrivals (default: all, ~10,800 for seed 42)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--policy", default="fragaware")
    args = p.parse_args(argv)
    nodes_csv, pods_csv = catalog.resolve(args, "pod_list")
    nodes, pods = load_nodes(nodes_csv), load_pods(pods_csv)
    sequence = arrivals(pods, sum(n.gpus for n in nodes), args.seed)[:args.pods or None]
    apiserver = start_apiserver(process=True, extra_args=["--watch-queue", "100000"])
    control = None
    try:
        api = JsonHttp(apiserver.url)
        publish_nodes(api, nodes)
        control = start_control(apiserver.kubeconfig, process=True, extra_args=[
            "--no-leader-elect", "--handshake-interval", "0", "--log-level", "warning",
            "--node-scheduler-policy", args.policy, "--gpu-scheduler-policy", args.policy])
        names = [n.name for n in nodes]
        durations, placed = [], 0
        start = time.perf_counter()
        for i, trace_pod in enumerate(sequence):
            pod = control.client.admit(pod_manifest(trace_pod.pod_object(name=f"pod-{i}"),
                                                    "default"))
            status, stored = api.post("/api/v1/namespaces/default/pods", pod)
            assert status == 201, stored
            t0 = time.perf_counter()
            result = control.client.filter(stored, names)
            durations.append(time.perf_counter() - t0)
            assert not result["Error"], result["Error"]
            placed += bool(result["NodeNames"])
        wall = time.perf_counter() - start
    finally:
        if control is not None:
            control.stop()
        apiserver.stop()
    ms = [d * 1000 for d in durations]
    local = in_process_ms(nodes, pods, sequence, args.policy, args.seed)
    print_machine()
    print(f"{len(ms)} filter calls over {len(names)} nodes ({placed} placed), seed {args.seed}, "
          f"policy {args.policy}, {wall:.1f} s")
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
