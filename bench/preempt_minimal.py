"""Minimal eviction: how many pods preemption evicts to make room for a GPU pod, ours against
the least possible and against kube-scheduler alone with GPU resources as plain extended
resources.

Each trial: one small openb node (2 or 4 GPUs: T4, P100, V100), filled with openb one-GPU pods
drawn from the default pod list (placed by HAMi's binpack until 20 draws in a row do not fit),
each with a priority drawn from PRIORITIES; then a preemptor of priority 1000 drawn from the
same pods among those that fit the empty node but not the node as it is. Two mixes: `default`
(the list as it is: 56 % of its one-GPU pods take a whole GPU) and `sharing` (only its pods
that share a GPU: gpu_milli < 1000).
- ours: hami_control.placement.preempt.choose over the lower-priority pods;
- least: exhaustive search, every set of lower-priority pods by size until one makes room
  (per GPU, by hami-core's fit); among the smallest, the lowest highest priority;
- kube-scheduler alone: DefaultPreemption's SelectVictimsOnNode over node totals (GPU slots,
  gpucores, gpumem-percentage as plain extended resources; a whole-GPU pod counts 100 cores
  and 100 % memory per GPU), then checked per GPU: did its victims make room on one GPU? A
  pod that fits by node totals gets no preemption at all (kube-scheduler would bind it where
  no GPU can hold it).
Run: python bench/preempt_minimal.py [--trials 1000] [--seed 1] [--mix default sharing]
"""
import argparse
import itertools
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import print_machine, ratio  # noqa: E402

from hami_common.request import parse_pod  # noqa: E402
from hami_control.placement import ClusterView, Engine, PlacementConfig, Reservation  # noqa: E402
from hami_control.placement.fit import fit_pod  # noqa: E402
from hami_control.placement.policy import Binpack  # noqa: E402
from hami_control.placement.preempt import Candidate, choose, remove, scratch_node  # noqa: E402
from hami_sim.replay import catalog, trace  # noqa: E402

PRIORITIES = ((0, 0.5), (100, 0.3), (500, 0.2))     # value, probability
PREEMPTOR = 1000
MODELS = ("T4", "P100", "V100M16", "V100M32")


def _priority(rng) -> int:
    x, acc = rng.random(), 0.0
    for value, p in PRIORITIES:
        acc += p
        if x < acc:
            return value
    return PRIORITIES[-1][0]


def _fits(node, request, gone=()) -> bool:
    scratch = scratch_node(node)
    remove(scratch, (c.reservation for c in gone))
    return fit_pod(scratch, request, Binpack())[0] is not None


def fill(rng, tnode, pods):
    """(view, node name, candidates) for one trace node filled with random GPU pods."""
    view = ClusterView()
    view.upsert_node(tnode.name, tnode.devices())
    engine = Engine(PlacementConfig("binpack", "binpack", learn=False, explain=False))
    held, misses, i = [], 0, 0
    while misses < 20:
        tp = rng.choice(pods)
        request = parse_pod(tp.pod_object(f"p{i}", "bench"))
        decision = engine.place(view, request)
        if not decision.ok:
            misses += 1
            continue
        misses, i = 0, i + 1
        r = Reservation.of(request, decision)
        view.reserve(r)
        held.append(Candidate(r.pod, _priority(rng), r))
    return view, held


def least(node, request, cands):
    """The smallest sets that make room (exhaustive, by size); the lowest top priority."""
    for size in range(1, len(cands) + 1):
        found = [s for s in itertools.combinations(cands, size) if _fits(node, request, s)]
        if found:
            return min(found, key=lambda s: sorted((c.priority for c in s), reverse=True))
    return None


def _use(r, devmem: dict) -> tuple:
    slots = sum(len(ctr) for ctr in r.devices)
    cores = sum(d.usedcores for ctr in r.devices for d in ctr)
    mem = sum(d.usedmem * 100 // devmem[d.uuid] for ctr in r.devices for d in ctr)
    return slots, cores, mem


def _asked(request) -> tuple:
    ctr = next(c for c in request.containers if c.nums)
    if ctr.cores in (0, 100) and not ctr.mem_percent and not ctr.mem_mib:
        return ctr.nums, 100 * ctr.nums, 100 * ctr.nums        # whole GPUs
    return ctr.nums, ctr.cores, ctr.mem_percent


def kube_scheduler(node, request, cands, everyone):
    """DefaultPreemption over node totals: (victims or None, why none)."""
    devmem = {d.uuid: d.devmem for d in node.devices}
    cap = (sum(d.count for d in node.devices), 100 * len(node.devices),
           100 * len(node.devices))
    asked = _asked(request)

    def fits(present):
        used = [sum(x) for x in zip(*(_use(c.reservation, devmem) for c in present))] or \
            [0, 0, 0]
        return all(u + a <= c for u, a, c in zip(used, asked, cap))
    if fits(everyone):
        return None, "fits by node totals"
    lower = {c.key for c in cands}
    stay = [c for c in everyone if c.key not in lower]
    if not fits(stay):
        return None, "no room even without the lower pods"
    victims = []
    for c in sorted(cands, key=lambda c: -c.priority):     # reprieve the most important first
        if fits(stay + [c]):
            stay.append(c)
        else:
            victims.append(c)
    return victims, ""


def trial(rng, nodes, pods):
    tnode = rng.choice(nodes)
    view, held = fill(rng, tnode, pods)
    node = view.node(tnode.name)
    empty = scratch_node(node)
    remove(empty, (c.reservation for c in held))
    for _ in range(200):
        request = parse_pod(rng.choice(pods).pod_object("preemptor", "bench"))
        if fit_pod(empty, request, Binpack())[0] is not None and not _fits(node, request):
            break
    else:
        return None
    cands = [c for c in held if c.priority < PREEMPTOR]
    start = time.perf_counter()
    ours = choose(node, request, cands, resources=False)
    ms = (time.perf_counter() - start) * 1000
    best = least(node, request, cands) if len(cands) <= 40 else None
    ks, why = kube_scheduler(node, request, cands, held)
    ks_ok = ks is not None and _fits(node, request, ks)
    return {"ours": len(ours.victims) if ours.ok else None, "least": len(best) if best else None,
            "ks": len(ks) if ks is not None else None, "ks_ok": ks_ok, "ks_why": why,
            "ms": ms, "exhaustive": ours.exhaustive, "pods": len(held),
            "ours_top": max((c.priority for c in ours.victims), default=-1) if ours.ok else None,
            "least_top": max((c.priority for c in best), default=-1) if best else None}


def report(results) -> None:
    n = len(results)
    room = [r for r in results if r["least"] is not None]
    same = sum(1 for r in room if r["ours"] == r["least"] and r["ours_top"] == r["least_top"])
    missed = sum(1 for r in room if r["ours"] is None)
    ks_tried = [r for r in room if r["ks"] is not None]
    ks_ok = [r for r in ks_tried if r["ks_ok"]]
    no_call = sum(1 for r in room if r["ks_why"] == "fits by node totals")
    wasted = sum(r["ks"] for r in ks_tried if not r["ks_ok"])
    print(f"trials: {n} (preemption can make room in {len(room)}); pods per node: mean "
          f"{statistics.mean(r['pods'] for r in results):.1f}")
    print(f"priorities: {', '.join(f'{v} ({p:.0%})' for v, p in PRIORITIES)}; "
          f"preemptor {PREEMPTOR}")
    print(f"least possible: mean {statistics.mean(r['least'] for r in room):.2f} victims")
    print(f"ours: mean {statistics.mean(r['ours'] for r in room if r['ours'] is not None):.2f}"
          f" victims; equal to the least (count and top priority) in {same}/{len(room)}, no "
          f"plan in {missed}; search exhaustive in "
          f"{sum(r['exhaustive'] for r in room)}/{len(room)}; "
          f"{statistics.mean(r['ms'] for r in results):.2f} ms per node (mean), "
          f"{max(r['ms'] for r in results):.1f} ms max")
    print(f"kube-scheduler alone: no preemption in {no_call}/{len(room)} (the pod fits by node "
          f"totals, no GPU can hold it); victims chosen in {len(ks_tried)}, of which "
          f"{len(ks_ok)} made room on a GPU (mean {statistics.mean([r['ks'] for r in ks_ok] or [0]):.2f}"
          f" victims, least possible there "
          f"{statistics.mean([r['least'] for r in ks_ok] or [0]):.2f}); {wasted} pods evicted "
          f"in vain in the other {len(ks_tried) - len(ks_ok)}")
    print(f"made_room_ours={len(room) - missed}/{len(room)} "
          f"made_room_kube_scheduler={len(ks_ok)}/{len(room)}")
    ours = sum(r["ours"] for r in room if r["ours"] is not None)
    lowest = sum(r["least"] for r in room)
    ratio("victims", ours, lowest, "victims ours (all trials)", "the least possible")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=1000, help="trials per mix")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--mix", nargs="+", choices=("default", "sharing"),
                   default=["default", "sharing"])
    args = p.parse_args()
    print_machine()
    nodes = [n for n in trace.load_nodes(catalog.nodes_path())
             if n.gpus in (2, 4) and n.model in MODELS]
    pods = [t for t in trace.load_pods(catalog.pods_path()) if t.num_gpu == 1 and
            (not t.gpu_spec or set(t.gpu_spec) & set(MODELS))]
    for mix in args.mix:
        chosen = pods if mix == "default" else [t for t in pods if t.gpu_milli < 1000]
        print(f"\n--- mix {mix}: {len(chosen)} one-GPU pods of the openb default list")
        rng = random.Random(args.seed)
        results = [r for r in (trial(rng, nodes, chosen) for _ in range(args.trials)) if r]
        report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
