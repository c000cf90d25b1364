"""MIG placement: which profile and which placement a MIG request gets on one GPU. Pure.

`smallest_fit` is HAMi's rule: the profile of least memory (then fewest compute slices) that
covers the request and has a placement overlapping none in use, placements tried in HAMi's order
(1g and 3g profiles from the highest start, the others from the lowest). `best_fit` is ours: among the profiles of that
same least memory (variants such as 1g.10gb and 2g.10gb are told apart) and all their free
placements, the one that leaves the most room for the pending mix (`Mix`: how often each
profile is asked for), measured as the instances of each profile that still fit, weighted by
how often it is asked for; ties go to more compute slices (on every table here memory slices
bind first, so the pod gets the larger variant's SMs at no cost to anyone), then to HAMi's
order.
"""
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Optional, Sequence

from hami_common.mig import MigPlacement, MigProfile


@dataclass(frozen=True)
class MigChoice:
    """A profile at a placement."""

    profile: MigProfile
    placement: MigPlacement


@dataclass
class Mix:
    """How often each profile (by name) is asked for; weights need not sum to 1."""

    weights: dict = field(default_factory=dict)

    def add(self, name: str, weight: float = 1.0) -> None:
        """Counts a request for a profile."""
        self.weights[name] = self.weights.get(name, 0.0) + weight


def ordered(profile: MigProfile) -> list:
    """Placements in HAMi's order of preference."""
    high = profile.name.startswith(("1g.", "3g."))
    return sorted(profile.placements, key=lambda p: -p.start if high else p.start)


def free(profile: MigProfile, used: Iterable[MigPlacement]) -> list:
    """The profile's placements that overlap nothing in use, in HAMi's order."""
    used = tuple(used)
    return [p for p in ordered(profile) if not any(p.overlaps(u) for u in used)]


def covering(profiles: Sequence[MigProfile], memory_mb: int) -> list:
    """Profiles with at least `memory_mb`, least memory first, then fewest compute slices (as
    HAMi orders them: 1g.10gb before 2g.10gb)."""
    return sorted((p for p in profiles if p.memory_mb >= memory_mb),
                  key=lambda p: (p.memory_mb, p.slice_count))


def memory_slices(profiles: Sequence[MigProfile]) -> int:
    """The GPU's memory slices (8 on every table here): the end of its furthest placement."""
    return max((pl.start + pl.size for p in profiles for pl in p.placements), default=0)


def memory_for_percent(profiles: Sequence[MigProfile], percent: int) -> Optional[int]:
    """The MiB a request for `percent` of a MIG GPU's memory needs: that of the least-memory
    profile spanning at least that share of the memory slices (50 % of an A100-40GB is 4 of
    its 8 slices: 3g.20gb). Instance sizes are not exact fractions of the GPU's memory, so a
    percentage is read in slices; None when no profile spans enough."""
    total = memory_slices(profiles)
    spans = [p.memory_mb for p in profiles if p.placements and
             max(pl.size for pl in p.placements) * 100 >= percent * total]
    return min(spans) if spans else None


def smallest_fit(profiles: Sequence[MigProfile], used: Iterable[MigPlacement],
                 memory_mb: int) -> Optional[MigChoice]:
    """HAMi's choice, or None when no profile covering the memory has a free placement."""
    used = tuple(used)
    for profile in covering(profiles, memory_mb):
        places = free(profile, used)
        if places:
            return MigChoice(profile, places[0])
    return None


def capacity(profile: MigProfile, used: frozenset) -> int:
    """How many more instances of a profile fit, each at its first free placement."""
    taken, n = list(used), 0
    for place in profile.placements:
        if not any(place.overlaps(u) for u in taken):
            taken.append(place)
            n += 1
    return n


def room(profiles: Sequence[MigProfile], used: frozenset, mix: Mix) -> float:
    """The pending mix's instances that still fit, weighted by how often each is asked for."""
    return sum(mix.weights.get(p.name, 0.0) * capacity(p, used) for p in profiles)


def options(profiles: Sequence[MigProfile], used: Iterable[MigPlacement],
            memory_mb: int) -> list:
    """Every (profile, free placement) of the least memory that covers the request and can be
    placed: what `best_fit` chooses among."""
    used = tuple(used)
    for_memory = [p for p in covering(profiles, memory_mb) if free(p, used)]
    if not for_memory:
        return []
    least = for_memory[0].memory_mb
    return [MigChoice(p, place) for p in for_memory if p.memory_mb == least
            for place in free(p, used)]


def best_fit(profiles: Sequence[MigProfile], used: Iterable[MigPlacement], memory_mb: int,
             mix: Mix) -> Optional[MigChoice]:
    """Our choice, or None when nothing covering the memory can be placed."""
    used = frozenset(used)
    best, best_key = None, None
    for rank, choice in enumerate(options(profiles, used, memory_mb)):
        key = (-room(profiles, used | {choice.placement}, mix), -choice.profile.slice_count, rank)
        if best_key is None or key < best_key:
            best, best_key = choice, key
    return best


@lru_cache(maxsize=65536)
def _loss(profiles: tuple, used: frozenset, memory_mb: int, mix_key: tuple) -> tuple:
    mix = Mix(dict(mix_key))
    choice = best_fit(profiles, used, memory_mb, mix)
    if choice is None:
        return None, 0.0
    return choice, room(profiles, used, mix) - room(profiles, used | {choice.placement}, mix)


def loss(profiles: Sequence[MigProfile], used: Iterable[MigPlacement], memory_mb: int,
         mix: Mix) -> tuple:
    """(our choice on this GPU, the room it costs the pending mix); (None, 0) if none fits.
    Memoised: GPUs with the same layout cost one evaluation."""
    return _loss(tuple(profiles), frozenset(used), memory_mb, tuple(sorted(mix.weights.items())))
