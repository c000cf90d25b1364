"""The compute limit on the simulated GPU: the share of device time a container gets, measured
from the simulator's own timeline (per-process busy intervals), never from the limiter's
figures. Real processes: the C load generator (c/loadgen) under the shim, one container per
simulated GPU, so that many cases run at once and the tier stays fast.

Tolerances: the limiter holds every case within a few tenths of a point on this machine
(bench/throttle_accuracy.py); the tests allow 2.5 points over 3 s windows so that a loaded
2-core machine does not make them flaky.
"""
import os
import signal
from pathlib import Path

import pytest

from hami_node.shim import ShimSettings, read_usage, shim_env
from hami_sim.gpu import sim_env
from hami_sim.gpu.load import Tenant, Worker, run_round

TOLERANCE = 2.5  # percentage points
GPUS = ["8g/108"] * 8

# (id, worker mode, limit %, processes, threads): one container each, on its own GPU.
CASES = [
    ("short-batches-25", "batch", 25, 1, None),
    ("sync-every-launch-50", "sync", 50, 1, None),
    ("graphs-25", "graph", 25, 1, None),
    ("long-kernels-75", "long", 75, 1, None),
    ("two-processes-30", "batch", 30, 2, None),
    ("four-threads-four-streams-40", "threads", 40, 1, 4),
    ("every-launch-entry-point-30", "routes", 30, 1, None),
]


class Container(Tenant):
    """Processes sharing one shim file (one budget) on one simulated GPU."""

    def __init__(self, base, tmp: Path, name, mode, device, procs=1, threads=None, limit=None,
                 env=None):
        self.limit = limit
        self.cache = tmp / f"{name}.cache"
        env = shim_env(ShimSettings(sm_limit=limit, cache_path=str(self.cache)), base) \
            if env is None else dict(env, CUDA_DEVICE_MEMORY_SHARED_CACHE=str(self.cache))
        super().__init__(name, device, [Worker(mode, 30, env, device, threads)
                                        for _ in range(procs)])

    def usage(self):
        return read_usage(self.cache)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Eight simulated GPUs for this module's rounds."""
    return sim_env(gpus=GPUS, state_dir=tmp_path_factory.mktemp("sim"))


@pytest.fixture(scope="module")
def round_one(base, tmp_path_factory):
    """Every case of CASES and a 10/90 pair, at once: 1 s of settling, a 3 s window."""
    tmp = tmp_path_factory.mktemp("round-one")
    limited = [Container(base, tmp, name, mode, device, procs, threads, limit)
               for device, (name, mode, limit, procs, threads) in enumerate(CASES)]
    pair = [Container(base, tmp, f"pair-{limit}", "batch", len(CASES), limit=limit)
            for limit in (10, 90)]
    everyone = limited + pair
    edges = run_round(everyone, Path(base["HAMI_SIM_STATE"]), 1.0, 3.0,
                      at_edges=lambda: [c.usage() for c in everyone])
    return {c.name: c for c in everyone}, edges, everyone


def charged_share(c):
    """The share the limit applies to. Kernels of one container that run side by side (its
    threads' streams, when their blocks fit) are each charged their own duration: such a
    container gets its limit in kernel time, summed over the run (its workers' own count),
    and less than that in device time (the timeline's union)."""
    if c.name.startswith("four-threads"):
        return sum(r["work_ns"] for r in c.results) / 1e9 / max(r["seconds"] for r in c.results)
    return c.share


@pytest.mark.parametrize("name, limit", [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_the_container_gets_its_limit(round_one, name, limit):
    share = charged_share(round_one[0][name])
    assert abs(100 * share - limit) <= TOLERANCE, (100 * share, limit)


def test_ten_and_ninety_split_a_saturated_gpu_one_to_nine(round_one):
    low, high = round_one[0]["pair-10"], round_one[0]["pair-90"]
    assert 8.1 <= high.busy_ns / low.busy_ns <= 9.9, (low.share, high.share)
    assert low.share + high.share > 0.97  # the GPU stays busy: nobody lost its turn


@pytest.mark.parametrize("name", ["short-batches-25", "two-processes-30", "graphs-25",
                                  "four-threads-four-streams-40"])
def test_no_on_off_oscillation_at_100ms(round_one, name):
    c = round_one[0][name]
    assert min(c.bins) > 0 and max(c.bins) < 1, c.bins
    assert all(abs(100 * (b - c.share)) <= 12 for b in c.bins), [round(100 * b) for b in c.bins]


def test_at_most_100_wakeups_per_second_per_process(round_one):
    _, (before, after), everyone = round_one
    for c, b, a in zip(everyone, before, after):
        waits = {p.pid: p.sm_waits for p in b.processes}
        for p in a.processes:
            assert (p.sm_waits - waits.get(p.pid, 0)) / 3.0 <= 100, (c.name, p)
    assert any(p.sm_waits for u in after for p in u.processes)  # they did wait


def test_the_shared_file_shows_the_limit_and_the_share(round_one):
    _, (_, after), everyone = round_one
    for c, usage in zip(everyone, after):
        (device,) = usage.devices
        assert device.sm_limit == c.limit
        share = charged_share(c)
        assert abs(device.sm_share - 100 * share) <= 5, (c.name, device.sm_share, share)
        assert len(usage.processes) == len(c.workers) and device.sm_launches > 0


@pytest.fixture(scope="module")
def round_two(base, tmp_path_factory):
    """The switches: policy, unlimited values, a per-device limit, a process killed."""
    tmp = tmp_path_factory.mktemp("round-two")
    per_device = shim_env(ShimSettings(device_sm_limits={5: 20}), base)
    cs = [Container(base, tmp, "disable", "batch", 0,
                    env=shim_env(ShimSettings(sm_limit=20, policy="disable"), base)),
          Container(base, tmp, "force", "batch", 1,
                    env=shim_env(ShimSettings(sm_limit=20, policy="force"), base)),
          Container(base, tmp, "zero", "batch", 2, limit=0),
          Container(base, tmp, "hundred", "batch", 3, limit=100),
          Container(base, tmp, "above-hundred", "batch", 4, limit=150),
          Container(base, tmp, "indexed-5", "batch", 5, env=per_device),
          Container(base, tmp, "indexed-not-6", "batch", 6, env=per_device),
          Container(base, tmp, "killed-one-of-two", "batch", 7, procs=2, limit=20)]
    victim = cs[-1].workers[0]

    def kill_at_window_start():
        try:
            os.killpg(victim.pid, signal.SIGKILL)
        except ProcessLookupError:  # the window's end: it is gone already
            pass

    run_round(cs, Path(base["HAMI_SIM_STATE"]), 0.7, 2.0, at_edges=kill_at_window_start)
    return {c.name: c for c in cs}


@pytest.mark.parametrize("name, low, high", [
    ("disable", 60, 100), ("force", 17.5, 22.5), ("zero", 60, 100), ("hundred", 60, 100),
    ("above-hundred", 60, 100), ("indexed-5", 17.5, 22.5), ("indexed-not-6", 60, 100),
    ("killed-one-of-two", 17.5, 22.5),
], ids=["policy-disable-is-unlimited", "policy-force-is-the-default", "limit-0-is-none",
        "limit-100-is-none", "limit-150-is-none", "per-device-limit", "other-device-unlimited",
        "a-killed-process-leaks-no-budget"])
def test_switches_and_values(round_two, name, low, high):
    assert low <= 100 * round_two[name].share <= high, 100 * round_two[name].share
