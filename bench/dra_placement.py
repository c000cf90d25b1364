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
Printed: each one's allocation %, and dra / ours, recovered / ours as ratios.

    python bench/dra_placement.py [--seeds 42-44] [--pods default]
"""
import argparse
import random
import statistics
import sys

from benchlib import print_machine, ratio
from hami_control.placement import Engine, PlacementConfig, Reservation
from hami_control.placement.registry import PolicyRegistry
from hami_common.request import parse_pod
from hami_sim.replay import catalog
from hami_sim.replay.arrivals import arrivals
from hami_sim.replay.cli import parse_seeds
from hami_sim.replay.run import cluster_view, replay
from hami_sim.replay.trace import load_nodes, load_pods

VARIANTS = {"ours": ("fragaware", "fragaware"), "dra": ("kubedra", "kubedra"),
            "recovered": ("fragaware", "kubedra")}


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="42-44")
    ap.add_argument("--pods", default="default", help="pod list of the openb trace")
    args = ap.parse_args()
    print_machine()
    nodes = load_nodes(catalog.nodes_path())
    pods = load_pods(catalog.pods_path(pods=args.pods))
    total = sum(n.gpus for n in nodes)
    allocs = {name: [] for name in VARIANTS}
    for seed in parse_seeds(args.seeds):
        sequence = arrivals(pods, total, seed)
        row = []
        for name, (node_policy, gpu_policy) in VARIANTS.items():
            placer = SplitPlacer(cluster_view(nodes), node_policy, gpu_policy, seed)
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
    print(f"first-fit packing cost: {means['ours'] - means['dra']:.2f} points of GPU "
          f"allocation at 100 % arrived demand; our node scores recover "
          f"{means['recovered'] - means['dra']:.2f} of them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
