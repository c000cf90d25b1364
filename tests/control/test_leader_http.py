"""Leader election on a Lease: two replicas, one leads and is ready, the other refuses to place;
failover when the leader stops (gives the Lease up) or dies (the Lease expires)."""
import signal
import time

from ctlhelpers import add_gpu_node, create, eventually, gpu_pod
from hami_control.launch import start_control

ELECTION = ("--handshake-interval", "0", "--lease-namespace", "default", "--lease-duration",
            "2", "--renew-deadline", "1.5", "--retry-period", "0.2", "--log-level", "warning")


def _replica(apiserver, identity, process=False, wait=20.0):
    return start_control(apiserver.kubeconfig, process,
                         extra_args=ELECTION + ("--identity", identity), wait_ready=wait)


def _ready(replica) -> bool:
    return replica.client.request("GET", "/readyz")[0] == 200


def test_one_leads_the_other_waits_then_takes_over(core_v1, apiserver):
    add_gpu_node(core_v1, "n1")
    first = _replica(apiserver, "replica-a")
    second = _replica(apiserver, "replica-b", wait=0)
    try:
        time.sleep(0.6)                               # a few election rounds
        status, body = second.client.request("GET", "/readyz")
        assert status == 503 and b"held by replica-a" in body
        pod = create(core_v1, second, gpu_pod("p", {"nvidia.com/gpu": 1}))
        refused = second.client.filter(pod, ["n1"])
        assert refused["NodeNames"] == [] and "not the leader" in refused["Error"]
        assert "not the leader" in second.client.bind("default", "p", "", "n1")["Error"]
        assert first.client.filter(pod, ["n1"])["NodeNames"] == ["n1"]
        first.stop()                                   # gives the Lease up
        eventually(lambda: _ready(second), timeout=3)
        assert second.client.filter(pod, ["n1"])["NodeNames"] == ["n1"]
    finally:
        first.stop()
        second.stop()


def test_failover_when_the_leader_dies(core_v1, apiserver):
    first = _replica(apiserver, "replica-a", process=True)
    second = _replica(apiserver, "replica-b", wait=0)
    try:
        time.sleep(0.5)
        assert not _ready(second)
        first.process.send_signal(signal.SIGKILL)
        start = time.monotonic()
        eventually(lambda: _ready(second), timeout=6)
        assert time.monotonic() - start >= 1.0        # not before the Lease could expire
    finally:
        first.stop()
        second.stop()
