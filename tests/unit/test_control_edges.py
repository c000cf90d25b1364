"""The control plane's pure edges: extender messages, object conversions, configuration, the
node lock and leader election against small fakes with a settable clock."""
from datetime import datetime, timedelta, timezone

import pytest

from hami_common import constants as C
from hami_common import handshake as H
from hami_common import node_lock
from hami_control.cluster.api import (Conflict, DraTemplateApi, Invalid, LeaseApi,
                                      NamespaceApi, PodNodeApi, QuotaGateApi, QuotaStatusApi,
                                      WatchSource, WebhookConfigApi)
from hami_control.cluster.handshake import NodeHealth
from hami_control.cluster.kube import KubeApi
from hami_control.cluster.leader import LeaderElector
from hami_control.config import LeaseConfig, from_args
from hami_control.errors import BadRequest, ConfigError, LockError
from hami_control.extender.args import filter_result, parse_bind, parse_filter
from hami_control.extender.lock import NodeLocker
from hami_sim.apiserver.patch import merge_patch

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self):
        self.t = 0.0

    def now(self):
        return T0 + timedelta(seconds=self.t)

    def monotonic(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds


class FakeApi:
    """Nodes, pods and leases in dicts, with resourceVersion compare-and-swap."""

    def __init__(self):
        self.nodes, self.pods, self.leases, self.rv = {}, {}, {}, 1

    def _bump(self, obj):
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    def get_node(self, name):
        return self.nodes.get(name)

    def get_pod(self, namespace, name):
        return self.pods.get((namespace, name))

    def patch_node_annotations(self, name, annotations, resource_version=None):
        node = self.nodes[name]
        if resource_version and resource_version != node["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "stale")
        meta = node["metadata"]
        meta["annotations"] = merge_patch(meta.get("annotations"), annotations)
        return self._bump(node)

    def json_patch_node(self, name, operations):
        annos = self.nodes[name]["metadata"].get("annotations", {})
        if annos.get(C.ANNO_NODE_LOCK) != operations[0]["value"]:
            raise Invalid(422, "Invalid", "test failed")
        del annos[C.ANNO_NODE_LOCK]
        return self._bump(self.nodes[name])

    def get_lease(self, namespace, name):
        lease = self.leases.get(name)
        return None if lease is None else {**lease, "spec": dict(lease["spec"])}

    def create_lease(self, namespace, lease):
        if lease["metadata"]["name"] in self.leases:
            raise Conflict(409, "AlreadyExists", "exists")
        self.leases[lease["metadata"]["name"]] = self._bump(lease)
        return lease

    def replace_lease(self, namespace, name, lease):
        if lease["metadata"]["resourceVersion"] != self.leases[name]["metadata"][
                "resourceVersion"]:
            raise Conflict(409, "Conflict", "stale")
        self.leases[name] = self._bump({**lease, "metadata": dict(lease["metadata"])})
        return self.leases[name]


def test_kube_api_implements_every_boundary():
    for protocol in (WatchSource, PodNodeApi, LeaseApi, NamespaceApi, QuotaStatusApi,
                     WebhookConfigApi, DraTemplateApi, QuotaGateApi):
        assert all(callable(getattr(KubeApi, m, None)) for m in dir(protocol)
                   if not m.startswith("_")), protocol
        assert isinstance(KubeApi.__new__(KubeApi), protocol)


@pytest.mark.parametrize("body,message", [
    ([], "must be a JSON object"),
    ({"Pod": {"metadata": {}}}, "metadata.name"),
    ({"Pod": {"metadata": {"name": "p"}}}, "NodeNames"),
    ({"Pod": {"metadata": {"name": "p"}}, "NodeNames": "n1"}, "list of node names"),
    ({"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{}]}}, "v1.NodeList"),
    ({"Pod": {"metadata": {"name": "p", "annotations": {"a": 1}}}, "NodeNames": []},
     "annotations"),
], ids=["not-object", "no-name", "no-nodes", "names-not-list", "nodes-bad", "bad-pod"])
def test_filter_args_errors(body, message):
    with pytest.raises(BadRequest, match=message):
        parse_filter(body)


def test_extender_keys_are_case_insensitive():
    args = parse_filter({"pod": {"metadata": {"name": "p"}}, "nodenames": ["a", "b"]})
    assert args.node_names == ["a", "b"] and args.key == "default/p"
    assert filter_result(args, ["a"])["NodeNames"] == ["a"]
    bind = parse_bind({"podName": "p", "podNamespace": "ns", "node": "a"})
    assert (bind.key, bind.uid, bind.node) == ("ns/p", "", "a")
    with pytest.raises(BadRequest, match="Node"):
        parse_bind({"PodName": "p", "PodNamespace": "ns"})


def test_handshake_rule_needs_both_conditions():
    stale = H.Handshake(H.REQUESTING, T0)
    later = T0 + timedelta(seconds=61)
    assert NodeHealth(stale, 0).gone(later)
    assert not NodeHealth(stale, 10).gone(later)             # kubelet still offers GPUs
    assert not NodeHealth(stale, 0).gone(T0 + timedelta(seconds=30))
    assert not NodeHealth(H.Handshake(H.REPORTED, T0), 0).gone(later)
    assert NodeHealth(None, 0).needs_request() and not NodeHealth(stale, 0).needs_request()


def test_config_defaults_and_errors():
    config = from_args(["--listen", "0.0.0.0:8443", "--default-mem", "1000"])
    assert (config.host, config.port, config.defaults.default_memory) == ("0.0.0.0", 8443, 1000)
    assert config.lease.enabled and not config.tls
    with pytest.raises(ConfigError) as err:
        from_args(["--retry-period", "11"])
    assert err.value.key == "--retry-period"


@pytest.fixture
def locked():
    api, clock = FakeApi(), FakeClock()
    api.nodes["n1"] = {"metadata": {"name": "n1", "resourceVersion": "1", "annotations": {}}}
    api.pods[("ns", "a")] = {"metadata": {"name": "a"}}
    return api, clock, NodeLocker(api, clock)


def test_lock_compare_and_swap(locked):
    api, clock, locker = locked
    value = locker.acquire("n1", "ns", "a")
    assert value == node_lock.encode(node_lock.NodeLock(T0, "ns", "a"))
    assert locker.acquire("n1", "ns", "a")            # the owner again (a bind retry)
    with pytest.raises(LockError, match="locked by ns/a"):
        locker.acquire("n1", "ns", "b")
    clock.t = 301                                     # expired: taken over
    assert locker.acquire("n1", "ns", "b").endswith(",ns,b")
    assert not locker.release("n1", value)            # no longer a's
    assert locker.release("n1", api.nodes["n1"]["metadata"]["annotations"][C.ANNO_NODE_LOCK])


def test_lock_takes_over_from_a_deleted_owner_and_survives_a_stale_cache(locked):
    api, clock, _ = locked
    locker = NodeLocker(api, clock, cached=lambda name: ("0", None))     # stale: a Conflict
    locker.acquire("n1", "ns", "gone-pod")
    assert locker.acquire("n1", "ns", "b").endswith(",ns,b")


@pytest.mark.parametrize("phase,taken", [("Failed", True), ("Succeeded", True),
                                          ("Running", False), ("Pending", False)])
def test_lock_of_a_finished_owner_is_taken_over(locked, phase, taken):
    """kubelet fails a pod at admission when the node agent cannot reach the API; the agent
    cannot release the lock then, and the pod will never be allocated."""
    api, clock, locker = locked
    locker.acquire("n1", "ns", "a")
    api.pods[("ns", "a")]["status"] = {"phase": phase}
    if taken:
        assert locker.acquire("n1", "ns", "b").endswith(",ns,b")
    else:
        with pytest.raises(LockError, match="locked by ns/a"):
            locker.acquire("n1", "ns", "b")


def _watched(api):
    """The nodes' watched copy as the node locker reads it: (resourceVersion, lock)."""
    def cached(name):
        meta = api.nodes[name]["metadata"]
        return meta["resourceVersion"], meta["annotations"].get(C.ANNO_NODE_LOCK)
    return cached


def test_a_bind_waits_for_the_lock_release_then_refuses_after_wait_s(locked):
    api, clock, _ = locked
    import threading
    cached = _watched(api)
    api.pods[("ns", "b")] = {"metadata": {"name": "b"}}
    locker = NodeLocker(api, clock, cached=cached, wait_s=5.0)
    first = locker.acquire("n1", "ns", "a")
    threading.Timer(0.3, locker.release, ("n1", first)).start()    # the node agent, later
    assert locker.acquire("n1", "ns", "b").endswith(",ns,b")         # waited, not refused
    quick = NodeLocker(api, clock, cached=cached, wait_s=0.2)
    with pytest.raises(LockError, match="locked by ns/b"):           # never released
        quick.acquire("n1", "ns", "c")


def test_a_waiting_bind_reads_nothing_until_it_would_refuse(locked):
    """While the watched copy shows the lock held, a bind that may wait asks the API server
    nothing; before it refuses it reads the node and the holder, and takes over from a holder
    that no longer exists."""
    api, clock, _ = locked
    import threading
    reads = []
    for verb in ("get_node", "get_pod"):
        real = getattr(api, verb)
        setattr(api, verb, lambda *a, _real=real, _verb=verb: reads.append(_verb) or _real(*a))
    cached = _watched(api)
    api.pods[("ns", "b")] = {"metadata": {"name": "b"}}
    locker = NodeLocker(api, clock, cached=cached, wait_s=5.0)
    first = locker.acquire("n1", "ns", "a")
    threading.Timer(0.3, locker.release, ("n1", first)).start()
    assert locker.acquire("n1", "ns", "b").endswith(",ns,b") and reads == []
    del api.pods[("ns", "b")]                   # the holder is gone, its lock left behind
    quick = NodeLocker(api, clock, cached=cached, wait_s=0.2)
    assert quick.acquire("n1", "ns", "c").endswith(",ns,c")
    assert reads == ["get_node", "get_pod"]


def _elector(api, clock, identity):
    return LeaderElector(api, LeaseConfig(True, "l", "ns", identity, 10, 7, 2), clock)


def test_leader_election_with_a_fake_lease():
    api, clock = FakeApi(), FakeClock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    clock.t = 5
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    clock.t = 14                                       # b saw the renewal at 5: 9 s < 10 s
    assert not b.try_acquire_or_renew()
    clock.t = 16
    assert b.try_acquire_or_renew()
    assert api.leases["l"]["spec"]["holderIdentity"] == "b"
    assert api.leases["l"]["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()               # a follower now
