"""MIG placement on the openb trace: ours (best_fit: the least-memory profile and the placement
that leave the most room for the pending mix) against HAMi's smallest-fit, side by side in one
run on the same arrivals.

Every GPU of the openb cluster (1,213 nodes, 6,212 GPUs) becomes an A100-SXM4-40GB in MIG mode,
with the profiles and placements its (simulated) NVML reports. Each openb pod becomes MIG
requests: a pod sharing a GPU (gpu_milli < 1000) asks for that share of the GPU's memory (of
the 7g.40gb instance's 40,448 MiB), a whole-GPU pod for 7g.40gb on each of its GPUs (one node).
Arrivals as the replay builds them (seeded order, up to 100 % of the cluster's GPUs asked),
no departures. Both policies place GPUs binpack-first (the most slices used first); HAMi takes
the first GPU where smallest-fit finds a placement, ours the GPU and choice that cost the
pending mix (the workload's profile frequencies) the least room.
Figures: the share of the arrived GPU demand that was placed, of memory slices used when a
request first found no room, and the compute slices (SMs) the placed single-GPU asks got.
Run: python bench/mig_placement.py [--seeds 42-44] [--pods default]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import print_machine, ratio  # noqa: E402

from hami_common.mig import MigPlacement, MigProfile  # noqa: E402
from hami_control.placement import mig  # noqa: E402
from hami_sim.gpu import sim_env  # noqa: E402
from hami_sim.replay import catalog, trace  # noqa: E402
from hami_sim.replay.arrivals import arrivals  # noqa: E402

GPU = "40g/108/NVIDIA A100-SXM4-40GB"
SLICES = 8

READ_PROFILES = '''
import json, pynvml
from hami_node.plugin.mig_nvml import NvmlMig
pynvml.nvmlInit()
uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
print(json.dumps([{"name": p.name, "memory": p.memory_mb, "core": p.core, "slices": p.slice_count,
                   "placements": [[x.start, x.size] for x in p.placements]}
                  for p in NvmlMig().profiles(uuid)]))
'''


def profiles(state_dir: Path) -> tuple:
    """The A100-40GB's MIG profiles as the simulated NVML reports them (the one table, in C)."""
    env = sim_env(gpus=[GPU], state_dir=state_dir, base=os.environ)
    out = subprocess.run([sys.executable, "-c", READ_PROFILES], env=env, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return tuple(MigProfile(p["name"], p["memory"], p["core"], p["slices"],
                            tuple(MigPlacement(*x) for x in p["placements"]))
                 for p in json.loads(out) if "+me" not in p["name"])


def requests(pod, full_mib: int) -> list:
    """The MIG memory asks of one trace pod (one per GPU)."""
    if not pod.num_gpu:
        return []
    if pod.gpu_milli < 1000:
        return [math.ceil(pod.gpu_milli * full_mib / 1000)]
    return [full_mib] * pod.num_gpu


class Cluster:
    """GPUs grouped by layout (placements in use), so equal GPUs cost one evaluation."""

    def __init__(self, nodes):
        self.used = {}                     # gpu -> frozenset of placements
        self.node_of = {}
        self.by_layout = defaultdict(set)
        gpu = 0
        for n, node in enumerate(nodes):
            for _ in range(node.gpus):
                self.used[gpu], self.node_of[gpu] = frozenset(), n
                self.by_layout[frozenset()].add(gpu)
                gpu += 1

    def layouts(self) -> list:
        """(layout, lowest GPU with it), binpack order: most memory slices used first."""
        out = [(layout, min(gpus)) for layout, gpus in self.by_layout.items() if gpus]
        return sorted(out, key=lambda x: (-sum(p.size for p in x[0]), x[1]))

    def take(self, gpu: int, placement: MigPlacement) -> None:
        """Marks a placement in use."""
        old = self.used[gpu]
        self.by_layout[old].discard(gpu)
        self.used[gpu] = old | {placement}
        self.by_layout[self.used[gpu]].add(gpu)

    def empty_on_node(self, count: int) -> list:
        """`count` empty GPUs on one node, the node with the fewest empty first; [] if none."""
        per_node = defaultdict(list)
        for gpu in self.by_layout[frozenset()]:
            per_node[self.node_of[gpu]].append(gpu)
        fits = [sorted(g) for g in per_node.values() if len(g) >= count]
        return min(fits, key=lambda g: (len(g), g[0]))[:count] if fits else []


def place(cluster: Cluster, profs: tuple, memory: int, policy: str, mix: mig.Mix):
    """(gpu, choice) for one MIG request, or None."""
    best = None
    for layout, gpu in cluster.layouts():
        if policy == "hami":
            choice = mig.smallest_fit(profs, layout, memory)
            if choice:
                return gpu, choice
            continue
        choice, cost = mig.loss(profs, layout, memory, mix)
        if choice and (best is None or cost < best[0]):
            best = (cost, gpu, choice)
    return (best[1], best[2]) if best else None


def replay(nodes, pods, profs, seed: int, policy: str, mix: mig.Mix) -> dict:
    """One seed under one policy: demand placed, slices used."""
    cluster = Cluster(nodes)
    total = len(cluster.used)
    full = max(p.memory_mb for p in profs)
    asked = placed = 0
    first_refusal = None      # slices in use when a request first found no room
    compute = 0               # compute slices handed to single-GPU asks
    for pod in arrivals(pods, total, seed, ratio=1.0):
        asks = requests(pod, full)
        if not asks:
            continue
        asked += pod.demand_milli
        if len(asks) > 1:            # a multi-GPU pod: whole GPUs on one node
            gpus = cluster.empty_on_node(len(asks))
            whole = next(p for p in profs if p.memory_mb == full)
            for gpu in gpus:
                cluster.take(gpu, whole.placements[0])
            placed += pod.demand_milli if gpus else 0
            continue
        found = place(cluster, profs, asks[0], policy, mix)
        if found:
            cluster.take(found[0], found[1].placement)
            placed += pod.demand_milli
            compute += found[1].profile.slice_count
        elif first_refusal is None:
            first_refusal = sum(p.size for used in cluster.used.values() for p in used)
    slices = sum(p.size for used in cluster.used.values() for p in used)
    first_refusal = slices if first_refusal is None else first_refusal
    return {"placed": 100 * placed / asked, "slices": 100 * slices / (SLICES * total),
            "first": 100 * first_refusal / (SLICES * total), "compute": compute}


def workload_mix(pods, profs) -> mig.Mix:
    """How often each profile is asked for by the pod list (smallest-fit's profile per ask)."""
    mix, full = mig.Mix(), max(p.memory_mb for p in profs)
    for pod in pods:
        for memory in requests(pod, full):
            chosen = mig.covering(profs, memory)
            if chosen:
                mix.add(chosen[0].name)
    return mix


def parse_seeds(text: str) -> list:
    """"42-44" or "42,43"."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main() -> int:
    """Prints both policies' figures per seed, their means and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-44")
    catalog.add_arguments(parser)
    args = parser.parse_args()
    nodes_path, pods_path = catalog.resolve(args)
    print_machine()
    started = time.monotonic()
    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"hami-mig-bench-{os.getpid()}"
    profs = profiles(state)
    nodes, pods = trace.load_nodes(nodes_path), trace.load_pods(pods_path)
    mix = workload_mix(pods, profs)
    print(f"profiles (simulated NVML, A100-SXM4-40GB): "
          f"{', '.join(f'{p.name} {p.memory_mb} MiB' for p in profs)}")
    print(f"pending mix (share of asks): " + ", ".join(
        f"{k} {v / sum(mix.weights.values()):.2f}" for k, v in sorted(mix.weights.items())))
    print(f"{'seed':>5} {'HAMi placed %':>14} {'ours placed %':>14} {'HAMi full at':>13} "
          f"{'ours full at':>13} {'HAMi compute':>13} {'ours compute':>13}")
    rows = []
    for seed in parse_seeds(args.seeds):
        hami = replay(nodes, pods, profs, seed, "hami", mix)
        ours = replay(nodes, pods, profs, seed, "ours", mix)
        rows.append((hami, ours))
        print(f"{seed:>5} {hami['placed']:>14.2f} {ours['placed']:>14.2f} "
              f"{hami['first']:>12.2f}% {ours['first']:>12.2f}% {hami['compute']:>13} "
              f"{ours['compute']:>13}", flush=True)
    mean = lambda i, k: sum(r[i][k] for r in rows) / len(rows)  # noqa: E731
    ratio("mig_placed", mean(1, "placed"), mean(0, "placed"),
          "% of arrived GPU demand placed by ours", "by HAMi's smallest-fit", "%")
    ratio("mig_full_at", mean(1, "first"), mean(0, "first"),
          "% of memory slices in use at the first refusal, ours", "HAMi's smallest-fit", "%")
    ratio("mig_compute", mean(1, "compute"), mean(0, "compute"),
          "compute slices given to single-GPU asks by ours", "by HAMi's smallest-fit")
    print(f"seconds={time.monotonic() - started:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
