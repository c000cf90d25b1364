"""Per-decision latency of the placement engine on the full trace cluster (1,213 nodes).

Loads the cluster to a given share of arrived demand with the trace's own pods, then times
`Engine.place` for: every pod of the replay up to that point (mean, p50, p99), and single
decisions on the loaded cluster for a pod shape never seen before (cold: every node evaluated)
and the same pod again (warm), with and without explanations of refused nodes. References
measured in the same run: the replay's mean per-pod decision, and the warm decision for the
cold one.

    python bench/placement_latency.py [--pods default|PODS.csv] [--nodes CSV] [--load 90]
"""
import argparse
import statistics
import sys
import time

from hami_common.request import parse_pod
from hami_control.placement import Engine, PlacementConfig
from benchlib import print_machine, ratio
from hami_sim.replay import catalog
from hami_sim.replay.arrivals import arrivals
from hami_sim.replay.run import InProcessPlacer, cluster_view
from hami_sim.replay.trace import TracePod, load_nodes, load_pods


def _percentile(values, q):
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def main(argv=None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    catalog.add_arguments(parser)
    parser.add_argument("--load", type=float, default=90.0,
                        help="arrived demand (%% of GPUs) to load the cluster to")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    args.nodes, args.pods = catalog.resolve(args)
    nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    gpus = sum(n.gpus for n in nodes)
    view = cluster_view(nodes)
    placer = InProcessPlacer(view, "fragaware", args.seed, pods)
    arrived = 0
    for i, pod in enumerate(arrivals(pods, gpus, args.seed)):
        arrived += pod.demand_milli
        if arrived > args.load / 100 * gpus * 1000:
            break
        placer.place(pod.pod_object(name=f"{pod.name}-{i}"))
    ms = [d * 1000 for d in placer.durations]
    print_machine()
    print(f"{len(view)} nodes, {gpus} GPUs, loaded to {args.load:.0f}% arrived demand "
          f"({len(ms)} pods)")
    print(f"per pod (parse + place + reserve): mean {statistics.fmean(ms):.3f} ms, "
          f"p50 {_percentile(ms, 0.5):.3f} ms, p99 {_percentile(ms, 0.99):.3f} ms, "
          f"max {max(ms):.1f} ms")
    for explain, cpu in ((False, 4321), (True, 4322)):
        engine = Engine(PlacementConfig(resource_fit=True, explain=explain),
                        registry=placer.engine.registry)
        took = {}
        for label in ("cold", "warm"):
            request = parse_pod(TracePod("probe", cpu, 5000, 1, 370).pod_object())
            start = time.perf_counter()
            decision = engine.place(view, request)
            took[label] = (time.perf_counter() - start) * 1000
            print(f"one decision, {label}, explain={explain}: {took[label]:.2f} ms "
                  f"({'placed on ' + decision.node if decision.ok else 'refused'})")
        ratio(f"cold_explain_{explain}", took["cold"], statistics.fmean(ms), "cold decision",
              "the replay's mean per pod", " ms")
        ratio(f"cold_vs_warm_explain_{explain}", took["cold"], took["warm"], "cold", "warm",
              " ms")
        huge = parse_pod(TracePod("huge", 200000 + cpu, 5000, 8, 1000).pod_object())
        start = time.perf_counter()
        decision = engine.place(view, huge)
        print(f"one refused 8-GPU decision, explain={explain}: "
              f"{(time.perf_counter() - start) * 1000:.2f} ms, {len(decision.failed)} reasons")
    return 0


if __name__ == "__main__":
    sys.exit(main())
