"""The auditor's rules on hand-made snapshots: each passes on a sound cluster and reports the
objects involved when its rule is broken."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from hami_common import constants as C
from hami_common import node_lock, node_register, pod_devices
from hami_common.node_register import DeviceInfo
from hami_common.pod_devices import ContainerDevice
from hami_sim.audit import checks
from hami_sim.audit.auditor import Auditor
from hami_sim.audit.collect import pod_of_pid
from hami_sim.audit.model import ANNO_EXPECT, Bounds, DriverProcess, Snapshot

NOW = datetime(2026, 12, 4, 6, 0, 0, tzinfo=timezone.utc)
MIB = 1 << 20
GPU0, GPU1 = "GPU-aaaa", "GPU-bbbb"


def stamp(seconds_ago: float) -> str:
    return node_lock.format_time(NOW - timedelta(seconds=seconds_ago))


def node(lock: str = "", healthy: bool = True) -> dict:
    devices = [DeviceInfo(GPU0, 0, 10, 40960, 100, "NVIDIA-A100", health=healthy),
               DeviceInfo(GPU1, 1, 10, 15360, 100, "NVIDIA-T4", health=healthy)]
    annotations = {C.ANNO_NODE_REGISTER: node_register.encode(devices)}
    if lock:
        annotations[C.ANNO_NODE_LOCK] = lock
    return {"metadata": {"name": "node-a", "annotations": annotations}}


def pod(name: str, devices=(), phase: str = "Running", node_name: str = "node-a",
        limits=None, age: float = 10, uid: str = "", expect: str = "", **status) -> dict:
    annotations = {}
    if devices:
        annotations[C.ANNO_DEVICES_ALLOCATED] = pod_devices.encode(
            [[ContainerDevice(u, m, c) for u, m, c in devices]])
    if expect:
        annotations[ANNO_EXPECT] = expect
    spec = {"schedulerName": C.SCHEDULER_NAME,
            "containers": [{"name": "main", "resources": {"limits": limits or {}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                         "creationTimestamp": stamp(age), "annotations": annotations},
            "spec": spec, "status": {"phase": phase, **status}}


def snap(**kw) -> Snapshot:
    kw.setdefault("nodes", [node()])
    return Snapshot(now=NOW, **kw)


def test_overcommit_passes_when_shares_fit_and_names_the_pods_when_not():
    fit = [pod("a", [(GPU0, 20000, 50)]), pod("b", [(GPU0, 20000, 50)]),
           pod("done", [(GPU0, 40000, 100)], phase="Succeeded")]
    assert checks.overcommit(snap(pods=fit)) == []
    over = fit + [pod("c", [(GPU0, 2000, 10)])]
    (v,) = checks.overcommit(snap(pods=over))
    assert v.check == "overcommit" and "memory 42000 MiB of 40960" in v.message
    assert "cores 110% of 100" in v.message
    assert v.objects == (f"gpu/{GPU0}", "pod/default/a", "pod/default/b", "pod/default/c")


def test_overcommit_whole_card_shared_and_unknown_gpu():
    pods = [pod("whole", [(GPU1, 15360, 100)]), pod("small", [(GPU1, 0, 0)]),
            pod("ghost", [("GPU-nobody", 10, 10)])]
    found = {v.objects[0]: v.message for v in checks.overcommit(snap(pods=pods))}
    assert "whole-card task shares it" in found[f"gpu/{GPU1}"]
    assert "no node registered it" in found["gpu/GPU-nobody"]


def test_unbound_pods_count_for_nothing():
    assert checks.overcommit(snap(pods=[pod("a", [(GPU0, 40960, 100)]),
                                        pod("b", [(GPU0, 40960, 100)], node_name="")])) == []


def running_with_container(name: str, devices, cid: str) -> dict:
    p = pod(name, devices)
    p["status"]["containerStatuses"] = [{"name": "main", "containerID": f"containerd://{cid}"}]
    return p


def test_process_caps_by_the_driver_count():
    p = running_with_container("capped", [(GPU0, 1024, 30)], "c1")
    within = [DriverProcess(GPU0, 100, 600 * MIB, "uid-capped", "c1"),
              DriverProcess(GPU0, 101, 424 * MIB, "uid-capped", "c1"),
              DriverProcess(GPU1, 7, 9000 * MIB, "", "")]            # not a pod's process
    assert checks.process_caps(snap(pods=[p], processes=within)) == []
    over = within + [DriverProcess(GPU0, 102, 2 * MIB, "uid-capped", "c1")]
    (v,) = checks.process_caps(snap(pods=[p], processes=over))
    assert "over its cap of 1024 MiB" in v.message
    assert v.objects == ("pod/default/capped", "container/main", f"gpu/{GPU0}", "pid/100",
                         "pid/101", "pid/102")
    assert checks.process_caps(snap(pods=[p], processes=over), Bounds(cap_slack_bytes=2 * MIB)) \
        == []


def test_process_on_a_gpu_it_was_not_given():
    p = running_with_container("wanderer", [(GPU0, 1024, 30)], "c1")
    (v,) = checks.process_caps(snap(pods=[p], processes=[
        DriverProcess(GPU1, 5, 10 * MIB, "uid-wanderer", "c1")]))
    assert "which it was not given" in v.message and f"gpu/{GPU1}" in v.objects
    # Its container not in the pod's status yet (kubelet reports it a moment later).
    assert checks.process_caps(snap(pods=[p], processes=[
        DriverProcess(GPU1, 5, 10 * MIB, "uid-wanderer", "c2")])) == []


A100_HALF = {C.RESOURCE_GPU: "1", C.RESOURCE_MEM: "20000", C.RESOURCE_CORES: "50"}


def later(snapshot: Snapshot, seconds: float) -> Snapshot:
    snapshot.now = NOW + timedelta(seconds=seconds)
    return snapshot


def test_pending_while_a_node_has_had_room_for_it_longer_than_the_bound():
    room = {}
    waiting = pod("waiting", phase="Pending", node_name="", limits=A100_HALF, age=10,
                  conditions=[{"type": "PodScheduled", "status": "False",
                               "message": "0/1 nodes are available"}])
    assert checks.pending(snap(pods=[waiting]), room_since=room) == []     # room seen now
    (v,) = checks.pending(later(snap(pods=[waiting]), 100), room_since=room)
    assert v.objects == ("pod/default/waiting", "node/node-a") and "0/1 nodes" in v.message
    assert "room for it for 100 s" in v.message


def test_room_that_comes_and_goes_starts_the_clock_again():
    room = {}
    waiting = pod("waiting", phase="Pending", node_name="", limits=A100_HALF, age=300)
    blocker = pod("blocker", [(GPU0, 30000, 60)])
    other = pod("other", [(GPU1, 15360, 100)])
    assert checks.pending(snap(pods=[waiting]), room_since=room) == []
    # The room was taken meanwhile (a smaller pod got there first): no violation, and ...
    assert checks.pending(later(snap(pods=[waiting, blocker, other]), 60),
                          room_since=room) == [] and room == {}
    # ... room again counts from now, though the pod is old.
    assert checks.pending(later(snap(pods=[waiting]), 80), room_since=room) == []
    assert checks.pending(later(snap(pods=[waiting]), 160), room_since=room) == []
    assert len(checks.pending(later(snap(pods=[waiting]), 171), room_since=room)) == 1


@pytest.mark.parametrize("blockers,healthy", [
    ([pod("big0", [(GPU0, 30000, 60)]), pod("big1", [(GPU1, 15360, 100)])], True),
    ([], False)], ids=["no-room", "gpus-unhealthy"])
def test_pending_is_fine_when_no_gpu_could_hold_it(blockers, healthy):
    waiting = pod("waiting", phase="Pending", node_name="", limits=A100_HALF, age=300)
    room = {"default/waiting": NOW - timedelta(seconds=1000)}    # room long ago, none now
    assert checks.pending(snap(pods=blockers + [waiting], nodes=[node(healthy=healthy)]),
                          room_since=room) == [] and room == {}
    # The same pod with the same memory and room now: the rule does fire.
    room = {"default/waiting": NOW - timedelta(seconds=1000)}
    assert len(checks.pending(snap(pods=[waiting]), room_since=room)) == 1


def test_bound_but_not_started():
    stuck = pod("stuck", [(GPU0, 100, 0)], phase="Pending", age=400, conditions=[
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(390)}])
    (v,) = checks.pending(snap(pods=[stuck]))
    assert "bound to node-a 390 s ago and not started" in v.message


def test_lock_age():
    assert checks.locks(snap(nodes=[node(lock=f"{stamp(5)},default,p")])) == []
    (v,) = checks.locks(snap(nodes=[node(lock=f"{stamp(600)},default,p")]))
    assert v.objects == ("node/node-a", "pod/default/p") and "600 s" in v.message
    (bad,) = checks.locks(snap(nodes=[node(lock="yesterday,x")]))
    assert "malformed" in bad.message


def test_leftovers_after_their_pod_once_older_than_the_bound():
    seen = {}
    live = pod("live", uid="u-live")
    claim = {"metadata": {"name": "c", "namespace": "default",
                          "ownerReferences": [{"kind": "Pod", "uid": "u-gone"}]}}
    first = snap(pods=[live], accounting_dirs=["u-live_main", "u-gone_main"], claims=[claim])
    assert checks.leftovers(first, seen) == []
    later = snap(pods=[live], accounting_dirs=["u-live_main", "u-gone_main"], claims=[claim])
    later.now = NOW + timedelta(seconds=500)
    found = checks.leftovers(later, seen)
    assert sorted(v.objects[0] for v in found) == ["accounting/u-gone_main",
                                                    "resourceclaim/default/c"]
    cleaned = snap(pods=[live], accounting_dirs=["u-live_main"])
    assert checks.leftovers(cleaned, seen) == [] and seen == {}


def test_endings_as_the_workload_says():
    ok = pod("ok", phase="Succeeded", expect="Succeeded")
    bad = pod("bad", phase="Failed", expect="Succeeded", reason="UnexpectedAdmissionError",
              message="Allocate failed")
    running = pod("running", expect="Succeeded")
    stopped = pod("stopped", phase="Failed", expect="Succeeded")    # deleted while running
    stopped["metadata"]["deletionTimestamp"] = stamp(1)
    (v,) = checks.endings(snap(pods=[ok, bad, running, stopped]))
    assert v.objects == ("pod/default/bad",) and "UnexpectedAdmissionError" in v.message


def refused(name: str, message: str, at: str) -> dict:
    p = pod(name, phase="Failed", expect="Succeeded", reason="UnexpectedAdmissionError",
            message=message)
    p["metadata"]["managedFields"] = [
        {"manager": "kube-scheduler", "time": "2026-12-04T10:54:01Z"},
        {"manager": "kubelet", "operation": "Update", "subresource": "status", "time": at}]
    return p


def test_kubelets_refusal_for_a_disconnected_plugin_is_excused_only_when_the_caller_says():
    gap = refused("gap", "Allocate failed due to no healthy devices present; cannot allocate "
                  "unhealthy devices nvidia.com/gpu, which is unexpected", "2026-12-04T10:54:05Z")
    other = refused("other", "Allocate failed due to rpc error: boom", "2026-12-04T10:54:05Z")
    at = checks.refused_by_kubelet_at(gap)
    assert at == datetime(2026, 12, 4, 10, 54, 5, tzinfo=timezone.utc)
    assert checks.refused_by_kubelet_at(other) is None
    # The plugin killed inside kubelet's Allocate call (the installed soak's seed 1 met it);
    # the plugin refusing with a code of its own is not the gap.
    mid_call = refused("mid-call", "Allocate failed due to rpc error: code = Unavailable desc = "
                       "error reading from server: EOF, which is unexpected",
                       "2026-12-04T10:54:06Z")
    assert checks.refused_by_kubelet_at(mid_call) == at.replace(second=6)
    assert checks.refused_by_kubelet_at(refused(
        "own", "Allocate failed due to rpc error: code = InvalidArgument desc = no devices",
        "2026-12-04T10:54:06Z")) is None
    assert checks.refused_by_kubelet_at(pod("ok", phase="Succeeded")) is None
    # hami-node refusing a GPU that failed after the bind: only when asked for that message.
    failed = refused("failed", "Allocate failed due to rpc error: code = FailedPrecondition "
                     "desc = pod default/failed: GPU GPU-1 assigned to container 'main' is "
                     "Unhealthy (critical XID 79); delete the pod", "2026-12-04T10:54:07Z")
    assert checks.refused_by_kubelet_at(failed) is None
    assert checks.refused_by_kubelet_at(failed, checks.GPU_FAILED) == at.replace(second=7)
    assert checks.refused_by_kubelet_at(gap, checks.GPU_FAILED) is None
    # Without an excuse (or one that does not cover it) both are violations.
    assert sorted(v.check for v in checks.endings(snap(pods=[gap, other]))) == \
        ["ending", "ending"]
    seen = []

    def excuse(p):
        seen.append(p["metadata"]["name"])
        when = checks.refused_by_kubelet_at(p)
        return "the plugin was down" if when and when.minute == 54 else None
    found = checks.endings(snap(pods=[gap, other]), excuse)
    assert {(v.objects[0], v.check) for v in found} == {
        ("pod/default/gap", "ending-excused"), ("pod/default/other", "ending")}
    assert sorted(seen) == ["gap", "other"]
    # The auditor keeps the excused apart: reported, not a violation.
    auditor = Auditor(excuse=excuse)
    new = auditor.observe(snap(pods=[gap, other]))
    assert [v.objects for v in new] == [("pod/default/other",)]
    assert [v.objects for v in auditor.excused] == [("pod/default/gap",)]
    assert auditor.by_check() == {"ending": 1}


def test_metrics_over_limit_by_the_shim_count():
    labels = 'podnamespace="default",podname="p",ctrname="main",vdeviceid="0",' \
             f'deviceuuid="{GPU0}"'
    text = (f"vGPU_device_memory_usage_in_bytes{{{labels}}} {512 * MIB}\n"
            f"vGPU_device_memory_limit_in_bytes{{{labels}}} {1024 * MIB}\n")
    assert checks.metrics(snap(metrics=text)) == []
    (v,) = checks.metrics(snap(metrics=text.replace(str(512 * MIB), str(2048 * MIB))))
    assert v.objects == ("pod/default/p", "container/main", f"gpu/{GPU0}")


def test_auditor_keeps_each_violation_once():
    auditor = Auditor()
    over = [pod("a", [(GPU0, 40960, 100)]), pod("b", [(GPU0, 40960, 100)])]
    assert len(auditor.observe(snap(pods=over))) == 1
    assert auditor.observe(snap(pods=over)) == []
    assert auditor.by_check() == {"overcommit": 1} and auditor.passes == 2


def test_pod_of_pid_reads_the_cgroup(tmp_path):
    uid, cid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "ab" * 32
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(
        f"12:memory:/hami-k8s/kubepods/besteffort/pod{uid}/{cid}\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cgroup").write_text("12:memory:/user.slice\n")
    assert pod_of_pid(42, tmp_path) == (uid, cid)
    assert pod_of_pid(43, tmp_path) == ("", "") and pod_of_pid(44, tmp_path) == ("", "")


def test_audit_loop_counts_missed_passes_and_keeps_its_own_errors():
    from hami_sim.audit.auditor import AuditLoop
    from hami_sim.audit.collect import SourceError, fetch_metrics
    calls = []

    def source():
        calls.append(1)
        if len(calls) == 1:
            raise SourceError("GET /api/v1/pods: connection refused")
        if len(calls) == 2:
            raise KeyError("spec")
        return snap(pods=[pod("a", [(GPU0, 40960, 100)]), pod("b", [(GPU0, 1, 0)])])
    loop = AuditLoop(Auditor(), source, interval=0.01).start()
    deadline = time.monotonic() + 10
    while len(calls) < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    found = loop.stop(final_pass=False)
    assert loop.auditor.missed == 1 and loop.auditor.errors == ["KeyError: 'spec'"]
    assert [v.check for v in found] == ["overcommit"]
    assert fetch_metrics("-") is None and fetch_metrics("") is None


def test_an_exit_status_lost_by_the_runtime_is_found_by_its_time():
    lost = pod("lost", phase="Failed", expect="Succeeded")
    lost["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": {
        "exitCode": 255, "reason": "Unknown", "finishedAt": "2026-12-04T15:16:49Z"}}}]
    assert checks.exit_lost_at(lost) == datetime(2026, 12, 4, 15, 16, 49, tzinfo=timezone.utc)
    crashed = pod("crashed", phase="Failed", expect="Succeeded")
    crashed["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": {
        "exitCode": 255, "reason": "Error", "finishedAt": "2026-12-04T15:16:49Z"}}}]
    assert checks.exit_lost_at(crashed) is None           # the workload's own exit 255
    assert checks.exit_lost_at(pod("ok", phase="Succeeded")) is None
