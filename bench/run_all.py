"""`make bench`: runs every benchmark of the project, one after another, and prints their figures.

Each entry is (script, args). A benchmark prints a table and its figures as `name=value` lines;
this runner only sequences them (they are timing-sensitive: never run two at once).
"""
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHES = [
    ("simgpu_bench.py", []),
    ("apiserver_throughput.py", []),
    ("shim_overhead.py", []),
    ("throttle_accuracy.py", ["--sim"]),
    ("allocate_latency.py", []),
    ("filter_latency.py", []),
    ("replay_plot.py", []),
    ("k8s_throughput.py", []),      # real Kubernetes (tools/k8s/build.sh), needs root
]


def main() -> int:
    """Runs the benchmarks that exist; returns non-zero if any failed."""
    failed = []
    for script, args in BENCHES:
        path = HERE / script
        if not path.exists():
            continue
        print(f"\n=== {script} {' '.join(args)}", flush=True)
        start = time.monotonic()
        rc = subprocess.call([sys.executable, str(path), *args])
        print(f"=== {script}: exit {rc} in {time.monotonic() - start:.1f} s", flush=True)
        if rc:
            failed.append(script)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
