"""`hami-sim replay`: replay a GPU-sharing trace through the placement engine.

    hami-sim replay [--trace openb] [--pods default] [--seeds 42-51] [--policy NAME] [--http]
        [--quotas QUOTAS.json] [--json]
    hami-sim replay --nodes NODES.csv --pods PODS.csv ...
    hami-sim replay --plot packing.png [--plot-baselines random,bestfit,fgd]

The shipped traces are found by short name (`--trace openb --pods gpushare40`, see
hami_sim/data/traces/); a path (to the artifact's other lists, or your own) works as well.

Each seed shuffles the pod list, inflates it to 130% of the GPUs and places the pods one by one
(no departures); the figure is the GPU allocation ratio when the arrived GPU demand reaches
100% of the GPUs, averaged over the seeds. Seeds run in parallel worker processes.
With --http every pod takes the real path instead (webhook, filter, bind over HTTP to a
hami-control process, against the API server double; see hami_sim/replay/http_placer.py), one
seed after another, and the summary adds pods_per_s and filter_p99_ms.
With --quotas the pods are dealt to the file's namespaces and each is kept within its
namespace's GPU quota (hami_sim/replay/quotas.py), in process.
With --plot the baselines are replayed on the same seeds too, and the packing curves go to a
PNG with the FGD paper's published figures marked at 100 % (hami_sim/replay/plot.py).
"""
import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time

from hami_control.placement.model import PlacementError
from hami_control.placement.registry import BASELINE_POLICIES, SERVER_POLICIES
from hami_sim.replay import catalog
from hami_sim.replay.arrivals import arrivals
from hami_sim.replay.quotas import load_quotas
from hami_sim.replay.run import InProcessPlacer, cluster_view, replay
from hami_sim.replay.trace import TraceError, load_nodes, load_pods

POLICIES = SERVER_POLICIES + BASELINE_POLICIES


def parse_seeds(text: str) -> list:
    """"42-51" or "42,45,50" (or a mix) -> sorted distinct seeds."""
    seeds = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError as e:
            raise ValueError(f"--seeds {text!r}: use numbers and ranges like 42-51 or 42,43") \
                from e
        if last < first:
            raise ValueError(f"--seeds {text!r}: range {part} runs backwards")
        seeds.update(range(first, last + 1))
    if not seeds:
        raise ValueError("--seeds is empty")
    return sorted(seeds)


def _arguments(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hami-sim replay", description=__doc__.split("\n")[0])
    catalog.add_arguments(parser)
    parser.add_argument("--seeds", default="42-51", help="seeds, e.g. 42-51 or 42,43 "
                        "(default 42-51)")
    parser.add_argument("--policy", default="fragaware", choices=POLICIES,
                        help="placement policy (default fragaware)")
    parser.add_argument("--ratio", type=float, default=1.3,
                        help="inflate arrivals to this multiple of the GPUs (default 1.3)")
    parser.add_argument("--split-count", type=int, default=10,
                        help="tasks that may share one GPU (deviceSplitCount, default 10)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="parallel seeds (default: up to 2)")
    parser.add_argument("--http", action="store_true",
                        help="place through hami-control over HTTP (webhook, filter, bind) "
                        "against the API server double; server policies only")
    parser.add_argument("--quotas", metavar="FILE", help="JSON namespace -> HAMi quota keys "
                        "(limits.nvidia.com/gpu, gpumem, gpucores); pods are dealt to the "
                        "namespaces in turn and kept within their quota (in process only)")
    parser.add_argument("--json", action="store_true", help="end with one JSON summary line")
    parser.add_argument("--plot", metavar="PNG", help="also replay --plot-baselines on the same "
                        "seeds (in process) and draw every packing curve into PNG, with the "
                        "published figures of a shipped pod list (needs matplotlib)")
    parser.add_argument("--plot-baselines", default=",".join(BASELINE_POLICIES),
                        metavar="P1,P2", help="policies drawn beside --policy "
                        f"(default {','.join(BASELINE_POLICIES)})")
    return parser.parse_args(argv)


def _plot(args, seeds, summary, total_gpus: int) -> None:
    """The --plot PNG: this run's curve and the baselines' on the same seeds."""
    from hami_sim.replay.plot import plot, published
    summaries = [summary]
    for policy in [p for p in args.plot_baselines.split(",") if p and p != args.policy]:
        results = run_seeds(args.nodes, args.pods, policy, seeds, args.ratio,
                            args.split_count, args.workers)
        summaries.append(summarize(argparse.Namespace(policy=policy, nodes=args.nodes,
                                                      pods=args.pods), results, 0.0, total_gpus))
        print(f"{policy}: {summaries[-1]['gpu_alloc_pct']:.2f}% at 100% arrived demand")
    title = f"{os.path.basename(args.pods)}, seeds {args.seeds}"
    print(f"wrote {plot(summaries, args.plot, title, published(args.pods))}")


def run_seed(job: tuple) -> dict:
    """One seed's replay (in a worker process): its curve, counts and per-pod timings."""
    nodes_path, pods_path, policy, seed, ratio, split, *rest = job
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    total_gpus = sum(n.gpus for n in nodes)
    view = cluster_view(nodes, split)
    quotas = load_quotas(rest[0]) if rest and rest[0] else None
    placer = InProcessPlacer(view, policy, seed, pods, quotas=quotas)
    result = replay(placer, arrivals(pods, total_gpus, seed, ratio), total_gpus, seed)
    return {**result.figures(), "overcommitted": len(view.overcommitted())}


def _mean_curve(results) -> list:
    curve = []
    for x in range(len(results[0]["curve"])):
        values = [r["curve"][x] for r in results if r["curve"][x] is not None]
        curve.append(round(statistics.fmean(values), 3) if values else None)
    return curve


def summarize(args, results, seconds: float, total_gpus: int) -> dict:
    """The JSON summary of a run."""
    pods = sum(r["pods"] for r in results)
    allocs = [r["alloc"] for r in results if r["alloc"] is not None]
    return {"policy": args.policy, "nodes": args.nodes, "pods_file": args.pods,
            "quotas": getattr(args, "quotas", None),
            "gpus": total_gpus, "seeds": [r["seed"] for r in results],
            "gpu_alloc_pct": round(statistics.fmean(allocs), 3) if allocs else None,
            "per_seed": {str(r["seed"]): r["alloc"] for r in results},
            "pods": pods, "placed": sum(r["placed"] for r in results),
            "seconds": round(seconds, 2),
            "place_ms_mean": round(sum(r["place_ms_sum"] for r in results) / max(pods, 1), 4),
            "place_ms_p99": round(max(r["place_ms_p99"] for r in results), 4),
            "overcommitted_devices": sum(r["overcommitted"] for r in results),
            **_http_figures(results), "curve": _mean_curve(results)}


def _http_figures(results) -> dict:
    """The whole path's figures of an --http run: pods per second over all seeds, the filter
    call latency (median p50, worst p99 of the seeds), binds refused."""
    if not all("pods_per_s" in r for r in results):
        return {}
    return {"pods_per_s": round(sum(r["pods"] for r in results) /
                                sum(r["seconds"] for r in results), 1),
            "filter_p50_ms": statistics.median(r["filter_p50_ms"] for r in results),
            "filter_p99_ms": max(r["filter_p99_ms"] for r in results),
            "bind_errors": sum(r["bind_errors"] for r in results)}


def _print_table(summary, results) -> None:
    print(f"policy {summary['policy']}: {summary['gpus']} GPUs, {len(results)} seed(s)")
    print(f"{'seed':>6} {'alloc@100%':>10} {'pods':>7} {'placed':>7} {'seconds':>8}")
    for r in results:
        alloc = "-" if r["alloc"] is None else f"{r['alloc']:.2f}"
        print(f"{r['seed']:>6} {alloc:>10} {r['pods']:>7} {r['placed']:>7} "
              f"{r['seconds']:>8.1f}")
    mean = summary["gpu_alloc_pct"]
    print(f"mean GPU allocation at 100% arrived demand: "
          f"{'-' if mean is None else format(mean, '.2f')}%  "
          f"(per-pod placement {summary['place_ms_mean']:.3f} ms mean, "
          f"{summary['place_ms_p99']:.3f} ms p99; {summary['seconds']:.1f} s)")
    curve = summary["curve"]
    marks = ", ".join(f"{x}%: {curve[x]:.2f}" for x in (50, 80, 90, 95, 100, 110, 120, 130)
                      if x < len(curve) and curve[x] is not None)
    print(f"allocation by arrived demand: {marks}")
    if "pods_per_s" in summary:
        print(f"over HTTP: {summary['pods_per_s']:.0f} pods/s, filter p50 "
              f"{summary['filter_p50_ms']:.2f} ms, p99 {summary['filter_p99_ms']:.2f} ms, "
              f"{summary['bind_errors']} binds refused")


def run_seeds(nodes_path, pods_path, policy, seeds, ratio=1.3, split_count=10,
              workers=1, http=False, quotas=None) -> list:
    """The per-seed results of a replay, seeds spread over `workers` processes (over HTTP:
    one after the other, each already runs an API server and hami-control)."""
    jobs = [(nodes_path, pods_path, policy, s, ratio, split_count) for s in seeds]
    if quotas:
        jobs = [job + (quotas,) for job in jobs]
    if http:
        from hami_sim.replay.http_placer import run_http_seed
        return [run_http_seed(job) for job in jobs]
    if workers > 1 and len(jobs) > 1:
        with multiprocessing.get_context("spawn").Pool(min(workers, len(jobs))) as pool:
            return pool.map(run_seed, jobs)
    return [run_seed(job) for job in jobs]


def main(argv=None) -> int:
    """Entry point of `hami-sim replay`."""
    args = _arguments(sys.argv[1:] if argv is None else argv)
    try:
        seeds = parse_seeds(args.seeds)
        args.nodes, args.pods = catalog.resolve(args)
        nodes = load_nodes(args.nodes)
        load_pods(args.pods)
        if args.ratio <= 0 or args.split_count < 1 or args.workers < 1:
            raise ValueError("--ratio must be > 0, --split-count and --workers >= 1")
        if args.quotas:
            if args.http:
                raise ValueError("--quotas replays in process; drop --http")
            load_quotas(args.quotas)
        unknown = [p for p in args.plot_baselines.split(",") if p and p not in POLICIES]
        if args.plot and unknown:
            raise ValueError(f"--plot-baselines: unknown {', '.join(unknown)}; use "
                             f"{', '.join(POLICIES)}")
        if args.http and args.policy not in SERVER_POLICIES:
            raise ValueError(f"--http: hami-control offers {', '.join(SERVER_POLICIES)}; "
                             f"{args.policy} is an in-process baseline")
    except (TraceError, ValueError) as e:
        print(f"hami-sim replay: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        results = run_seeds(args.nodes, args.pods, args.policy, seeds, args.ratio,
                            args.split_count, args.workers, args.http, args.quotas)
    except PlacementError as e:
        print(f"hami-sim replay: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:      # --http: a process that did not start, an HTTP error
        print(f"hami-sim replay: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    summary = summarize(args, results, time.perf_counter() - start, sum(n.gpus for n in nodes))
    _print_table(summary, results)
    if args.plot:
        from hami_sim.replay.plot import PlotError
        try:
            _plot(args, seeds, summary, sum(n.gpus for n in nodes))
        except PlotError as e:
            print(f"hami-sim replay --plot: {e}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(summary, separators=(",", ":")))
    return 0
