"""Held-out validation: does fragaware beat FGD on workload mixes it was not developed on?

Builds synthetic pod lists from the same cluster's pods (more or fewer sharing pods, more
multi-GPU pods, more model-constrained pods, heavier CPU-only pods, sub-samples) and replays
them with fresh seeds, printing the allocation at 100% arrived demand per policy and, in the
last column, the last policy's as a ratio to the first's (fragaware / fgd by default).

    python bench/replay_holdout.py [--trace openb] [--pods default] [--nodes CSV] \\
        [--seeds 100-102] [--policies fgd,fragaware] [--mixes all]
"""
import argparse
import csv
import os
import random
import statistics
import sys
import tempfile

from benchlib import print_machine
from hami_sim.replay import catalog
from hami_sim.replay.cli import parse_seeds, run_seeds
from hami_sim.replay.trace import load_nodes, load_pods

COLUMNS = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"]


def _kind(p) -> str:
    if not p.num_gpu:
        return "cpu"
    if p.gpu_milli < 1000:
        return "share"
    return "whole" if p.num_gpu == 1 else "multi"


def _resample(pods, weights: dict, rng: random.Random, size: int) -> list:
    """`size` pods drawn with replacement so that kinds appear with the given weights."""
    by_kind = {}
    for p in pods:
        by_kind.setdefault(_kind(p), []).append(p)
    kinds = [k for k in weights if by_kind.get(k)]
    return [rng.choice(by_kind[k]) for k in rng.choices(kinds, [weights[k] for k in kinds],
                                                         k=size)]


def _mixes(pods, nodes, rng) -> dict:
    counts = {}
    for p in pods:
        counts[_kind(p)] = counts.get(_kind(p), 0) + 1
    gpu_pods = sum(v for k, v in counts.items() if k != "cpu")
    cpu = counts.get("cpu", 0)
    models = [n.model for n in nodes if n.model]
    mixes = {}
    for share in (0.2, 0.6, 0.8):
        whole_rest = 1 - share
        w = {"cpu": cpu, "share": share * gpu_pods,
             "whole": whole_rest * gpu_pods * counts["whole"] / (counts["whole"] +
                                                              counts.get("multi", 0)),
             "multi": whole_rest * gpu_pods * counts.get("multi", 0) / (counts["whole"] +
                                                                      counts.get("multi", 0))}
        mixes[f"gpushare{int(share * 100)}"] = _resample(pods, w, rng, len(pods))
    for multi in (0.3, 0.5):
        rest = gpu_pods * (1 - multi)
        w = {"cpu": cpu, "multi": multi * gpu_pods,
             "share": rest * counts["share"] / (counts["share"] + counts["whole"]),
             "whole": rest * counts["whole"] / (counts["share"] + counts["whole"])}
        mixes[f"multigpu{int(multi * 100)}"] = _resample(pods, w, rng, len(pods))
    for spec in (0.2, 0.33):
        out = []
        for p in pods:
            if p.num_gpu and rng.random() < spec:
                p = p.__class__(p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli,
                                (rng.choice(models),))
            out.append(p)
        mixes[f"gpuspec{int(spec * 100)}"] = out
    mixes["cpu-heavy"] = [p.__class__(p.name, p.cpu_milli * 2, p.memory_mib, p.num_gpu,
                                      p.gpu_milli, p.gpu_spec) if not p.num_gpu else p
                          for p in pods]
    mixes["subsample60"] = rng.sample(pods, int(0.6 * len(pods)))
    return mixes


def _write(path: str, pods) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for i, p in enumerate(pods):
            writer.writerow([f"{p.name}-{i}", p.cpu_milli, p.memory_mib, p.num_gpu,
                             p.gpu_milli, "|".join(p.gpu_spec)])


def main(argv=None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    catalog.add_arguments(parser)
    parser.add_argument("--seeds", default="100-102")
    parser.add_argument("--policies", default="fgd,fragaware")
    parser.add_argument("--mixes", default="all")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    args.nodes, args.pods = catalog.resolve(args)
    nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    mixes = _mixes(pods, nodes, random.Random(7))
    wanted = list(mixes) if args.mixes == "all" else args.mixes.split(",")
    policies, seeds = args.policies.split(","), parse_seeds(args.seeds)
    print_machine()
    last_vs_first = f"{policies[-1]}/{policies[0]}"
    print(f"{'mix':<12}" + "".join(f"{p:>11}" for p in policies) + f"{last_vs_first:>18}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in wanted:
            path = os.path.join(tmp, f"{name}.csv")
            _write(path, mixes[name])
            row = []
            for policy in policies:
                results = run_seeds(args.nodes, path, policy, seeds, workers=args.workers)
                row.append(statistics.fmean(r["alloc"] for r in results))
            print(f"{name:<12}" + "".join(f"{v:>11.2f}" for v in row)
                  + f"{row[-1] / row[0]:>18.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
