"""What kube-scheduler's DRA placement costs in packing, and what our node scores recover.

With GPUs as DRA devices, kube-scheduler scores no device: a node scores by its default CPU
and memory plugins, and within the node the DRA allocator takes the first devices that fit
(the `kubedra` baseline of hami_control/placement/baselines.py). The openb trace is replayed
the FGD paper's way (hami-sim replay: seeded arrivals up to 130 % of the GPUs, the GPU
allocation at 100 % arrived demand) with, side by side on the same arrivals:
  ours       fragaware nodes, fragaware GPUs (hami-scheduler's extender path)
  dra        kubedra nodes, first-fit GPUs (kube-scheduler alone with our DRA driver)
  recovered  fragaware nodes, first-fit GPUs (our node scores given to kube-scheduler, e.g.
             by an extender's prioritize, while its allocator still picks the device)
  prioritize what hami-control's prioritize extender gives kube-scheduler, modelled as
             kube-scheduler combines it: of the nodes that fit it samples (its adaptive
             percentageOfNodesToScore: 497 of the 1,213 trace nodes, from a rotating start),
             and picks the highest kubedra score + 10 x weight x our level (placement/dra.py's
             priorities: 0-10, the best node alone at 10), ties at random; first-fit GPUs.
             At the weight deploy/ ships (20), at weight 1, and at weight 20 with
             `percentageOfNodesToScore: 5` (100 nodes; docs/dra.md advises it for throughput).
  sampled    the same with weight 0: kube-scheduler alone, sampling as it does.
Printed: each one's allocation %, and their ratios to ours.

    python bench/dra_placement.py [--seeds 42-44] [--pods default] [--weight 20]
"""
import argparse
import random
import statistics
import sys

from benchlib import print_machine, ratio
from hami_control.placement import Engine, PlacementConfig, Reservation
from hami_control.placement.dra import priorities
from hami_control.placement.registry import PolicyRegistry
from hami_common.request import parse_pod
from hami_sim.replay import catalog
from hami_sim.replay.arrivals import arrivals
from hami_sim.replay.cli import parse_seeds
from hami_sim.replay.run import cluster_view, replay
from hami_sim.replay.trace import load_nodes, load_pods

VARIANTS = {"ours": ("fragaware", "fragaware"), "dra": ("kubedra", "kubedra"),
            "recovered": ("fragaware", "kubedra")}
DEPLOY_WEIGHT = 20         # deploy/scheduler-config.yaml's prioritize extender


def feasible_to_find(nodes: int, percentage: int = 0) -> int:
    """kube-scheduler's numFeasibleNodesToFind: all of a small cluster, else the adaptive
    percentage (50 - nodes/125, at least 5) of the nodes, at least 100."""
    if nodes < 100 or percentage >= 100:
        return nodes
    if percentage <= 0:
        percentage = max(5, 50 - nodes // 125)
    return max(100, nodes * percentage // 100)


class SplitPlacer:
    """The replay's in-process placer with a node policy and a GPU policy of its own."""

    def __init__(self, view, node_policy: str, gpu_policy: str, seed: int):
        rng = random.Random(seed)
        self.view = view
        self.engine = Engine(PlacementConfig(node_policy=node_policy, gpu_policy=gpu_policy,
                                             resource_fit=True, explain=False),
                             registry=PolicyRegistry(rng=rng, allow_baselines=True), rng=rng)

    def place(self, pod: dict):
        """The node, or None."""
        request = parse_pod(pod)
        decision = self.engine.place(self.view, request)
        if decision.ok:
            self.view.reserve(Reservation.of(request, decision))
        return decision.node


class PrioritizePlacer:
    """kube-scheduler with hami-control's prioritize extender at `weight` (0: without it):
    node sampling and score sum as kube-scheduler does them, first-fit GPUs."""

    def __init__(self, view, seed: int, weight: int, percentage: int = 0):
        self.view, self.weight, self.rng = view, weight, random.Random(seed)
        self.ours = Engine(PlacementConfig(node_policy="fragaware", gpu_policy="kubedra",
                                           resource_fit=True, explain=False),
                           registry=PolicyRegistry(rng=random.Random(seed),
                                                   allow_baselines=True))
        self.kube = Engine(PlacementConfig(node_policy="kubedra", gpu_policy="kubedra",
                                           resource_fit=True, explain=False, learn=False),
                           registry=PolicyRegistry(rng=random.Random(seed),
                                                   allow_baselines=True))
        self.to_find = feasible_to_find(len(view), percentage)
        self.start = 0

    def _sample(self, fits: dict) -> list:
        """The first `to_find` fitting nodes from the rotating start; moves the start on by
        the nodes looked at."""
        nodes, found, looked = self.view.nodes, [], 0
        for i in range(len(nodes)):
            name = nodes[(self.start + i) % len(nodes)].name
            looked += 1
            if name in fits:
                found.append(name)
                if len(found) == self.to_find:
                    break
        self.start = (self.start + looked) % len(nodes)
        return found

    def place(self, pod: dict):
        """The node, or None."""
        request = parse_pod(pod)
        kube = self.kube.node_scores(self.view, request)
        if not kube:
            return None
        sample = self._sample(kube)
        levels = {a["Host"]: a["Score"] for a in priorities(
            self.ours.node_scores(self.view, request, sample), sample)} if self.weight else {}
        totals = [kube[n] + 10 * self.weight * levels.get(n, 0) for n in sample]
        best = max(totals)
        chosen = self.rng.choice([n for n, t in zip(sample, totals) if t == best])
        decision = self.ours.place(self.view, request, [chosen])
        self.view.reserve(Reservation.of(request, decision))
        return decision.node


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="42-44")
    ap.add_argument("--pods", default="default", help="pod list of the openb trace")
    ap.add_argument("--weight", type=int, default=DEPLOY_WEIGHT,
                    help="the prioritize extender's weight (deploy/: 20)")
    args = ap.parse_args()
    print_machine()
    nodes = load_nodes(catalog.nodes_path())
    pods = load_pods(catalog.pods_path(pods=args.pods))
    total = sum(n.gpus for n in nodes)
    weights = {"prioritize": (args.weight, 0), "prioritize_w1": (1, 0),
               "prioritize_pct5": (args.weight, 5), "sampled": (0, 0)}
    allocs = {name: [] for name in (*VARIANTS, *weights)}
    for seed in parse_seeds(args.seeds):
        sequence = arrivals(pods, total, seed)
        row = []
        for name in allocs:
            if name in VARIANTS:
                placer = SplitPlacer(cluster_view(nodes), *VARIANTS[name], seed)
            else:
                placer = PrioritizePlacer(cluster_view(nodes), seed, *weights[name])
            result = replay(placer, sequence, total, seed)
            allocs[name].append(result.at_100)
            row.append(f"{name} {result.at_100:.2f}%")
        print(f"seed {seed}: " + ", ".join(row), flush=True)
    means = {name: statistics.fmean(v) for name, v in allocs.items()}
    for name, mean in means.items():
        print(f"dra_placement_{name}_alloc_pct={mean:.2f}")
    ratio("dra_placement_firstfit", means["dra"], means["ours"],
          "% GPUs allocated, kube-scheduler + first-fit devices",
          "% with fragaware (ours)")
    ratio("dra_placement_recovered", means["recovered"], means["ours"],
          "% with our node scores + first-fit devices", "% with fragaware (ours)")
    ratio("dra_placement_prioritize", means["prioritize"], means["ours"],
          f"% kube-scheduler + our prioritize (weight {args.weight}) + first-fit devices",
          "% with fragaware (ours)")
    ratio("dra_placement_prioritize_w1", means["prioritize_w1"], means["ours"],
          "% the same at weight 1", "% with fragaware (ours)")
    ratio("dra_placement_prioritize_pct5", means["prioritize_pct5"], means["ours"],
          "% the same with percentageOfNodesToScore 5", "% with fragaware (ours)")
    ratio("dra_placement_sampled", means["sampled"], means["ours"],
          "% kube-scheduler alone, sampling nodes", "% with fragaware (ours)")
    print(f"first-fit packing cost: {means['ours'] - means['dra']:.2f} points of GPU "
          f"allocation at 100 % arrived demand; our node scores recover "
          f"{means['recovered'] - means['dra']:.2f} of them in the replay, "
          f"{means['prioritize'] - means['sampled']:.2f} through the prioritize extender "
          f"as kube-scheduler combines it (weight {args.weight})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
