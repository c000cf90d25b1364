"""Races and restarts: 64 pods filtered and bound at once for the last GPU slices, and
hami-control killed and restarted in the middle. No GPU is ever overcommitted."""
import signal
import threading
import time

from ctlhelpers import (add_gpu_node, allocated, assert_not_overcommitted, create, eventually,
                        gpu_pod, read_pod, schedule, start_plane)
from hami_common import constants as C
from hami_sim.extender_client import finish_allocation

SLICE = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30, "nvidia.com/gpumem": 1000}
ROUNDS = 30


def _schedule_until_settled(core_v1, ctl, pod, outcome: dict) -> None:
    """kube-scheduler's retries: filter+bind again until bound or unschedulable."""
    name = pod["metadata"]["name"]
    for _ in range(ROUNDS):
        node, result, bound = schedule(core_v1, ctl, pod)
        if node:
            outcome[name] = node
            return
        if bound is None and not result["Error"]:
            outcome[name] = None             # fits nowhere: it holds nothing
            return
        time.sleep(0.01)
    outcome[name] = "gave up"


def _check_consistent(core_v1, names, outcome) -> None:
    for name in names:
        pod = read_pod(core_v1, name)
        annos = pod["metadata"].get("annotations") or {}
        if outcome[name]:
            assert pod["spec"]["nodeName"] == annos[C.ANNO_VGPU_NODE] == outcome[name]
            assert annos[C.ANNO_BIND_PHASE] == C.BIND_PHASE_SUCCESS
        else:
            assert not pod["spec"].get("nodeName")
            assert not annos.get(C.ANNO_DEVICES_ALLOCATED), name


def test_64_concurrent_pods_for_the_last_slices(core_v1, control):
    devs = add_gpu_node(core_v1, "n1") + add_gpu_node(core_v1, "n2")
    eventually(lambda: len(control.plane.state.node_names()) == 2)
    pods = [create(core_v1, control, gpu_pod(f"p{i:02d}", SLICE)) for i in range(64)]
    outcome: dict = {}
    threads = [threading.Thread(target=_schedule_until_settled,
                                args=(core_v1, control, p, outcome)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert "gave up" not in outcome.values() and len(outcome) == 64
    assert sum(1 for n in outcome.values() if n) == 12          # 4 GPUs x 3 slices of 30%
    assert_not_overcommitted(core_v1, {d.id: d for d in devs})
    _check_consistent(core_v1, [p["metadata"]["name"] for p in pods], outcome)
    assert control.plane.state.overcommitted() == []


def test_restart_in_the_middle_allocates_nothing_twice(core_v1, apiserver):
    devs = add_gpu_node(core_v1, "n1")
    first = start_plane(apiserver, process=True)
    try:
        placed = [create(core_v1, first, gpu_pod(f"a{i}", SLICE)) for i in range(3)]
        assert all(schedule(core_v1, first, p)[0] == "n1" for p in placed)
        half = create(core_v1, first, gpu_pod("half", SLICE))     # filtered, not yet bound
        assert first.client.filter(half, ["n1"])["NodeNames"] == ["n1"]
        eventually(lambda: allocated(read_pod(core_v1, "half")))      # the decision landed
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
    finally:
        first.stop()
    second = start_plane(apiserver, process=True)
    try:
        assert second.client.bind("default", "half", half["metadata"]["uid"], "n1") == \
            {"Error": ""}
        assert finish_allocation(core_v1, "default", "half", "n1")
        more = [create(core_v1, second, gpu_pod(f"b{i}", SLICE)) for i in range(4)]
        nodes = [schedule(core_v1, second, p)[0] for p in more]
        assert nodes == ["n1", "n1", None, None]   # 2 GPUs x 3 slices: 4 + 2 placed, no more
        assert_not_overcommitted(core_v1, {d.id: d for d in devs})
    finally:
        second.stop()
