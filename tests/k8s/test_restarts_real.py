"""The node's pieces restarted under running pods, with the real kubelet: kubelet restarted
(hami-node re-registers, the GPUs come back, the running pod is unaffected), and hami-node
killed and restarted (no GPU given twice, pods admitted again)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from hami_sim.demo.scenario import pod_gpus
from hami_sim.realcluster.node import allocatable, spawn_agent, spawn_kubelet

from k8shelpers import create, delete, get, pod, wait_phase

pytestmark = pytest.mark.timeout(3600)
A100 = {"nvidia.com/use-gputype": "A100"}
REGISTERED = "Got registration request from device plugin"


def busy(name: str, seconds: int, gpumem: str = "1024", **meta) -> dict:
    """A pod keeping one GPU busy for a while."""
    return pod(name, {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": gpumem}},
               ["python3", "-m", "hami_sim.demo.workloads", "compute", "--seconds",
                str(seconds), "--hold-mib", "256"], **meta)


def registrations(cluster) -> int:
    """How many device plugin registrations kubelet has logged."""
    return (cluster.logs / "kubelet.log").read_text(errors="replace").count(REGISTERED)


def gpus_of(cluster, name: str) -> set:
    """The GPU UUIDs the scheduler gave the pod."""
    return {d.uuid for ctr in pod_gpus(get(cluster, name)) for d in ctr}


def test_kubelet_restart_reregisters_and_keeps_running_pods(real_cluster):
    c = real_cluster
    create(c, busy("long-a", 25))
    try:
        wait_phase(c, "long-a", ("Running",), timeout=60)
        before = registrations(c)
        c.stop_component("kubelet")
        spawn_kubelet(c)
        deadline = time.monotonic() + 60
        while registrations(c) == before and time.monotonic() < deadline:
            time.sleep(0.5)
        assert registrations(c) > before, "hami-node did not register with the new kubelet"
        assert c.node.alive()
        want = c.spec.split * len(c.spec.gpus)
        while allocatable(c) != want and time.monotonic() < deadline:
            time.sleep(0.5)
        assert allocatable(c) == want
        assert get(c, "long-a")["status"]["phase"] == "Running"
        create(c, pod("after-kubelet", {"limits": {"nvidia.com/gpu": "1",
                                                   "nvidia.com/gpumem": "512"}}))
        assert wait_phase(c, "after-kubelet")["status"]["phase"] == "Succeeded"
        assert wait_phase(c, "long-a", timeout=90)["status"]["phase"] == "Succeeded"
    finally:
        delete(c, "long-a", "after-kubelet")


def test_hami_node_killed_and_restarted_gives_no_gpu_twice(real_cluster):
    c = real_cluster
    # 30000 MiB of a 40 GB A100: two such pods can only run on different GPUs.
    create(c, busy("big-a", 20, "30000", annotations=A100))
    try:
        wait_phase(c, "big-a", ("Running",), timeout=60)
        os.killpg(c.node.agent.pid, signal.SIGKILL)
        c.node.agent.wait(timeout=10)
        spawn_agent(c, c.root / "hami-node.kubeconfig")
        create(c, busy("big-b", 2, "30000", annotations=A100))
        assert wait_phase(c, "big-b")["status"]["phase"] == "Succeeded"
        assert gpus_of(c, "big-a") and gpus_of(c, "big-b")
        assert not gpus_of(c, "big-a") & gpus_of(c, "big-b")
        assert wait_phase(c, "big-a", timeout=90)["status"]["phase"] == "Succeeded"
    finally:
        delete(c, "big-a", "big-b")
