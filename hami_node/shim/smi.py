"""`hami-smi [--cache PATH] [--json]`: what nvidia-smi would show for a container, from its
shared accounting file: per device the memory limit and use, the compute limit (SM%) and the
share of device time the container got over the last second (SHARE%, as the compute limiter
charged it); per process its memory and its share. Processes that have died are left out (the
shim frees their slots at its next sweep)."""
import argparse
import json
import sys
from typing import List, Optional

from hami_node.shim.errors import CacheFileError
from hami_node.shim.settings import cache_path_of
from hami_node.shim.sizes import human_size
from hami_node.shim.usage import CacheSnapshot, read_usage


def _share(percent: float, launches: int) -> str:
    """A share for the table; "-" when the compute limiter never admitted a launch."""
    return f"{percent:.1f}" if launches else "-"


def render(snap: CacheSnapshot) -> str:
    """The table hami-smi prints."""
    lines = [f"hami-smi  {snap.path}  (policy {snap.policy})",
             f"{'DEV':>3}  {'UUID':<40}  {'USED':>10}  {'LIMIT':>10}  {'PEAK':>10}  "
             f"{'PHYSICAL':>10}  {'SM%':>4}  {'SHARE%':>6}  REFUSED"]
    for d in snap.devices:
        limit = human_size(d.limit) if d.limit else "none"
        sm = str(d.sm_limit) if 0 < d.sm_limit < 100 else "-"
        lines.append(f"{d.index:>3}  {d.uuid:<40}  {human_size(d.used):>10}  {limit:>10}  "
                     f"{human_size(d.peak):>10}  {human_size(d.total):>10}  {sm:>4}  "
                     f"{_share(d.sm_share, d.sm_launches):>6}  {d.refusals}")
    if not snap.devices:
        lines.append("  (no device used yet)")
    lines.append(f"{'PID':>8}  {'DEV':>3}  {'USED':>10}  {'SHARE%':>6}")
    for p in snap.processes:
        share = _share(p.sm_share, p.sm_launches)
        for dev, used in sorted(p.used.items()) or [(None, 0)]:
            lines.append(f"{p.pid:>8}  {'-' if dev is None else dev:>3}  {human_size(used):>10}"
                         f"  {share:>6}")
            share = ""  # a process's share covers all its devices: shown once
    if not snap.processes:
        lines.append("  (no live process)")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of hami-smi."""
    p = argparse.ArgumentParser(prog="hami-smi", description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", help="the container's shared file (default: "
                   "$CUDA_DEVICE_MEMORY_SHARED_CACHE, else the per-user default)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    path = args.cache or str(cache_path_of())
    try:
        snap = read_usage(path)
    except CacheFileError as e:
        print(f"hami-smi: {e}", file=sys.stderr)
        return 1
    print(json.dumps(snap.to_json(), indent=2) if args.json else render(snap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
