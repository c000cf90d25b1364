"""MIG GPUs inside a placement: whether a container's instance fits a MIG GPU, which profile and
placement it gets there, and which of several MIG GPUs it takes. Pure; the rules themselves are
in mig.py.

A container asks for memory (MiB, or a percentage read in memory slices: mig.memory_for_percent)
and gets one instance per GPU it asks for: the least-memory profile that covers the ask, at
the placement that leaves the most room for the MIG asks seen lately (`MigDemand`, turned into
a profile Mix per GPU model); among several MIG GPUs, the one where that choice costs the
least room, the fullest first on a tie (binpack, as HAMi packs instances).
"""
from collections import deque
from typing import Optional, Sequence

from hami_control.placement import mig
from hami_control.placement import reasons as R

_KEEP = 512          # MIG asks remembered for the mix


def need_memory(profiles: Sequence, ctr) -> Optional[int]:
    """The MiB an instance must have for the container on a GPU with these profiles."""
    if ctr.mem_mib:
        return ctr.mem_mib
    return mig.memory_for_percent(profiles, ctr.mem_percent or 100)


class MigDemand:
    """The MIG asks seen lately, as a profile Mix per profile table (cached until a new ask)."""

    def __init__(self, keep: int = _KEEP):
        self.asks = deque(maxlen=keep)
        self._mixes: dict = {}

    def observe(self, request) -> None:
        """Counts the request's asks if it accepts MIG instances."""
        if not request.filters.mig:
            return
        for ctr in request.containers:
            for _ in range(ctr.nums):
                self.asks.append(ctr)
        self._mixes.clear()

    def mix(self, profiles: tuple) -> mig.Mix:
        """How often each of the table's profiles was (by smallest fit) asked for."""
        cached = self._mixes.get(profiles)
        if cached is None:
            cached = self._mixes[profiles] = mig.Mix()
            for ctr in self.asks:
                need = need_memory(profiles, ctr)
                fits = mig.covering(profiles, need) if need is not None else []
                if fits:
                    cached.add(fits[0].name)
        return cached


def _used(dev, taken: Sequence) -> tuple:
    return tuple(dev.mig_used) + tuple(taken)


def reason(dev, ctr, taken: Sequence = ()) -> Optional[str]:
    """Why the container cannot have an instance on the MIG GPU `dev` (None if it can);
    `taken`: placements the pod's other containers already take there."""
    if dev.used + len(taken) + 1 > dev.count:
        return R.CARD_TIME_SLICING_EXHAUSTED
    need = need_memory(dev.profiles, ctr)
    if need is None or not mig.covering(dev.profiles, need):
        return R.CARD_INSUFFICIENT_MEMORY
    if not mig.options(dev.profiles, _used(dev, taken), need):
        return R.CARD_MIG_INFEASIBLE
    return None


def choose(dev, ctr, taken: Sequence, demand: Optional[MigDemand]) -> mig.MigChoice:
    """The profile and placement the container gets on `dev` (where `reason` said it fits)."""
    mix = demand.mix(dev.profiles) if demand is not None else mig.Mix()
    choice = mig.best_fit(dev.profiles, _used(dev, taken), need_memory(dev.profiles, ctr), mix)
    if choice is None:
        raise ValueError(f"GPU {dev.uuid}: no MIG placement for {ctr.name!r} (check reason())")
    return choice


def pick(node, feasible: Sequence[int], ctr, demand: Optional[MigDemand]) -> tuple:
    """`ctr.nums` of the feasible MIG GPUs: the least room lost for the pending mix first, then
    the fullest (most memory slices reserved), then the lowest index."""
    def key(pos):
        dev = node.devices[pos]
        mix = demand.mix(dev.profiles) if demand is not None else mig.Mix()
        _, lost = mig.loss(dev.profiles, tuple(dev.mig_used), need_memory(dev.profiles, ctr),
                           mix)
        return (lost, -sum(p.size for p in dev.mig_used), pos)
    return tuple(sorted(feasible, key=key)[:ctr.nums])
