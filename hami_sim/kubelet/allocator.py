"""Pure parts of kubelet's device manager: which extended resources a container needs, and
which devices to give it."""
from __future__ import annotations

from typing import Iterable


class DeviceShortage(Exception):
    """Not enough healthy free devices for a request."""


def requested(container: dict, resources: Iterable[str]) -> dict[str, int]:
    """Device counts a container asks for, among the resources that have a plugin.

    Extended resources need requests equal to limits; the limit is read first. Resources with
    no registered plugin are ignored, as kubelet ignores extended resources it does not manage.
    """
    spec = container.get("resources") or {}
    limits, requests = spec.get("limits") or {}, spec.get("requests") or {}
    out = {}
    for name in resources:
        value = limits.get(name, requests.get(name))
        if value in (None, "", 0, "0"):
            continue
        try:
            count = int(str(value))
        except ValueError as e:
            raise ValueError(f"container {container.get('name')!r}: {name}={value!r} is not a "
                             "whole number of devices") from e
        if count > 0:
            out[name] = count
    return out


def containers_in_order(pod: dict) -> list[tuple[dict, bool]]:
    """(container, is_init) in the order kubelet starts them: init containers first."""
    spec = pod.get("spec") or {}
    return ([(c, True) for c in spec.get("initContainers") or []]
            + [(c, False) for c in spec.get("containers") or []])


def choose(available: list[str], needed: int, reusable: list[str],
           preferred: list[str] | None = None) -> list[str]:
    """Devices for one container: reusable ones (from init containers) first, then the
    plugin's preference when it is valid, else the first free devices in ID order."""
    reuse = list(reusable)[:needed]
    if len(reuse) == needed:
        return reuse
    free = [d for d in sorted(available) if d not in reuse]
    if len(reuse) + len(free) < needed:
        raise DeviceShortage(f"requested number of devices unavailable. Requested: {needed}, "
                             f"Available: {len(reuse) + len(free)}")
    if preferred is not None:
        pool = set(reuse) | set(free)
        if (len(preferred) == needed and len(set(preferred)) == needed
                and all(d in pool for d in preferred) and set(reuse) <= set(preferred)):
            return list(preferred)
    return reuse + free[: needed - len(reuse)]
