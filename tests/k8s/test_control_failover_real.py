"""Two hami-control replicas on the real cluster: the leader is killed, the other takes the
Lease in hami-system over, labels its pod hami.io/control-leader, and the hami-control-leader
Service (deploy/'s selector, played by LeaderProxy: no kube-proxy here) reaches it; kube-
scheduler's filter and bind go on through it, and no GPU is given twice: the pods the dead
leader placed keep theirs in the new leader's view.

The replicas run as processes with deploy/'s ServiceAccount token, each with a placeholder pod
(never scheduled) to label; the session's own hami-control is stopped meanwhile and started
again at the end, on the address the webhook and kube-scheduler use."""
from __future__ import annotations

import os
import signal
import time
from urllib.parse import urlsplit

import pytest

from hami_common import constants as C
from hami_common import pod_devices
from hami_sim.control_launch import start_control, wait_until_ready
from hami_sim.demo.cluster import clean_base_env
from hami_sim.realcluster import control_plane
from hami_sim.realcluster.cluster import free_port
from hami_sim.realcluster.config import deploy_docs
from hami_sim.realcluster.images import WORKLOAD_IMAGE
from hami_sim.realcluster.leader_proxy import LeaderProxy

from k8shelpers import create, delete, get, pod, wait_phase

pytestmark = pytest.mark.timeout(3600)
NAMESPACE = "hami-system"
REPLICAS = ("hami-control-a", "hami-control-b")
WHOLE_GPU = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}}
SLEEP = ["python3", "-c", "import time; time.sleep(120)"]
LEASE = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"]


def leader_service() -> dict:
    """deploy/'s hami-control-leader Service."""
    return next(d for d in deploy_docs("hami-control-service.yaml")
                if d["metadata"]["name"] == "hami-control-leader")


def placeholder(name: str) -> dict:
    """The replica's pod object, labelled as deploy/'s Deployment labels its pods; no
    scheduler has its name, so it stays Pending and nothing runs it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/name": "hami-control"}},
            "spec": {"schedulerName": "placeholder-never-scheduled",
                     "containers": [{"name": "hami-control", "image": WORKLOAD_IMAGE}]}}


def start_replica(c, name: str):
    """hami-control as replica name: deploy/'s ServiceAccount, the Lease in hami-system."""
    p = c.pki
    return start_control(
        control_plane.token_kubeconfig(c, *control_plane.CONTROL_SA), process=True,
        tls=(p.crt("hami-control"), p.key("hami-control"), p.ca),
        listen=f"127.0.0.1:{free_port()}",
        extra_args=["--lease-namespace", NAMESPACE, "--identity", name, "--leader-pod", name,
                    *LEASE],
        env={**clean_base_env(), "POD_NAMESPACE": NAMESPACE}, wait_ready=0)


def wait_leader(c, proxy, replicas, not_name: str = "", timeout: float = 30) -> str:
    """The replica that holds the Lease, carries the leader label and says it leads."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lease = c.kubectl("get", "lease", "hami-control", "-n", NAMESPACE, "-o",
                          "jsonpath={.spec.holderIdentity}", check=False).strip()
        if lease in replicas and lease != not_name and lease in proxy.selected() and \
                wait_until_ready(replicas[lease], 1):
            return lease
        time.sleep(0.3)
    raise AssertionError(f"no replica but {not_name!r} took the lead in {timeout:.0f} s")


def gpus_of(c, name: str) -> set:
    """The GPU UUIDs a pod was given."""
    value = get(c, name)["metadata"]["annotations"][C.ANNO_DEVICES_ALLOCATED]
    return {d.uuid for ctr in pod_devices.decode(value) for d in ctr}


def run_pods(c, names) -> None:
    """Creates whole-GPU pods that keep running; waits until they run."""
    for name in names:
        create(c, pod(name, WHOLE_GPU, command=SLEEP))
    for name in names:
        wait_phase(c, name, ("Running",), timeout=60)


def test_leader_killed_the_other_takes_over_and_no_gpu_is_given_twice(real_cluster):
    c = real_cluster
    c.apply([placeholder(n) for n in REPLICAS])
    c.stop_component("hami-control")          # releases its Lease on the way out
    replicas, proxy, pods = {}, None, ["before-0", "before-1", "after-0", "after-1"]
    try:
        for name in REPLICAS:
            replicas[name] = start_replica(c, name)
        backends = {n: (urlsplit(r.url).hostname, urlsplit(r.url).port)
                    for n, r in replicas.items()}
        proxy = LeaderProxy(c.core_v1, NAMESPACE, leader_service()["spec"]["selector"],
                            backends, ("127.0.0.1", c.ports["control"])).start()
        first = wait_leader(c, proxy, replicas)
        run_pods(c, pods[:2])

        os.killpg(replicas[first].process.pid, signal.SIGKILL)
        killed = time.monotonic()
        second = wait_leader(c, proxy, replicas, not_name=first)
        took_over = time.monotonic() - killed
        run_pods(c, pods[2:])

        given = [gpus_of(c, name) for name in pods]
        assert all(len(g) == 1 for g in given), given
        assert len(set.union(*given)) == 4, f"a GPU given twice: {given}"
        assert took_over < 15, f"the follower took {took_over:.1f} s to lead (lease 4 s)"
        assert proxy.forwarded.get(second), "nothing reached the new leader"
        for name in pods:
            events = c.kubectl("get", "events", "--field-selector",
                               f"involvedObject.name={name},reason=Scheduled", "-o", "name")
            assert len(events.split()) == 1, f"{name} scheduled {events!r}"
    finally:
        delete(c, *pods)
        if proxy is not None:
            proxy.stop()
        for running in replicas.values():
            running.stop()
        delete(c, *REPLICAS, namespace=NAMESPACE)
        control_plane.start_control(c)
