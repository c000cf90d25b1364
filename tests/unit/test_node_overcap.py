"""The over-cap check: processes mapped to containers by cgroup, the driver's per-process memory
summed per container and GPU, compared with the pod's allocation; offenders reported once."""
import pytest

from hami_common import constants as C
from hami_node.plugin.overcap import MIB, OverCapWatch, cgroup_owner, find_over_cap
from tests.unit._node_doubles import RecordingCluster

UID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
CID = "ab" * 32
OTHER_CID = "cd" * 32
GPU = "GPU-aaaaaaaa-0000-0000-0000-000000000000"

CGROUPS = {
    "cgroupfs-v1": (f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n"
                    f"11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n", (UID, CID)),
    "systemd-v2": ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
                   f"{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n", (UID, CID)),
    "host-process": ("0::/system.slice/ssh.service\n", None),
}


@pytest.mark.parametrize("case", CGROUPS, ids=list(CGROUPS))
def test_the_cgroup_names_the_pod_and_container(case):
    text, expected = CGROUPS[case]
    assert cgroup_owner(text) == expected


def pod(cap_mib=1024):
    return {"metadata": {"namespace": "team", "name": "trainer", "uid": UID, "annotations": {
                C.ANNO_DEVICES_ALLOCATED: f"{GPU},NVIDIA,{cap_mib},30:;;"}},
            "spec": {"containers": [{"name": "main"}, {"name": "sidecar"}]},
            "status": {"containerStatuses": [
                {"name": "main", "containerID": f"containerd://{CID}"},
                {"name": "sidecar", "containerID": f"containerd://{OTHER_CID}"}]}}


OWNERS = {101: (UID, CID), 102: (UID, CID), 103: (UID, OTHER_CID), 104: None}


def test_a_container_over_its_cap_by_the_drivers_count_is_found():
    processes = {GPU: {101: 700 * MIB, 102: 400 * MIB, 103: 50 * MIB, 104: 9000 * MIB}}
    (found,) = find_over_cap(processes, OWNERS.get, [pod()])
    assert (found.namespace, found.pod, found.container, found.gpu) == ("team", "trainer",
                                                                        "main", GPU)
    assert (found.used, found.cap, found.pids) == (1100 * MIB, 1024 * MIB, (101, 102))
    assert find_over_cap({GPU: {101: 1024 * MIB}}, OWNERS.get, [pod()]) == []


class Backend:
    def __init__(self, processes):
        self.processes = processes

    def discover(self):
        from types import SimpleNamespace
        return [SimpleNamespace(uuid=GPU)]

    def process_memory(self, uuid):
        return self.processes


@pytest.mark.parametrize("evict", [False, True], ids=["report", "evict"])
def test_an_offender_is_reported_once_while_it_stays_over(evict):
    backend, cluster, rounds, lines = Backend({101: 2000 * MIB}), RecordingCluster([pod()]), [], []
    watch = OverCapWatch(backend, cluster, "n1", 60, evict=evict, owner=OWNERS.get,
                         on_round=rounds.append, log=lines.append)
    watch.check()
    watch.check()
    assert [e[:2] for e in cluster.events] == [("trainer", "GPUMemoryOverCap")]
    assert "2000 MiB" in cluster.events[0][2] and "cap of 1024 MiB" in cluster.events[0][2]
    assert len(lines) == 1 and "team/trainer" in lines[0]
    assert cluster.evicted == ([("team", "trainer")] if evict else [])
    assert [len(r) for r in rounds] == [1, 1]
    backend.processes = {101: 100 * MIB}       # back under: cleared, reported again if it recurs
    assert watch.check() == []
    backend.processes = {101: 3000 * MIB}
    watch.check()
    assert len(cluster.events) == 2
