"""The compute limit when a kernel's cost is not what its signature suggests, and under
contention (issue 18), on the simulated GPU that time-slices between processes (2 ms) and
stamps events when it reaches them. Shares come from the simulator's timeline, never from the
limiter's figures; C load (c/loadgen throttle_worker) under the shim, one case per GPU.

The limiter built before issue 18 fails these: the 50x mixed signature ran at ~96 % under a
30 % limit, contended samples overcharged a 10/90 pair to about 1/90, a second process of
the same container halved the share. The one that rounded a short sample's excess to whole
slices left a trio member at 11 % of its 30 (CI); one that took the base from raw
measurements followed a growing cost but overcharged long kernels shared three ways, one that
took it from own times alone ran the growing-contending case at 36.7 %. Tolerances allow for a loaded 2-core machine (2.5
points over a 2 s window; the benchmark shows the figures over 3 s windows).
"""
import os
from pathlib import Path

import pytest

from hami_node.shim import ShimSettings, read_usage, shim_env
from hami_sim.gpu import sim_env
from hami_sim.gpu.load import Tenant, Worker, run_round

TOLERANCE = 2.5
TICKS = os.sysconf("SC_CLK_TCK")

CONTENDED_TOLERANCE = 3.5  # the limiter that ignored contention was 15 to 60 points off

# (name, mode, limit, device): three rounds (fewer processes at once on a small machine);
# containers sharing a device contend.
ALONE = [
    ("mixed-50x-30", "mixed", 30, 0),
    ("growing-30", "grow", 30, 1),
    ("persistent-30", "persistent", 30, 2),
    ("many-shapes-30", "shapes", 30, 3),
    ("sync-loop-20us-10", "tiny", 10, 4),
    ("long-kernels-10", "long", 10, 5),
]
PAIRS = [
    ("mixed-contending-30", "mixed", 30, 0), ("mixed-neighbour-60", "batch", 60, 0),
    ("split-10", "batch", 10, 1), ("split-90", "batch", 90, 1),
    # A cost that grows while the device is shared: its samples exceed the signature's base
    # by less than a neighbour's turn, the limiter must not take that for the neighbour.
    ("growing-contending-30", "grow", 30, 2), ("growing-neighbour-60", "batch", 60, 2),
    # Long kernels beside a light neighbour: each sample loses a neighbour's slice it mostly
    # did not take; NVML's per-process count (anchor.c) charges the rest (64 % of 50 without).
    ("long-beside-light-50", "long", 50, 3), ("light-neighbour-10", "batch", 10, 3),
]
TRIO = [("trio-30a", "batch", 30, 4), ("trio-30b", "batch", 30, 4), ("trio-40", "batch", 40, 4)]
TOGETHER = PAIRS + TRIO
CASES = ALONE + TOGETHER


class Container(Tenant):
    def __init__(self, base, tmp: Path, name, mode, limit, device):
        self.limit, self.key = limit, (mode, limit, device)
        self.cache = tmp / f"{name}.cache"
        env = shim_env(ShimSettings(sm_limit=limit, cache_path=str(self.cache)), base)
        super().__init__(name, device, [Worker(mode, 30, env, device)])

    def edges(self):
        """This container's timed sleeps and CPU seconds so far."""
        (proc,) = read_usage(self.cache).processes or [None]
        stat = Path(f"/proc/{self.pids[0]}/stat").read_text().rsplit(")", 1)[1].split()
        return (proc.sm_waits if proc else 0), (int(stat[11]) + int(stat[12])) / TICKS


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    out = {}
    # Three rounds: fewer busy processes at once on a 2-core machine.
    for label, cases in (("alone", ALONE), ("pairs", PAIRS), ("trio", TRIO)):
        tmp = tmp_path_factory.mktemp(label)
        base = sim_env(gpus=["40g/108"] * 6, state_dir=tmp / "sim")
        cs = [Container(base, tmp, *case) for case in cases]
        before, after = run_round(cs, tmp / "sim", 1.0, 2.0,
                                  at_edges=lambda: [c.edges() for c in cs])
        for c, (w0, c0), (w1, c1) in zip(cs, before, after):
            c.wakeups, c.cpu = (w1 - w0) / 2.0, (c1 - c0) / 2.0
        out.update({c.name: c for c in cs})
    return out


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_every_container_gets_its_limit(truth, name):
    c = truth[name]
    tolerance = CONTENDED_TOLERANCE if (name, *c.key) in TOGETHER else TOLERANCE
    assert abs(100 * c.share - c.limit) <= tolerance, (name, 100 * c.share, c.bins)


def test_splits_hold_their_ratios(truth):
    ratio = truth["split-90"].busy_ns / truth["split-10"].busy_ns
    assert 9 * 0.9 <= ratio <= 9 * 1.1, ratio
    a, b, c = (truth[n].busy_ns for n in ("trio-30a", "trio-30b", "trio-40"))
    assert 0.9 <= b / a <= 1.1 and 4 / 3 * 0.9 <= c / a <= 4 / 3 * 1.1, (a, b, c)


def test_waits_are_few_and_cost_no_cpu(truth):
    for c in truth.values():
        assert c.wakeups <= 100, (c.name, c.wakeups)
    # A container throttled to 10 % with 20 ms kernels mostly waits: it must sleep, not spin.
    assert truth["long-kernels-10"].cpu < 0.05, truth["long-kernels-10"].cpu


@pytest.fixture(scope="module")
def priorities(tmp_path_factory):
    """Two containers limited to 70 % on each of two GPUs, both saturating: on GPU 0 one has
    CUDA_TASK_PRIORITY=1 (lower), on GPU 1 both have the default 0."""
    tmp = tmp_path_factory.mktemp("priority")
    base = sim_env(gpus=["40g/108"] * 2, state_dir=tmp / "sim")

    def tenant(name, device, priority):
        env = shim_env(ShimSettings(sm_limit=70, priority=priority,
                                    cache_path=str(tmp / f"{name}.cache")), base)
        return Tenant(name, device, [Worker("batch", 30, env, device)])

    ts = [tenant("high", 0, 0), tenant("low", 0, 1), tenant("even-a", 1, 0),
          tenant("even-b", 1, 0)]
    run_round(ts, tmp / "sim", 3.0, 2.0)  # the rule follows NVML's 1 s utilization
    return {t.name: 100 * t.share for t in ts}


def test_higher_priority_gets_device_time_first(priorities):
    p = priorities
    # Time slices alone split a saturated GPU evenly whatever the limits...
    assert abs(p["even-a"] - p["even-b"]) <= 8, p
    # ...priority gives the higher one its limit, the lower one what it leaves (less the
    # 5 points of headroom the rule keeps), and the device stays busy.
    # (On a loaded machine the rule, which follows NVML's 1 s utilization, may still be on
    # its way: the bounds ask for a clear lead, not the end state.)
    assert p["high"] >= 55 and p["low"] >= 20 and p["high"] - p["low"] >= 12, p
    assert p["high"] + p["low"] >= 88, p
