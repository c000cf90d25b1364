"""The soak's pure parts: the fault schedule, the pod mix drawn from the openb trace, the
report's percentiles and its verdict."""
from __future__ import annotations

import math
import time

from hami_common import constants as C
from hami_sim.audit.model import ANNO_EXPECT, Violation
from hami_sim.soak.faults import GAP_SLACK_S, Gaps
from hami_sim.soak.faults import PROCESS_KINDS as KINDS
from hami_sim.soak.report import SoakReport, percentile
from hami_sim.soak.run import OVERLAP_S, WARMUP_S, SoakOptions, schedule
from hami_sim.soak.workload import LABEL, MAX_GPUS, MIN_SHARE, Mix


def test_the_short_schedule_hits_every_kind_once_some_overlapping():
    plan = schedule(SoakOptions(duration_s=120, fault_gap_s=12))
    assert sorted(kind for _, kind in plan) == sorted(KINDS)
    assert plan[0] == (WARMUP_S, "gpu-xid")              # the slowest recovery first
    gaps = [b[0] - a[0] for a, b in zip(plan, plan[1:])]
    assert OVERLAP_S in gaps and max(t for t, _ in plan) < 120 * 0.8


def test_an_hour_cycles_through_the_kinds_and_a_seed_changes_the_order():
    plan = schedule(SoakOptions())
    counts = {k: sum(1 for _, kind in plan if kind == k) for k in KINDS}
    assert min(counts.values()) >= 9 and max(counts.values()) - min(counts.values()) <= 1
    other = schedule(SoakOptions(seed=2))
    assert [k for _, k in other[:9]] != [k for _, k in plan[:9]]
    assert schedule(SoakOptions(kinds=())) == []


def test_the_mix_fits_the_node_and_says_how_each_pod_ends():
    mix = Mix("run-1", seed=3)
    pods = [mix.next() for _ in range(400)]
    assert len({p.name for p in pods}) == 400
    gpu = [p for p in pods if p.gpu]
    assert 0 < len(gpu) < len(pods)                      # the trace's CPU-only pods too
    for p in pods:
        meta = p.manifest["metadata"]
        assert meta["labels"][LABEL] == "run-1" and meta["annotations"][ANNO_EXPECT] == \
            "Succeeded"
        limits = p.manifest["spec"]["containers"][0]["resources"].get("limits", {})
        assert bool(limits) == p.gpu
        if p.gpu:
            assert 1 <= int(limits[C.RESOURCE_GPU]) <= MAX_GPUS
            if C.RESOURCE_CORES in limits:
                assert int(limits[C.RESOURCE_CORES]) >= MIN_SHARE
    assert any(p.delete_after_s for p in pods)


def test_percentiles_and_the_verdict():
    assert percentile([3, 1, 2], 50) == 2 and percentile(list(range(1, 101)), 99) == 99
    assert math.isnan(percentile([], 50))
    report = SoakReport(120, 0.2, faults={"etcd-paused": [7.5]}, planned=1)
    assert report.ok and report.injected == 1
    assert "etcd-paused" in report.text() and "violations: 0" in report.text()
    report.audit_errors.append("KeyError: 'spec'")
    assert not report.ok and "AUDITOR ERROR: KeyError" in report.text()
    report.audit_errors.clear()
    report.violations.append(Violation("lock", "node-a locked for 600 s", ("node/node-a",)))
    assert not report.ok and "node-a locked" in report.text()



def test_a_plugin_gap_covers_its_fault_give_or_take_the_slack():
    gaps = Gaps()
    killed = gaps.open("hami-node-killed")
    killed[1:] = [100.0, 103.0]
    gaps.open("kubelet-restarted")[1] = 200.0          # still open: until now
    assert gaps.at(101.0) == "hami-node-killed"
    assert gaps.at(103.0 + GAP_SLACK_S) == "hami-node-killed"
    assert gaps.at(100.0 - GAP_SLACK_S - 0.1) == "" and gaps.at(150.0) == ""
    assert gaps.at(time.time()) == "kubelet-restarted"


def test_an_ending_is_excused_only_inside_the_gap_of_its_kind():
    from types import SimpleNamespace
    from hami_sim.soak.run import Soak
    faults = SimpleNamespace(plugin_gaps=Gaps(), gpu_failures=Gaps(), runtime_restarts=Gaps())
    lost = {"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {
        "exitCode": 255, "reason": "Unknown", "finishedAt": "2026-12-04T15:16:49Z"}}}]}}
    soak = SimpleNamespace(faults=faults)
    assert Soak._excuse(soak, lost) is None                       # no restart then
    faults.plugin_gaps.gaps.append(["hami-node-killed", 1796397400.0, 1796397420.0])
    assert Soak._excuse(soak, lost) is None                       # a gap of another kind
    faults.runtime_restarts.gaps.append(["containerd-restarted", 1796397408.0, 1796397410.0])
    assert "while containerd restarted" in Soak._excuse(soak, lost)
