"""`make bench`: runs every benchmark of the project, one after another, and prints their figures.

Each entry is (script, args). A benchmark prints a `machine:` line, a table and its figures as
`name=value` lines, each beside a reference measured in the same run as `name_ratio=R`; this
runner sequences them (they are timing-sensitive: never run two at once) and repeats the
ratios at the end, since they are what compares across machines. Everything it reads ships
with the repository (the openb trace: hami_sim/data/traces/); plots go to bench/out/.
"""
import subprocess
import sys
import time
from pathlib import Path

from benchlib import print_machine

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

BENCHES = [
    ("simgpu_bench.py", []),
    ("apiserver_throughput.py", []),
    ("shim_overhead.py", []),
    ("throttle_accuracy.py", ["--sim"]),
    ("torch_shim.py", []),          # PyTorch from `make torch` on the simulated GPU
    ("allocate_latency.py", []),
    ("filter_latency.py", []),
    ("placement_latency.py", []),
    ("preempt_minimal.py", []),
    ("mig_placement.py", []),
    ("pod_watch_cost.py", []),
    ("replay_plot.py", ["--pods", "default", "--out", str(OUT / "replay_default.png")]),
    ("dra_placement.py", []),
    ("k8s_throughput.py", []),      # real Kubernetes (tools/k8s/build.sh), needs root
]


def run(script: str, args: list) -> tuple:
    """Runs one benchmark, echoing its output; (exit status, its `*_ratio=` lines)."""
    proc = subprocess.Popen([sys.executable, str(HERE / script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    ratios = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        name, _, value = line.strip().partition("_ratio=")
        if value and " " not in name:
            ratios.append(f"{script}: {name} {value}")
    return proc.wait(), ratios


def main() -> int:
    """Runs the benchmarks that exist; returns non-zero if any failed."""
    OUT.mkdir(exist_ok=True)
    print_machine()
    failed, ratios = [], []
    for script, args in BENCHES:
        if not (HERE / script).exists():
            continue
        print(f"\n=== {script} {' '.join(args)}", flush=True)
        start = time.monotonic()
        rc, found = run(script, args)
        ratios += found
        print(f"=== {script}: exit {rc} in {time.monotonic() - start:.1f} s", flush=True)
        if rc:
            failed.append(script)
    print("\n=== ratios to same-run references (these compare across machines)")
    print("\n".join(ratios))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
