"""The soak's installed mode, its pure parts: which fault kinds each mode has and which
share a lock, the schedule over the installed kinds, a container's processes found by their
cgroup, the Lease's time stamps, restarts caused on purpose not reported, and the command
line refusing an installed-only kind without --installed."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hami_sim.realcluster.installed import restarts
from hami_sim.soak.__main__ import main
from hami_sim.soak.faults import (INSTALLED_KINDS, INSTALLED_ONLY, KINDS, PROCESS_KINDS,
                                  FaultError, Faults, kinds_for)
from hami_sim.soak.installed_faults import (InstalledFaults, container_id, container_pids,
                                            micro_time)
from hami_sim.soak.run import Soak, SoakOptions, schedule

CID = "ab" * 32


def test_each_mode_has_its_kinds_and_a_method_for_each():
    assert set(INSTALLED_ONLY) <= set(INSTALLED_KINDS) == set(KINDS)
    assert not set(INSTALLED_ONLY) & set(PROCESS_KINDS) and len(PROCESS_KINDS) == 9
    assert kinds_for(False) == PROCESS_KINDS and kinds_for(True) == INSTALLED_KINDS
    for cls, kinds in ((Faults, PROCESS_KINDS), (InstalledFaults, INSTALLED_KINDS)):
        for kind in kinds:
            assert callable(getattr(cls, KINDS[kind], None)), (cls.__name__, kind)


def test_the_faults_on_hami_controls_pods_share_one_lock_in_the_installed_mode():
    cluster = SimpleNamespace(spec=SimpleNamespace(split=10, gpus=(1, 2)))
    installed, processes = InstalledFaults(cluster), Faults(cluster)
    shared = {installed.component(k) for k in ("control-leader-killed", "helm-rollback",
                                                "control-rolling-update",
                                                "kube-scheduler-restarted")}
    assert shared == {"hami-control"}
    assert installed.component("kubelet-restarted") == "kubelet-restarted"
    assert processes.component("kube-scheduler-restarted") != \
        processes.component("control-leader-killed")
    assert len(installed.locks) == len(KINDS) - 3


def test_the_installed_schedule_hits_every_kind_once():
    plan = schedule(SoakOptions(duration_s=136, fault_gap_s=12, kinds=INSTALLED_KINDS))
    assert sorted(kind for _, kind in plan) == sorted(INSTALLED_KINDS)


def test_a_soak_refuses_installed_only_kinds_on_a_processes_cluster():
    cluster = SimpleNamespace(installed=False, install="processes",
                              spec=SimpleNamespace(split=10, gpus=(1,)))
    with pytest.raises(ValueError, match="helm-rollback need the installed mode"):
        Soak(cluster, SoakOptions(kinds=("etcd-paused", "helm-rollback")))


def test_the_command_line_refuses_them_without_installed(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--kinds", "control-rolling-update"])
    assert exit_.value.code == 2
    assert "control-rolling-update need --installed" in capsys.readouterr().err


def write_proc(root: Path, pid: int, cgroup: str) -> None:
    (root / str(pid)).mkdir()
    (root / str(pid) / "cgroup").write_text(cgroup)


def test_a_containers_processes_are_found_by_their_cgroup(tmp_path):
    pod_path = "/hami-k8s/kubepods/burstable/pod0e7f3c2a-1111-2222-3333-444455556666"
    write_proc(tmp_path, 10, f"12:pids:{pod_path}/{CID}\n11:memory:{pod_path}/{CID}\n")
    write_proc(tmp_path, 11, f"12:pids:{pod_path}/{'cd' * 32}\n")
    write_proc(tmp_path, 12, "12:pids:/user.slice\n")
    (tmp_path / "self").mkdir()
    (tmp_path / "13").mkdir()                   # ended before its cgroup was read
    assert container_pids(CID, tmp_path) == [10]
    assert container_pids("ef" * 32, tmp_path) == []


@pytest.mark.parametrize("state,want", [
    ({"running": {"startedAt": "2026-12-04T11:00:00Z"}}, CID),
    ({"waiting": {"reason": "CrashLoopBackOff"}}, ""),
], ids=["running", "waiting"])
def test_a_container_id_only_while_it_runs(state, want):
    pod = {"status": {"containerStatuses": [
        {"name": "kube-scheduler", "containerID": f"containerd://{'cd' * 32}",
         "state": {"running": {}}},
        {"name": "hami-control", "containerID": f"containerd://{CID}", "state": state}]}}
    assert container_id(pod, "hami-control") == want
    assert container_id({}, "hami-control") == ""


def test_a_leases_micro_time():
    assert micro_time("2026-12-04T11:00:00.250000Z") == pytest.approx(1796382000.25)
    assert micro_time("") == 0.0 and micro_time(None) == 0.0


class RecordingCore:
    """core_v1's two calls restarts() makes: the release's pods, a container's old log."""

    def __init__(self, pods):
        self.pods = pods

    def list_namespaced_pod(self, namespace, **_kw):
        return SimpleNamespace(data=json.dumps({"items": self.pods}).encode())

    def read_namespaced_pod_log(self, name, namespace, **_kw):
        return SimpleNamespace(data=b"killed\n")


def test_restarts_a_fault_caused_are_not_reported_more_are():
    def pod(name, container, count):
        return {"metadata": {"name": name, "namespace": "hami-system"},
                "status": {"containerStatuses": [{"name": container, "restartCount": count,
                                                  "lastState": {"terminated": {
                                                      "reason": "Error", "exitCode": 137}}}]}}
    c = SimpleNamespace(core_v1=RecordingCore([pod("ctl-a", "hami-control", 1),
                                               pod("node-x", "hami-node", 2)]))
    assert len(restarts(c)) == 2
    found = restarts(c, {("ctl-a", "hami-control"): 1, ("node-x", "hami-node"): 1})
    assert len(found) == 1 and found[0].startswith("node-x/hami-node restarted 2 time(s)")
    assert restarts(c, {("ctl-a", "hami-control"): 1, ("node-x", "hami-node"): 2}) == []


class LeaseCluster:
    """kubectl answering `get lease` and `get pod` from a script of Lease holders (one per
    call) and the pods whose kube-scheduler runs."""

    def __init__(self, holders, running):
        self.holders, self.running = list(holders), running
        self.spec = SimpleNamespace(split=10, gpus=(1,))

    def kubectl(self, *args, **_kw) -> str:
        if "lease" in args:
            holder = self.holders.pop(0) if len(self.holders) > 1 else self.holders[0]
            return json.dumps({"spec": {"holderIdentity": holder}})
        name = args[args.index("pod") + 1]
        state = {"running": {}} if name in self.running else {"waiting": {}}
        return json.dumps({"status": {"containerStatuses": [
            {"name": "kube-scheduler", "containerID": f"containerd://{CID}", "state": state}]}})


def test_the_leader_to_kill_is_waited_for_until_its_container_runs(tmp_path):
    cluster = LeaseCluster(["", "ctl-a_1234", "ctl-b_5678"], running={"ctl-b"})
    write_proc(tmp_path, 10, f"12:pids:/hami-k8s/kubepods/pod0e7f3c2a/{CID}\n")
    found = InstalledFaults(cluster, tmp_path).running_leader("hami-scheduler", "kube-scheduler")
    assert found == ("ctl-b_5678", "ctl-b")


def test_a_container_the_status_calls_running_but_without_processes_is_not_killed(tmp_path):
    """Its status not yet updated (seen while kube-apiserver restarted): no process has its
    ID, so there is nothing to kill yet; the fault waits, then says so."""
    faults = InstalledFaults(LeaseCluster(["ctl-b_5678"], running={"ctl-b"}), tmp_path)
    with pytest.raises(FaultError, match="no running process of ctl-b/kube-scheduler"):
        faults.kill_container("ctl-b", "kube-scheduler")
    assert faults.killed == {}


def test_a_leader_that_ends_between_the_look_and_the_kill_is_looked_for_again(tmp_path):
    """The hour's soak: a kube-scheduler exiting on its lost Lease just as it was to be
    killed; the fault looks for the running leader again instead of giving up."""
    faults = InstalledFaults(LeaseCluster(["ctl-b_5678"], running={"ctl-b"}), tmp_path)
    write_proc(tmp_path, 10, f"12:pids:/hami-k8s/kubepods/pod0e7f3c2a/{CID}\n")
    tries = []

    def kill(pod, container):
        tries.append((pod, container))
        if len(tries) == 1:
            raise FaultError(f"no running process of {pod}/{container} to kill")
    faults.kill_container = kill
    assert faults.kill_leader("hami-scheduler", "kube-scheduler") == ("ctl-b_5678", "ctl-b")
    assert tries == [("ctl-b", "kube-scheduler")] * 2
