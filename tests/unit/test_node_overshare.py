"""The compute outside check: the driver's per-process SM utilization, sampled each second,
summed per container (processes mapped by cgroup) and GPU, averaged over the check's window and
compared with the container's gpucores plus a tolerance; offenders reported once."""
from types import SimpleNamespace

import pytest

from hami_common import constants as C
from hami_node.plugin.overshare import (EVENT_REASON, OverShareWatch, find_over_share,
                                        share_caps)
from tests.unit._node_doubles import RecordingCluster

UID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
CID, OTHER_CID = "ab" * 32, "cd" * 32
GPU = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
OWNERS = {101: (UID, CID), 102: (UID, CID), 103: (UID, OTHER_CID), 104: None}


def pod(cores=30, sidecar_cores=0):
    return {"metadata": {"namespace": "team", "name": "trainer", "uid": UID, "annotations": {
                C.ANNO_DEVICES_ALLOCATED:
                    f"{GPU},NVIDIA,1024,{cores}:;{GPU},NVIDIA,1024,{sidecar_cores}:;"}},
            "spec": {"containers": [{"name": "main"}, {"name": "sidecar"}]},
            "status": {"containerStatuses": [
                {"name": "main", "containerID": f"containerd://{CID}"},
                {"name": "sidecar", "containerID": f"containerd://{OTHER_CID}"}]}}


def window(*shares, pids=(101,)):
    """One sample per share: the share split over `pids` (what NVML said each second)."""
    return [{GPU: {pid: share / len(pids) for pid in pids}} for share in shares]


# What a container throttled to 30 % looks like by the driver's count second by second (NVML's
# whole percents, a burst after idle, a second that straddles two budgets): never flagged.
THROTTLED = {
    "steady": window(30, 30, 31, 29, 30, 30, 30, 31, 30, 29),
    "burst-then-held": window(45, 25, 28, 30, 30, 31, 30, 30, 29, 30),
    "two-processes": window(30, 31, 30, 29, 30, pids=(101, 102)),
    "short-window": window(39, 38),
}
# And containers running unthrottled above their share: flagged.
UNTHROTTLED = {
    "alone": (window(100, 100, 100, 99, 100), 99.8),
    "beside-a-neighbour": (window(70, 69, 71, 70, 70), 70.0),
    "started-mid-window": (window(0, 0, 0, 100, 100, 100, 100, 100, 100, 100), 70.0),
    "many-small-processes": (window(60, 60, 60, pids=(101, 102)), 60.0),
}


@pytest.mark.parametrize("case", THROTTLED, ids=list(THROTTLED))
def test_a_container_held_to_its_share_is_never_flagged(case):
    assert find_over_share(THROTTLED[case], OWNERS.get, [pod()]) == []


@pytest.mark.parametrize("case", UNTHROTTLED, ids=list(UNTHROTTLED))
def test_a_container_over_its_share_is_flagged_with_its_mean(case):
    samples, mean = UNTHROTTLED[case]
    (found,) = find_over_share(samples, OWNERS.get, [pod()])
    assert (found.namespace, found.pod, found.container, found.gpu, found.cap) == \
        ("team", "trainer", "main", GPU, 30)
    assert found.share == pytest.approx(mean, abs=0.1)
    assert found.samples == len(samples) and 101 in found.pids


def test_the_tolerance_is_the_boundary():
    assert find_over_share(window(40, 40), OWNERS.get, [pod()], tolerance=10) == []
    assert len(find_over_share(window(40.5, 40.5), OWNERS.get, [pod()], tolerance=10)) == 1
    assert len(find_over_share(window(31, 31), OWNERS.get, [pod()], tolerance=0)) == 1


def test_unlimited_containers_host_processes_and_other_containers_are_left_alone():
    samples = [{GPU: {103: 100, 104: 100}}] * 3       # the sidecar has no gpucores; 104: host
    assert find_over_share(samples, OWNERS.get, [pod()]) == []
    # The node's defaultCores stands for an entry without cores, as Allocate gives the shim.
    (found,) = find_over_share(samples, OWNERS.get, [pod()], default_cores=20)
    assert (found.container, found.cap, found.pids) == ("sidecar", 20, (103,))
    assert find_over_share([], OWNERS.get, [pod()]) == []


@pytest.mark.parametrize("cores, expected", [(30, 30), (0, None), (100, None)],
                         ids=["limited", "unset", "whole"])
def test_share_caps_leave_out_what_the_shim_does_not_limit(cores, expected):
    assert share_caps(pod(cores)).get(("main", GPU)) == expected
    broken = pod()
    broken["metadata"]["annotations"][C.ANNO_DEVICES_ALLOCATED] = "garbage"
    assert share_caps(broken) == {}


class Backend:
    def __init__(self, share):
        self.share, self.since = share, []

    def discover(self):
        return [SimpleNamespace(uuid=GPU)]

    def process_utilization(self, uuid, since_us=0):
        self.since.append(since_us)
        return {101: self.share}


@pytest.mark.parametrize("evict", [False, True], ids=["report", "evict"])
def test_an_offender_is_reported_once_while_it_stays_over(evict):
    backend, cluster, rounds, lines = Backend(90), RecordingCluster([pod()]), [], []
    watch = OverShareWatch(backend, cluster, "n1", 60, evict=evict, owner=OWNERS.get,
                           on_round=rounds.append, log=lines.append)

    def window_of(n):
        for _ in range(n):
            watch.sample()
        return watch.check()

    assert len(window_of(3)) == 1 and len(window_of(3)) == 1
    assert [e[:2] for e in cluster.events] == [("trainer", EVENT_REASON)]
    assert "90.0 %" in cluster.events[0][2] and "share of 30 %" in cluster.events[0][2]
    assert len(lines) == 1 and "team/trainer" in lines[0] and "over 3 s" in lines[0]
    assert cluster.evicted == ([("team", "trainer")] if evict else [])
    backend.share = 30                      # held again: cleared, reported again if it recurs
    assert window_of(3) == [] and rounds[-1] == []
    backend.share = 95
    window_of(2)
    assert len(cluster.events) == 2


def test_a_check_covers_only_the_samples_since_the_last():
    backend = Backend(100)
    now = iter([1000.0, 1001.0])
    watch = OverShareWatch(backend, RecordingCluster([pod()]), "n1", 60, owner=OWNERS.get, log=lambda m: None,
                           wall=lambda: next(now))
    watch.sample()
    assert watch.check()[0].samples == 1
    assert watch.check() == []               # no samples: nothing to say
    watch.sample()
    # Each read asks the driver for its samples since the previous read (the first: a second).
    assert backend.since == [999_000_000, 1000_000_000]
