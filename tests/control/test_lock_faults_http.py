"""The node lock and the failure paths of filter and bind, with faults injected into the API
server double: every pod ends bound with consistent annotations, or unbound and retryable."""
import dataclasses
import json
import threading

import pytest

from ctlhelpers import (add_gpu_node, allocated, create, eventually, gpu_pod, read_pod,
                        schedule)
from hami_common import constants as C
from hami_common import node_lock, node_register

WHOLE = {"nvidia.com/gpu": 1}
BINDINGS = ["bindings", "pods/binding"]     # the client posts to .../bindings


@pytest.fixture
def one_node(core_v1, control):
    add_gpu_node(core_v1, "n1", gpus=2)
    eventually(lambda: control.plane.state.node_names())
    return "n1"


def _lock(core_v1, node):
    return (core_v1.read_node(node).metadata.annotations or {}).get(C.ANNO_NODE_LOCK)


def _set_lock(core_v1, node, value):
    core_v1.patch_node(node, {"metadata": {"annotations": {C.ANNO_NODE_LOCK: value}}},
                       _content_type="application/merge-patch+json")


def _events(core_v1, pod):
    raw = core_v1.list_namespaced_event("default", field_selector=f"involvedObject.name={pod}",
                                        _preload_content=False).data
    return json.loads(raw)["items"]


def test_a_held_lock_refuses_and_is_taken_over_when_its_owner_goes(core_v1, control, one_node):
    owner = create(core_v1, control, gpu_pod("owner", WHOLE))
    assert schedule(core_v1, control, owner, finish=False)[0] == "n1"     # lock stays held
    pod = create(core_v1, control, gpu_pod("next", WHOLE))
    node, result, bound = schedule(core_v1, control, pod)
    assert node is None and "locked by default/owner" in bound["Error"]
    assert read_pod(core_v1, "next")["spec"].get("nodeName") is None
    assert any(e["reason"] == "BindingFailed" and "locked" in e["message"]
               for e in _events(core_v1, "next"))
    core_v1.delete_namespaced_pod("owner", "default")
    assert schedule(core_v1, control, pod)[0] == "n1"


def test_a_bind_waits_for_the_lock_release_instead_of_refusing(core_v1, control, one_node):
    """kube-scheduler would send a refused pod into its backoff (1 s and more): the bind
    waits (--lock-wait) for the node agent to release the lock, here half a second later."""
    owner = create(core_v1, control, gpu_pod("owner", WHOLE))
    assert schedule(core_v1, control, owner, finish=False)[0] == "n1"     # lock stays held
    pod = create(core_v1, control, gpu_pod("next", WHOLE))
    release = threading.Timer(0.5, _set_lock, (core_v1, "n1", None))
    release.start()
    try:
        node, _, bound = schedule(core_v1, control, pod, finish=False)
    finally:
        release.join()
    assert node == "n1" and bound == {"Error": ""}
    assert _lock(core_v1, "n1").endswith(",default,next")


def test_an_expired_lock_is_taken_over(core_v1, control, one_node):
    keeper = create(core_v1, control, gpu_pod("keeper", {"nvidia.com/gpucores": 10}))
    from datetime import datetime, timedelta, timezone
    old = datetime.now(timezone.utc) - timedelta(minutes=6)
    _set_lock(core_v1, "n1", node_lock.encode(node_lock.NodeLock(old, "default", "keeper")))
    pod = create(core_v1, control, gpu_pod("late", WHOLE))
    assert schedule(core_v1, control, pod, finish=False)[0] == "n1"
    assert _lock(core_v1, "n1").endswith(",default,late")
    assert keeper["metadata"]["name"] == "keeper"


def test_a_failed_binding_releases_the_lock_at_once(core_v1, control, apiserver, one_node):
    pod = create(core_v1, control, gpu_pod("p", WHOLE))
    apiserver.set_faults(rules=[{"code": 500, "verbs": ["create"], "resources": BINDINGS,
                                 "times": 1}])
    node, _, bound = schedule(core_v1, control, pod)
    assert node is None and "500" in bound["Error"] and "lock is released" in bound["Error"]
    assert _lock(core_v1, "n1") is None
    assert read_pod(core_v1, "p")["spec"].get("nodeName") is None
    assert any(e["reason"] == "BindingFailed" for e in _events(core_v1, "p"))
    assert schedule(core_v1, control, read_pod(core_v1, "p"))[0] == "n1"    # the retry works


def test_a_lost_binding_answer_is_a_success(core_v1, control, apiserver, one_node):
    pod = create(core_v1, control, gpu_pod("p", WHOLE))
    apiserver.set_faults(rules=[{"code": 500, "verbs": ["create"], "resources": BINDINGS,
                                 "times": 1, "after": True}])
    node, _, bound = schedule(core_v1, control, pod)
    assert node == "n1" and bound == {"Error": ""}
    assert read_pod(core_v1, "p")["spec"]["nodeName"] == "n1"


@pytest.mark.parametrize("code,after", [(500, False), (409, False), (500, True)],
                         ids=["500", "409", "lost-answer"])
def test_a_failed_decision_write_rolls_back(core_v1, control, apiserver, one_node, code, after):
    pods = [create(core_v1, control, gpu_pod(f"p{i}", WHOLE)) for i in range(3)]
    apiserver.set_faults(rules=[{"code": code, "verbs": ["patch"], "resources": ["pods"],
                                 "name": "p0", "times": 1, "after": after}])
    assert control.client.filter(pods[0], ["n1"])["NodeNames"] == ["n1"]
    bound = control.client.bind("default", "p0", pods[0]["metadata"]["uid"], "n1")
    assert "could not record the GPU decision" in bound["Error"]     # never bound without it
    assert read_pod(core_v1, "p0")["spec"].get("nodeName") is None and _lock(core_v1, "n1") is None
    if not after:   # rolled back: the share is free again, p0 finds no room once p1, p2 hold it
        assert schedule(core_v1, control, pods[1])[0] == "n1"
        assert schedule(core_v1, control, pods[2])[0] == "n1"
        assert control.client.filter(pods[0], ["n1"])["NodeNames"] == []
        return
    # The write did land (its answer was lost): its annotations hold the GPU until p0 is
    # filtered again, which replaces them.
    eventually(lambda: control.plane.state.reservation("default/p0"))
    assert schedule(core_v1, control, pods[0])[0] == "n1"
    assert schedule(core_v1, control, pods[1])[0] == "n1"
    assert control.client.filter(pods[2], ["n1"])["NodeNames"] == []


def test_api_latency_and_dropped_watches(core_v1, control, apiserver, one_node):
    apiserver.set_faults(latency_ms=20)
    first = create(core_v1, control, gpu_pod("first", WHOLE))
    assert schedule(core_v1, control, first)[0] == "n1"
    apiserver.drop_watches()
    apiserver.clear_faults()
    core_v1.delete_namespaced_pod("first", "default")       # seen by the re-opened watch
    pods = [create(core_v1, control, gpu_pod(f"p{i}", WHOLE)) for i in range(2)]
    eventually(lambda: control.plane.state.reservation("default/first") is None)
    assert [schedule(core_v1, control, p)[0] for p in pods] == ["n1", "n1"]
    uuids = [allocated(read_pod(core_v1, f"p{i}"))[0][0].uuid for i in range(2)]
    assert len(set(uuids)) == 2


def test_a_gpu_turned_unhealthy_between_filter_and_bind_is_not_bound(core_v1, control,
                                                                     one_node):
    """An XID after the filter placed the pod: binding it would have kubelet's Allocate fail
    the pod for good; the bind refuses, and the next filter places it on a healthy GPU."""
    pod = create(core_v1, control, gpu_pod("p", WHOLE))
    first = control.client.filter(pod, ["n1"])
    assert first["NodeNames"] == ["n1"]
    (given,) = {d.uuid for ctr in allocated(read_pod(core_v1, "p")) for d in ctr}
    node = core_v1.read_node("n1")
    devs = node_register.decode(node.metadata.annotations[C.ANNO_NODE_REGISTER])
    sick = [dataclasses.replace(d, health=d.id != given) for d in devs]
    core_v1.patch_node("n1", {"metadata": {"annotations": {
        C.ANNO_NODE_REGISTER: node_register.encode(sick)}}})
    eventually(lambda: control.plane.state.unhealthy("n1", [given]) == [given])
    meta = pod["metadata"]
    bound = control.client.bind("default", "p", meta["uid"], "n1")
    assert given in bound["Error"] and "Unhealthy" in bound["Error"], bound
    assert read_pod(core_v1, "p")["spec"].get("nodeName") is None
    assert _lock(core_v1, "n1") is None
    node_name, _, bound = schedule(core_v1, control, read_pod(core_v1, "p"))
    assert node_name == "n1" and bound == {"Error": ""}
    assert {d.uuid for ctr in allocated(read_pod(core_v1, "p")) for d in ctr} == {
        d.id for d in devs if d.id != given}
