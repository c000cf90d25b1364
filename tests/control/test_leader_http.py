"""Leader election on a Lease: two replicas, both ready (a follower serves the webhook and a
rolling update needs its surge pod Ready), one leads and carries the leader label, the other
refuses to place and closes the connection; failover when the leader stops (gives the Lease up)
or dies (the Lease expires)."""
import http.client
import json
import signal
import time

from ctlhelpers import add_gpu_node, create, eventually, gpu_pod
from hami_common.constants import LABEL_CONTROL_LEADER
from hami_sim.control_launch import start_control

ELECTION = ("--handshake-interval", "0", "--lease-namespace", "default", "--lease-duration",
            "2", "--renew-deadline", "1.5", "--retry-period", "0.2", "--log-level", "warning")


def _replica(apiserver, identity, process=False, wait=20.0):
    return start_control(apiserver.kubeconfig, process,
                         extra_args=ELECTION + ("--identity", identity), wait_ready=wait)


def _leads(replica) -> bool:
    status, body = replica.client.request("GET", "/readyz")
    return status == 200 and json.loads(body)["leader"]


def test_one_leads_the_other_waits_then_takes_over(core_v1, apiserver):
    add_gpu_node(core_v1, "n1")
    first = _replica(apiserver, "replica-a")
    second = _replica(apiserver, "replica-b", wait=0)
    try:
        time.sleep(0.6)                               # a few election rounds
        status, body = second.client.request("GET", "/readyz")
        # Ready although it does not lead (before: 503, which deadlocked rolling updates).
        assert status == 200 and json.loads(body)["leader"] is False
        assert "held by replica-a" in json.loads(body)["detail"]
        pod = create(core_v1, second, gpu_pod("p", {"nvidia.com/gpu": 1}))
        refused = second.client.filter(pod, ["n1"])
        assert refused["NodeNames"] == [] and "not the leader" in refused["Error"]
        assert "not the leader" in second.client.bind("default", "p", "", "n1")["Error"]
        assert first.client.filter(pod, ["n1"])["NodeNames"] == ["n1"]
        first.stop()                                   # gives the Lease up
        eventually(lambda: _leads(second), timeout=3)
        assert second.client.filter(pod, ["n1"])["NodeNames"] == ["n1"]
    finally:
        first.stop()
        second.stop()


def test_failover_when_the_leader_dies(core_v1, apiserver):
    first = _replica(apiserver, "replica-a", process=True)
    second = _replica(apiserver, "replica-b", wait=0)
    try:
        time.sleep(0.5)
        assert not _leads(second)
        first.process.send_signal(signal.SIGKILL)
        start = time.monotonic()
        eventually(lambda: _leads(second), timeout=6)
        assert time.monotonic() - start >= 1.0        # not before the Lease could expire
    finally:
        first.stop()
        second.stop()


def _labels(core_v1, name):
    return core_v1.read_namespaced_pod(name, "default").metadata.labels or {}


def test_the_leader_pod_carries_the_label_and_it_moves_on_failover(core_v1, apiserver):
    for name in ("control-a", "control-b"):
        core_v1.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {LABEL_CONTROL_LEADER: "true"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]}})
    first = start_control(apiserver.kubeconfig, extra_args=ELECTION + (
        "--identity", "replica-a", "--leader-pod", "control-a"))
    second = start_control(apiserver.kubeconfig, wait_ready=0, extra_args=ELECTION + (
        "--identity", "replica-b", "--leader-pod", "control-b"))
    try:
        # control-b's stale label (a restarted container's pod keeps its labels) is removed.
        eventually(lambda: LABEL_CONTROL_LEADER not in _labels(core_v1, "control-b"), timeout=10)
        # Labelled just after it starts leading (the elector's callback, off the probe's path).
        eventually(lambda: _labels(core_v1, "control-a").get(LABEL_CONTROL_LEADER) == "true",
                   timeout=10)
        first.stop()
        eventually(lambda: _labels(core_v1, "control-b").get(LABEL_CONTROL_LEADER) == "true",
                   timeout=10)
        assert LABEL_CONTROL_LEADER not in _labels(core_v1, "control-a")
    finally:
        first.stop()
        second.stop()


def test_a_demoted_leader_closes_kept_alive_connections(core_v1, apiserver):
    add_gpu_node(core_v1, "n1")
    first = _replica(apiserver, "replica-a", process=True)
    second = _replica(apiserver, "replica-b", wait=0)
    try:
        pod = create(core_v1, first, gpu_pod("p", {"nvidia.com/gpu": 1}))
        # kube-scheduler's way: one connection, kept alive across calls.
        conn = http.client.HTTPConnection(first.url.split("//")[1], timeout=10)
        body = json.dumps({"Pod": pod, "NodeNames": ["n1"]})

        def call():
            conn.request("POST", "/filter", body=body, headers={"Content-Type": JSON})
            resp = conn.getresponse()
            return resp, json.loads(resp.read())
        resp, answer = call()
        assert answer["NodeNames"] == ["n1"] and not resp.will_close
        first.process.send_signal(signal.SIGSTOP)     # cannot renew: the Lease expires
        eventually(lambda: _leads(second), timeout=8)
        first.process.send_signal(signal.SIGCONT)
        eventually(lambda: not _leads(first), timeout=5)
        resp, answer = call()
        assert "not the leader" in answer["Error"]
        assert resp.getheader("Connection") == "close" and resp.will_close
    finally:
        first.process.send_signal(signal.SIGCONT)
        first.stop()
        second.stop()


JSON = "application/json"
