"""Benchmark of the libvgpu shim on the simulated GPU: what it adds to a cuMemAlloc+cuMemFree
pair, to a cuLaunchKernel and to a cuMemGetInfo (a C driver times them through the shim and
straight to the driver, in one process), and what it adds to start-up when 100 processes start
at once.

With --before LIBVGPU (a build of the shim before a change), the same run also times that
build side by side, so a change's cost (e.g. the footprint refresh of issue 17: amortised on
allocations, none on launches, every time in cuMemGetInfo) reads as before/after figures
measured under the same load.

Targets (issue 3): <= 1 us per alloc/free pair, <= 50 ns per launch without a compute limit,
100 processes starting at once add no more than 2x the wall time of one.

usage: python bench/shim_overhead.py [--pairs N] [--launches N] [--rounds N] [--procs N]
                                     [--before LIBVGPU] [--no-startup]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import print_machine, ratio
from hami_node.shim import ShimSettings, lib_path, shim_env
from hami_sim.gpu import sim_env

HERE = Path(__file__).resolve().parent


def build(tmp: Path) -> Path:
    """Compiles the C driver."""
    exe = tmp / "shim_overhead"
    subprocess.run(["cc", "-O2", str(HERE / "shim_overhead.c"), "-o", str(exe), "-ldl"],
                   check=True)
    return exe


def start_many(exe: Path, env: dict, count: int):
    """Starts `count` processes at once: (wall seconds until all ended, cuInit ns each)."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([str(exe), "startup"], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(count)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    wall = time.monotonic() - t0
    if any(p.returncode for p in procs):
        raise SystemExit("a start-up process failed")
    return wall, [float(o) for o in outs]


def startup_figures(exe: Path, tmp: Path, count: int, rounds: int) -> None:
    """Prints the start-up figures with and without the shim (alternating, medians)."""
    plain = sim_env(gpus="16g", state_dir=tmp / "state")
    shimmed = shim_env(ShimSettings(memory_limit=8 << 30, cache_path=str(tmp / "vgpu.cache")),
                       plain)
    start_many(exe, shimmed, 1)  # the shared file exists from here on, as in a live container
    one = statistics.median(start_many(exe, shimmed, 1)[0] for _ in range(rounds))
    one_plain = statistics.median(start_many(exe, plain, 1)[0] for _ in range(rounds))
    walls, walls_plain, inits, inits_plain = [], [], [], []
    for _ in range(rounds):  # alternate, so that load from elsewhere hits both alike
        wall, init = start_many(exe, plain, count)
        walls_plain.append(wall)
        inits_plain += init
        wall, init = start_many(exe, shimmed, count)
        walls.append(wall)
        inits += init
    many, many_plain = statistics.median(walls), statistics.median(walls_plain)
    added = statistics.median(w - p for w, p in zip(walls, walls_plain))
    print(f"start-up, one process: {one * 1e3:.1f} ms with the shim, {one_plain * 1e3:.1f} ms "
          "without")
    print(f"start-up, {count} at once: {many * 1e3:.0f} ms with the shim, {many_plain * 1e3:.0f} "
          f"ms without (medians of {rounds}): the shim adds {added * 1e3:+.0f} ms = "
          f"{added / one:+.1f}x one process (target <= 2x)")
    ratio(f"startup_{count}", many * 1e3, many_plain * 1e3, "with the shim", "without", " ms")
    print(f"cuInit in each of the {count}: median {statistics.median(inits) / 1e3:.0f} us, "
          f"p90 {statistics.quantiles(inits, n=10)[-1] / 1e3:.0f} us with the shim; median "
          f"{statistics.median(inits_plain) / 1e3:.0f} us, p90 "
          f"{statistics.quantiles(inits_plain, n=10)[-1] / 1e3:.0f} us without")


def report(rows: list) -> None:
    """Prints the driver's rows: straight to the driver, this shim, and the --before build if
    given (each: pair, launch, cuMemGetInfo ns, then the three added costs); this shim's
    ratios to the direct calls of the same run."""
    direct = rows[0]
    print(f"direct to the driver: alloc+free pair {direct[0]:.0f} ns, launch "
          f"{direct[1]:.1f} ns, cuMemGetInfo {direct[2]:.0f} ns")
    for name, row in zip(["this shim", "before (--before)"], rows[1:]):
        print(f"{name}: alloc+free pair {row[0]:.0f} ns (adds {row[3]:.0f} ns, target <= "
              f"1000), launch {row[1]:.1f} ns (adds {row[4]:.1f} ns, target <= 50), "
              f"cuMemGetInfo {row[2]:.0f} ns (adds {row[5]:.0f} ns)")
    if len(rows) == 3:
        now, before = rows[1], rows[2]
        print(f"this shim - before: alloc+free pair {now[3] - before[3]:+.0f} ns, launch "
              f"{now[4] - before[4]:+.1f} ns, cuMemGetInfo {now[5] - before[5]:+.0f} ns "
              "(differences of the medians of per-round added costs)")
    ratio("alloc_free_pair", rows[1][0], direct[0], "with the shim", "straight to the driver",
          " ns")
    ratio("launch", rows[1][1], direct[1], "with the shim", "straight to the driver", " ns")


def main() -> int:
    """Builds the driver, runs it against the simulator, prints the figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=1000, help="alloc/free pairs per round")
    p.add_argument("--launches", type=int, default=20000, help="launches per round")
    p.add_argument("--rounds", type=int, default=201, help="alternating rounds of each")
    p.add_argument("--procs", type=int, default=100)
    p.add_argument("--before", metavar="LIBVGPU", help="another libvgpu.so build to time "
                   "side by side (e.g. built from the commit before a change)")
    p.add_argument("--no-startup", action="store_true", help="skip the start-up figures")
    args = p.parse_args()
    print_machine()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        exe = build(tmp)
        env = shim_env(ShimSettings(memory_limit=8 << 30, cache_path=str(tmp / "bench.cache")),
                       sim_env(gpus="16g", state_dir=tmp / "state"))
        env.pop("LD_PRELOAD")  # the driver loads the shim itself, next to the real driver
        libs = [str(lib_path())] + ([args.before] if args.before else [])
        out = subprocess.run([str(exe), str(args.pairs), str(args.launches), str(args.rounds),
                              *libs], env=env, capture_output=True, text=True, timeout=900)
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            return 1
        report([list(map(float, line.split())) for line in out.stdout.splitlines()])
        if args.no_startup:
            return 0
        startup_figures(exe, tmp, args.procs, 7)
    return 0


if __name__ == "__main__":
    sys.exit(main())
