"""Benchmark of the compute limiter on the simulated GPU (issues 4 and 18).

The share of device time each limited container achieves over a window (after a settling
second), taken from the simulator's own timeline (per-process busy intervals, summed per
container), never from the limiter's figures. The simulated device time-slices between
processes (2 ms) and stamps events when it reaches them, as a real GPU does.

Workloads (c/loadgen/throttle_worker modes):
  round 1   short kernels in batches, long kernels, sync after every launch, CUDA graphs, two
            processes in one container, each at 10, 25, 50 and 75 %;
  issue 18  one signature whose cost varies 50x, a cost growing over the run, persistent
            kernels (grid = SM count, 2-20 ms loops), 16,384 distinct shapes, 20 us kernel +
            sync loops: alone at 30 % (the sync loop at 10 %: on this simulator a process
            polling for 20 us kernels keeps the device ~16 % busy at most), then each contending
            with a saturating container limited to 60 % on the same GPU (where the sync loop
            waits for the neighbour's 2 ms slice before each kernel: its row is shown, but
            its demand is below its limit and it does not count in max_abs_error_pp);
  neighbour long kernels at 50 % and 30 % beside a light container (batches at 10 %);
  splits    10/90 and 30/30/40 on one GPU each, and each of those limits alone.

With --before REF the same rounds also run under the shim built from git REF's sources (e.g.
`main`), in the same invocation, so that the table shows old and new side by side.

Targets: every row within 2 points of its limit (max_abs_error_pp, the last line), splits
within 10 % of their ratio, <= 1 us added per launch under budget, <= 100 wake-ups per second
per process, < 5 % of a core used by a throttled process while it waits.

usage: python bench/throttle_accuracy.py --sim [--before main] [--settle S] [--window S]
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from hami_node.shim import ShimSettings, lib_path, read_usage, shim_env
from hami_sim.gpu import sim_env
from hami_sim.gpu.load import Tenant, Worker, run_round

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GPUS = 16
TICKS = os.sysconf("SC_CLK_TCK")

# A round: containers (label, mode, limit, processes, device) that run at once.
Spec = Tuple[str, str, int, int, int]
ROUND_ONE = [("short kernels (100 us), batches", "batch", 1),
             ("long kernels (20 ms)", "long", 1),
             ("sync after every launch (4 ms)", "sync", 1),
             ("CUDA graphs of 10 captured kernels", "graph", 1),
             ("two processes, one container", "batch", 2)]
NEW = [("one signature, costs 100 us / 5 ms", "mixed", 30),
       ("cost growing 100 us + 0.4 ms/s", "grow", 30),
       ("persistent kernels, 2-20 ms", "persistent", 30),
       ("16,384 distinct shapes, 50 us", "shapes", 30),
       ("20 us kernel + sync loop", "tiny", 10)]


def rounds() -> List[List[Spec]]:
    """Every round of the benchmark, in order."""
    out = [[(name, mode, limit, procs, d) for d, limit in enumerate((10, 25, 50, 75))]
           for name, mode, procs in ROUND_ONE]
    out.append([(name, mode, limit, 1, d) for d, (name, mode, limit) in enumerate(NEW)])
    contending = [[(f"{name} | contending", mode, limit, 1, d),
                   (f"  its neighbour (batches) on GPU {d}", "batch", 60, 1, d)]
                  for d, (name, mode, limit) in enumerate(NEW)]
    out.append([c for pair in contending[:3] for c in pair])
    out.append([c for pair in contending[3:] for c in pair])
    # Long kernels beside a light neighbour (anchor.c: 90 % under a 50 % limit before).
    out.append([("long kernels (20 ms) | light neighbour", "long", 50, 1, 0),
                ("  its light neighbour (batches) on GPU 0", "batch", 10, 1, 0),
                ("long kernels (20 ms) | light neighbour", "long", 30, 1, 1),
                ("  its light neighbour (batches) on GPU 1", "batch", 10, 1, 1)])
    # The splits' limits alone, then the splits: nine busy processes at once starved each
    # other of a 2-core machine's CPU (a 90 % container then got 82 %, alone).
    out.append([("10 % alone", "batch", 10, 1, 0), ("90 % alone", "batch", 90, 1, 1),
                ("30 % alone", "batch", 30, 1, 2), ("40 % alone", "batch", 40, 1, 3)])
    out.append([("10/90: the 10", "batch", 10, 1, 4), ("10/90: the 90", "batch", 90, 1, 4),
                ("30/30/40: a 30", "batch", 30, 1, 5), ("30/30/40: the other 30", "batch", 30, 1, 5),
                ("30/30/40: the 40", "batch", 40, 1, 5)])
    return out


class Container(Tenant):
    """A limited container: its processes share one shared file (one budget)."""

    def __init__(self, base: dict, tmp: Path, spec: Spec, key: str, lib: Path, seconds: float):
        name, mode, limit, procs, device = spec
        self.limit, self.key, self.mode = limit, key, mode
        # Demand below the limit (see the module's docstring): shown, not counted.
        self.counted = not (mode == "tiny" and "contending" in name)
        self.cache = tmp / f"{key}.cache"
        env = shim_env(ShimSettings(sm_limit=limit, cache_path=str(self.cache)), base, lib=lib)
        super().__init__(name, device, [Worker(mode, seconds, env, device=device)
                                        for _ in range(procs)])
        self.wakeups = self.cpu = self.charged = 0.0

    def edges(self) -> Tuple[Dict[int, int], float]:
        """Timed sleeps so far per live process (shared file), and CPU seconds of the
        container's processes (/proc)."""
        usage = read_usage(self.cache)
        waits = {p.pid: p.sm_waits for p in usage.processes}
        self.charged = usage.devices[0].sm_share if usage.devices else 0.0
        cpu = 0.0
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu += (int(fields[11]) + int(fields[12])) / TICKS
            except (OSError, IndexError, ValueError):
                pass
        return waits, cpu


def measure(containers: List[Container], state_dir: Path, settle: float, window: float) -> None:
    """One round: shares from the timeline; wake-ups and CPU per second from the edges."""
    before, after = run_round(containers, state_dir, settle, window,
                              at_edges=lambda: [c.edges() for c in containers])
    for c, (wb, cb), (wa, ca) in zip(containers, before, after):
        c.wakeups = max((wa.get(pid, 0) - wb.get(pid, 0)) / window for pid in c.pids)
        c.cpu = (ca - cb) / window / len(c.pids)


def run_all(lib: Path, tag: str, tmp: Path, settle: float, window: float,
            only: Optional[str]) -> List[Container]:
    """Every round (or those in `only`) under one build of the shim."""
    seconds = settle + window + 2
    rows = []
    for i, specs in enumerate(rounds()):
        if only and str(i) not in only.split(","):
            continue
        base = sim_env(gpus=["40g/108"] * GPUS, state_dir=tmp / f"sim-{tag}-{i}")
        group = [Container(base, tmp, s, f"{tag}-{i}-{k}", lib, seconds)
                 for k, s in enumerate(specs)]
        measure(group, Path(base["HAMI_SIM_STATE"]), settle, window)
        rows += group
    return rows


def build_before(ref: str, tmp: Path) -> Path:
    """libvgpu.so built from git `ref`'s c/vgpu and c/include, in tmp."""
    src = tmp / "before"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "c/vgpu", "c/include",
                              "c/compat"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    subprocess.run(["make", "-s", "-C", str(src / "c/vgpu"), f"SHIM_OUT={src}/lib"], check=True)
    return src / "lib" / "libvgpu.so"


def launch_cost(tmp: Path, lib: Path) -> List[float]:
    """shim_overhead's C driver with a 99 % compute limit, so that its launches stay under
    budget: a zero-length kernel still costs the microsecond or so between its timing events
    (the host's launch latency, as on a real GPU), and at 50 % two million of them in a row
    made both limiters sleep. [direct ns, through the shim ns, added ns] per launch."""
    exe = tmp / "shim_overhead"
    if not exe.exists():
        subprocess.run(["cc", "-O2", str(HERE / "shim_overhead.c"), "-o", str(exe), "-ldl"],
                       check=True)
    base = sim_env(gpus=["40g/108"], state_dir=tmp / "sim-cost")
    env = shim_env(ShimSettings(sm_limit=99, cache_path=str(tmp / f"cost-{lib.parent.name}")),
                   base, lib=lib)
    env.pop("LD_PRELOAD")  # the driver loads the shim itself, next to the real driver
    # shim_overhead PAIRS LAUNCHES ROUNDS SHIM: a line per side (direct, shim), each its
    # medians (alloc+free, launch, meminfo) then what it adds to direct per round.
    out = subprocess.run([str(exe), "10", "20000", "101", str(lib)], env=env,
                         capture_output=True, text=True, timeout=600, check=True).stdout.split()
    return [float(out[1]), float(out[7]), float(out[10])]


def main() -> int:
    """Runs every round (before and after when asked) and prints the table and figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", action="store_true", help="on the simulated GPU (required: the "
                   "ground truth comes from the simulator's timeline)")
    p.add_argument("--before", metavar="REF", help="also run the shim built from git REF")
    p.add_argument("--settle", type=float, default=1.0, help="seconds before the window")
    p.add_argument("--window", type=float, default=3.0, help="seconds measured")
    p.add_argument("--rounds", help="only these rounds, e.g. 5,6 (0-based; for quick looks)")
    args = p.parse_args()
    if not args.sim:
        p.error("only --sim exists: on a real GPU run tests/gpu/test_compute_*.py")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        old_lib = build_before(args.before, tmp) if args.before else None
        old = run_all(old_lib, "old", tmp, args.settle, args.window, args.rounds) \
            if old_lib else None
        new = run_all(lib_path(), "new", tmp, args.settle, args.window, args.rounds)
        cost_old = launch_cost(tmp, old_lib) if old_lib else None
        cost_new = launch_cost(tmp, lib_path())
    report(new, old, cost_new, cost_old, args.before)
    return 0


def split(rows: List[Container], prefix: str) -> List[Container]:
    return [c for c in rows if c.name.startswith(prefix)]


def ratio_line(label: str, rows: Optional[List[Container]], prefix: str) -> str:
    """Achieved work of a split relative to the first member, against the limits' ratio."""
    if not rows:
        return "-"
    members = split(rows, prefix)
    got = [c.busy_ns / max(members[0].busy_ns, 1) for c in members]
    want = [c.limit / members[0].limit for c in members]
    worst = max(abs(g / w - 1) for g, w in zip(got, want))
    return (f"{label} " + ":".join(f"{g:.2f}" for g in got) + " (want " +
            ":".join(f"{w:.2f}" for w in want) + f"; worst {100 * worst:.1f}% off)")


def report(new: List[Container], old: Optional[List[Container]], cost_new: List[float],
           cost_old: Optional[List[float]], ref: Optional[str]) -> None:
    """Prints the table, the figures and, last, max_abs_error_pp (of the new limiter)."""
    before = f"before ({ref})" if ref else "before"
    print(f"{'workload':<44} {'limit':>5} {before:>13} {'after':>8} {'error':>7} "
          f"{'100 ms bins':>13} {'wake/s':>7} {'CPU %':>6} {'charged':>8}")
    for k, c in enumerate(new):
        was = f"{100 * old[k].share:.2f}%" if old else "-"
        mark = " " if c.counted else "*"
        print(f"{c.name:<43}{mark} {c.limit:>4}% {was:>13} {100 * c.share:>7.2f}% "
              f"{100 * c.share - c.limit:>+6.2f}  {100 * min(c.bins):>5.1f}.."
              f"{100 * max(c.bins):<5.1f}  {c.wakeups:>7.1f} {100 * c.cpu:>6.2f} "
              f"{c.charged:>7.2f}%")
    for label, prefix in (("10/90 work ratio", "10/90"), ("30/30/40 work ratio", "30/30/40")):
        if not split(new, prefix):
            continue
        print(f"{label}: after {ratio_line('', new, prefix)}; before {ratio_line('', old, prefix)}")
    cost = f"{cost_old[2]:.0f} ns before, " if cost_old else ""
    print(f"launch under budget (99% limit): {cost_new[0]:.0f} ns straight to the driver, "
          f"{cost_new[1]:.0f} ns through the shim: the limiter adds {cost}{cost_new[2]:.0f} ns "
          f"after (target <= 1000 ns)")
    wake = max(c.wakeups for c in new)
    print(f"limiter wake-ups: at most {wake:.1f} per second per process (target <= 100)")
    # The sync loop polls its own stream (the application's spinning, not the limiter's).
    waiting = [c for c in new if c.limit <= 10 and c.mode != "tiny" and not c.name.startswith("10/")]
    print("CPU of throttled processes while waiting (10 % limit; the 20 us sync loop polls "
          "its stream itself and is left out): " +
          ", ".join(f"{c.name.strip()} {100 * c.cpu:.2f}%" for c in waiting) +
          " of a core (target < 5 %)")
    print("* demand below the limit: not counted in max_abs_error_pp")
    if old:
        print(f"max_abs_error_pp before: {worst_error(old):.2f}")
    print(f"max_abs_error_pp={worst_error(new):.2f}")


def worst_error(rows: List[Container]) -> float:
    """The largest distance in points between a counted row's share and its limit."""
    return max(abs(100 * c.share - c.limit) for c in rows if c.counted)


if __name__ == "__main__":
    sys.exit(main())
