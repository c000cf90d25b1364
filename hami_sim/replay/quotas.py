"""Namespace quotas for a replay: a JSON file mapping namespace -> HAMi quota keys, e.g.

    {"team-a": {"limits.nvidia.com/gpucores": 30000}, "team-b": {"limits.nvidia.com/gpu": 400}}

Arriving pods are dealt to the file's namespaces in turn (arrival i goes to namespace i mod n,
in the file's order), and each placement is kept within its namespace's limits as hami-control
keeps it (`place_within_quota`), so the packing figure with quotas on measures what fairness
costs."""
import json

from hami_common.errors import HamiFormatError
from hami_control.placement.quota import parse_quota


def load_quotas(path: str) -> dict:
    """namespace -> limits (key -> value); ValueError naming the file and what to fix."""
    try:
        with open(path) as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"--quotas {path}: cannot read it as JSON: {e}") from e
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"--quotas {path}: expected an object namespace -> "
                         "{\"limits.nvidia.com/gpucores\": N, ...}")
    quotas = {}
    for namespace, hard in raw.items():
        if not isinstance(hard, dict):
            raise ValueError(f"--quotas {path}: namespace {namespace!r} must map to an object")
        try:
            spec = parse_quota({"metadata": {"namespace": namespace, "name": "replay"},
                                "spec": {"hard": hard}})
        except HamiFormatError as e:
            raise ValueError(f"--quotas {path}: {e}") from e
        quotas[namespace] = spec.limits if spec else {}
    return quotas
