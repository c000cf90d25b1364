"""The arrival sequence of one seed, as the FGD paper's simulator built it: the pod list in a
seeded random order, then pods sampled (with replacement) from the same list appended until the
next one would take the GPU demand past `ratio` x the cluster's GPUs (or random pods dropped if
the list alone asks for more). No departures."""
import random


def arrivals(pods: list, total_gpus: int, seed: int, ratio: float = 1.3) -> list:
    """Pods in arrival order (the same seed gives the same order)."""
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    target = ratio * total_gpus * 1000
    demand = sum(p.demand_milli for p in order)
    while demand > target and order:
        demand -= order.pop(rng.randrange(len(order))).demand_milli
    if not any(p.demand_milli for p in pods):
        return order
    while True:
        extra = pods[rng.randrange(len(pods))]
        if demand + extra.demand_milli > target:
            return order
        order.append(extra)
        demand += extra.demand_milli
