"""Benchmarks print their figures beside a same-run reference, as ratios (bench/benchlib.py)."""
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import benchlib  # noqa: E402


def test_ratio_line_and_machine(capsys):
    assert benchlib.ratio("get", 5000, 6250, "req/s", "req/s of the floor") == 0.8
    assert benchlib.ratio("idle", 3.0, 0, "CPU s", "CPU s") != benchlib.ratio(
        "idle", 3.0, 0, "CPU s", "CPU s")                     # nan: no ratio to a zero
    out = capsys.readouterr().out
    assert "get: 5000 req/s vs 6250 req/s of the floor (same run): 0.8x" in out
    assert "get_ratio=0.8\n" in out and "idle: 3 CPU s vs 0 CPU s: no ratio" in out
    assert "idle_ratio" not in out
    assert re.search(r"CPUs, load [\d.]+, ", benchlib.machine())


def test_simgpu_bench_prints_its_ratios():
    done = subprocess.run([sys.executable, str(BENCH / "simgpu_bench.py"), "--launches",
                           "20000"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("machine: ")
    ratios = dict(re.findall(r"^(\w+)_ratio=([\d.]+)$", done.stdout, re.M))
    assert set(ratios) == {"launch", "timeline"}
    assert float(ratios["launch"]) > 1            # a launch does more than a context lookup
    assert 0.95 < float(ratios["timeline"]) < 2   # 20 x 5 ms kernels take about 100 ms


def test_shim_overhead_prints_its_ratios_to_the_direct_calls():
    done = subprocess.run([sys.executable, str(BENCH / "shim_overhead.py"), "--pairs", "100",
                           "--launches", "1000", "--rounds", "5", "--no-startup"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("machine: ")
    ratios = dict(re.findall(r"^(\w+)_ratio=([\d.]+)$", done.stdout, re.M))
    assert set(ratios) == {"alloc_free_pair", "launch"}, done.stdout
    assert all(float(r) > 0 for r in ratios.values())


def test_mig_placement_prints_ours_against_hamis_smallest_fit():
    """The figure README's MIG section quotes (issue 26), on one seed of the openb trace."""
    done = subprocess.run([sys.executable, str(BENCH / "mig_placement.py"), "--seeds", "42"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("machine: ")
    ratios = {k: float(v) for k, v in re.findall(r"^(\w+)_ratio=([\d.]+)$", done.stdout, re.M)}
    assert set(ratios) == {"mig_placed", "mig_full_at", "mig_compute"}, done.stdout
    assert ratios["mig_placed"] >= 1 and ratios["mig_full_at"] >= 0.99, done.stdout
    assert ratios["mig_compute"] > 1, done.stdout        # the larger variant's SMs
