"""Holds in the state: a gone victim's slices stay held for its preemptor (no quota charged),
no other pod's filter gets them, the preemptor's does; a hold ends when its pod goes elsewhere
or lingers too long; a proposal answered to kube-scheduler becomes the hold it acts on."""
from hami_common.pod_devices import ContainerDevice
from hami_control.placement import Engine, PlacementConfig, Reservation
from hami_control.placement.annotations import NodeRegistration
from hami_control.preemption.book import held_key
from hami_control.state import SchedulerState
from tests.unit._placement_fixtures import gpu, request


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _state(clock):
    state = SchedulerState(Engine(PlacementConfig("binpack", "binpack")), clock=clock,
                           linger_s=30)
    state.apply_node("n", NodeRegistration("n", (gpu("G0", mem=40000, index=0),
                                                 gpu("G1", mem=40000, index=1))))
    return state


def _pod(state, name, prio, g, mem, ns="t"):
    key = f"{ns}/{name}"
    pod = {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
           "spec": {"priority": prio, "nodeName": "n"}}
    state.note_pod(key, pod, False)
    state.apply_pod(key, None, Reservation(key, "n", ((ContainerDevice(g, mem, 10),),)))


def _gone(state, name, ns="t"):
    state.note_pod(f"{ns}/{name}", {}, True)
    state.apply_pod(f"{ns}/{name}", None, None, deleted=True)


def _full(state):
    """Both GPUs 35000 of 40000 MiB full of priority-0 pods; `high` (30000 MiB, priority 100)
    preempted for: its plan."""
    _pod(state, "a", 0, "G0", 35000)
    _pod(state, "b", 0, "G1", 35000)
    plan, _ = state.preempt(request(name="high", mem=30000, cores=10), 100, ["n"])
    return plan


def _decide(state, name, mem, prio=0):
    req = request(name=name, mem=mem, cores=10)
    placement = state.decide(req, ["n"])
    state.confirm(req.key, placement.token, None)
    return placement.decision


def test_the_freed_slice_waits_for_its_preemptor_and_nobody_else():
    clock = Clock()
    state = _state(clock)
    plan = _full(state)
    assert plan is not None and len(plan.victims) == 1
    victim = plan.victims[0].key.split("/")[1]
    _gone(state, victim)
    held = state.view.reservation(held_key(f"t/{victim}"))
    assert held is not None and held.held_for == "t/high"
    assert state.view.namespace_used("t").mem == 35000          # held slices count nowhere
    assert not _decide(state, "third", 20000).ok                 # not for a third pod
    decision = _decide(state, "high", 30000)
    assert decision.ok and state.hold_of("t/high") is None
    assert state.view.reservation(held_key(f"t/{victim}")) is None
    assert state.overcommitted() == []


def test_a_hold_that_nobody_comes_for_ends_after_the_linger():
    clock = Clock()
    state = _state(clock)
    plan = _full(state)
    _gone(state, plan.victims[0].key.split("/")[1])
    clock.now += 29
    assert not _decide(state, "third", 30000).ok
    clock.now += 2
    assert _decide(state, "third", 30000).ok                     # the hold expired first
    assert state.preemption_snapshot()["recent"][-1]["event"] == "ended"


def test_a_hold_ends_when_its_pod_is_bound_elsewhere():
    state = _state(Clock())
    _full(state)
    state.note_pod("t/high", {"metadata": {"name": "high", "namespace": "t"},
                              "spec": {"priority": 100, "nodeName": "other"}}, False)
    assert state.hold_of("t/high") is None


def test_a_proposal_becomes_the_hold_on_the_node_kube_scheduler_acts_on():
    state = _state(Clock())
    _pod(state, "a", 0, "G0", 35000)
    _pod(state, "b", 0, "G1", 35000)
    plans = state.preempt_answer(request(name="high", mem=30000, cores=10), 100, {"n": []})
    assert plans["n"].ok and state.hold_of("t/high") is None
    victim = plans["n"].victims[0].key.split("/")[1]
    _gone(state, victim)
    assert state.hold_of("t/high").victims == {f"t/{victim}"}
    assert state.view.reservation(held_key(f"t/{victim}")).held_for == "t/high"


def test_no_search_when_no_pod_has_a_lower_priority():
    state = _state(Clock())
    _pod(state, "a", 5, "G0", 35000)
    _pod(state, "b", 5, "G1", 35000)
    assert state.preempt(request(name="same", mem=30000), 5, ["n"]) == (None, {})
