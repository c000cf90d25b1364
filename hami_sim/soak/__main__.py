"""`python3 -m hami_sim.soak [--duration S] [--rate R] [--seed N] [--installed]` (`make soak`):
starts the real cluster (with --installed: hami-py installed by its Helm chart, which adds a
rolling update of hami-control and a helm rollback to the faults), runs the soak, prints its
report; exit status 1 when the auditor found a violation, a fault was not recovered or
something does not serve at the end."""
from __future__ import annotations

import argparse
import logging
import sys

from hami_sim.audit.model import Bounds
from hami_sim.soak.faults import INSTALLED_ONLY, KINDS, kinds_for
from hami_sim.soak.run import Soak, SoakOptions


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def main(argv=None) -> int:
    """Runs one soak on a real cluster of its own."""
    p = argparse.ArgumentParser(prog="python3 -m hami_sim.soak", description=__doc__)
    p.add_argument("--duration", type=_positive, default=3600.0, help="seconds (default 3600)")
    p.add_argument("--rate", type=_positive, default=0.25, help="pods created per second")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fault-gap", type=_positive, default=40.0,
                   help="seconds between fault starts (every third one overlaps)")
    p.add_argument("--installed", action="store_true",
                   help="hami-control and hami-node installed by the Helm chart (the installed "
                        f"mode); needed by {', '.join(INSTALLED_ONLY)}")
    p.add_argument("--kinds", default=None,
                   help=f"comma list of fault kinds (default all of the mode; all: "
                        f"{','.join(KINDS)})")
    p.add_argument("--pending-bound", type=_positive, default=Bounds.pending_s)
    p.add_argument("--lock-bound", type=_positive, default=Bounds.lock_age_s)
    args = p.parse_args(argv)
    kinds = kinds_for(args.installed) if args.kinds is None else \
        tuple(k for k in args.kinds.split(",") if k)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    wrong = [k for k in kinds if k not in kinds_for(args.installed)]
    if wrong:
        p.error(f"fault kind(s) {', '.join(wrong)} need --installed (hami-control installed by "
                "the Helm chart)")
    from hami_sim.realcluster.cluster import RealCluster
    # The client's retry warnings while a fault has the API server down: the soak counts
    # those moments itself.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    options = SoakOptions(duration_s=args.duration, rate=args.rate, seed=args.seed,
                          kinds=kinds, fault_gap_s=args.fault_gap,
                          bounds=Bounds(pending_s=args.pending_bound,
                                        lock_age_s=args.lock_bound))
    with RealCluster(step=lambda m: print(f"cluster: {m}", flush=True),
                     install="helm" if args.installed else "processes") as cluster:
        report = Soak(cluster, options, out=sys.stdout).run()
    print(report.text(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
