"""Plot the GPU allocation ratio against arrived GPU demand, one line per policy, like the FGD
paper's figures (PNG). Runs the in-process replay, or reads saved `hami-sim replay --json`
outputs.

    python bench/replay_plot.py [--pods default|PODS.csv] [--nodes NODES.csv] \\
        [--policies random,bestfit,binpack,fgd,fragaware] [--seeds 42-51] [--out replay.png]
    python bench/replay_plot.py --from-json fgd.txt fragaware.txt --out replay.png

Besides the plot it prints each policy's allocation at 100% arrived demand as a ratio to the
baseline replayed in the same run (`--baseline`, default fgd, the best published policy).
"""
import argparse
import json
import os
import sys

from benchlib import print_machine, ratio
from hami_sim.replay import catalog
from hami_sim.replay.cli import parse_seeds, run_seeds, summarize
from hami_sim.replay.plot import plot, published


def _summaries(args) -> list:
    if args.from_json:
        out = []
        for path in args.from_json:
            with open(path) as f:
                out.append(json.loads(f.read().strip().splitlines()[-1]))
        return out
    args.nodes, args.pods = catalog.resolve(args)
    seeds = parse_seeds(args.seeds)
    out = []
    for policy in args.policies.split(","):
        results = run_seeds(args.nodes, args.pods, policy, seeds, workers=args.workers)
        ns = argparse.Namespace(policy=policy, nodes=args.nodes, pods=args.pods)
        summary = summarize(ns, results, 0.0, 0)
        print(f"{policy}: {summary['gpu_alloc_pct']:.2f}% at 100% arrived demand")
        out.append(summary)
    return out


def compare(summaries, baseline: str) -> None:
    """Each policy's allocation at 100% as a ratio to the baseline's of the same run."""
    base = next((s for s in summaries if s["policy"] == baseline), None)
    if base is None or base["gpu_alloc_pct"] is None:
        print(f"(no {baseline} in this run: nothing to compare with)")
        return
    for s in summaries:
        if s is not base and s["gpu_alloc_pct"] is not None:
            ratio(f"{s['policy']}_vs_{baseline}", s["gpu_alloc_pct"], base["gpu_alloc_pct"],
                  f"% of GPUs ({s['policy']})", f"% ({baseline})")


def main(argv=None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    catalog.add_arguments(parser)
    parser.add_argument("--policies", default="random,bestfit,binpack,fgd,fragaware")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--from-json", nargs="*")
    parser.add_argument("--out", default="replay.png")
    parser.add_argument("--title", default="")
    parser.add_argument("--baseline", default="fgd",
                        help="the policy the others are compared with (default fgd)")
    args = parser.parse_args(argv)
    print_machine()
    summaries = _summaries(args)
    compare(summaries, args.baseline)
    title = args.title or os.path.basename(summaries[0].get("pods_file") or args.pods)
    marks = published(summaries[0].get("pods_file") or args.pods)
    print(f"wrote {plot(summaries, args.out, title, marks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
