"""SchedulerState: what the sync and the filter apply, in every order they can arrive in."""
import pytest

from hami_common.node_register import DeviceInfo
from hami_common.pod_devices import ContainerDevice
from hami_common.request import parse_pod
from hami_control.placement.annotations import NodeRegistration
from hami_control.placement import Reservation
from hami_control.state import make_state


def _registration(name="n1", gpus=1, mem=1000):
    devices = tuple(DeviceInfo(id=f"GPU-{name}-{i}", index=i, count=10, devmem=mem,
                               devcore=100, type="NVIDIA-T4") for i in range(gpus))
    return NodeRegistration(name, devices)


def _request(name="p", gpus=1):
    pod = {"metadata": {"name": name, "namespace": "default"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {
               "nvidia.com/gpu": str(gpus)}}}]}}
    return parse_pod(pod)


def _held(pod="default/p", uuid="GPU-n1-0"):
    return Reservation(pod, "n1", ((ContainerDevice(uuid, 1000, 100),),))


@pytest.fixture
def state():
    s = make_state()
    s.apply_node("n1", _registration())
    return s


def test_a_decision_is_reserved_at_once_and_confirmed(state):
    placement = state.decide(_request("a"), ["n1"])
    assert placement.decision.node == "n1"
    assert not state.decide(_request("b"), ["n1"]).decision.ok   # the GPU is taken already
    state.confirm("default/a", placement.token, 10)
    assert state.reservation("default/a").node == "n1"


def test_rollback_restores_what_the_pod_held(state):
    state.apply_pod("default/p", 5, _held())
    placement = state.decide(_request("p"), ["n1"])
    state.rollback("default/p", placement)
    assert state.reservation("default/p") == _held()


def test_events_during_a_write_are_held_back(state):
    placement = state.decide(_request("p"), ["n1"])
    state.apply_pod("default/p", 7, None)          # older than the write: the pod's creation
    assert state.reservation("default/p") is not None
    state.confirm("default/p", placement.token, 8)
    assert state.reservation("default/p") is not None
    state.apply_pod("default/p", 8, None)          # the write's own event, or older: ignored
    assert state.reservation("default/p") is not None


def test_a_lost_write_answer_is_recovered_from_the_held_event(state):
    placement = state.decide(_request("p"), ["n1"])
    landed = state.reservation("default/p")
    state.apply_pod("default/p", 9, landed)        # the write landed; its answer was lost
    state.rollback("default/p", placement)
    assert state.reservation("default/p") == landed


def test_old_events_never_undo_newer_ones(state):
    state.apply_pod("default/p", 20, _held())
    state.apply_pod("default/p", 19, None)
    assert state.reservation("default/p") == _held()
    state.apply_pod("default/p", 21, None)
    assert state.reservation("default/p") is None


def test_deletion_releases_even_while_pending(state):
    placement = state.decide(_request("p"), ["n1"])
    state.apply_pod("default/p", 3, None, deleted=True)
    state.rollback("default/p", placement)         # the write failed: the pod is gone
    assert state.reservation("default/p") is None
    assert state.decide(_request("q"), ["n1"]).decision.ok


def test_relist_forgets_missing_pods_but_not_newer_ones(state):
    state.apply_pod("default/gone", 5, _held("default/gone"))
    state.apply_pod("default/new", 50, _held("default/new", "GPU-n1-0"))
    assert state.reconcile_pods(["default/other"], 40) == 1
    assert state.reservation("default/gone") is None
    assert state.reservation("default/new") is not None


def test_node_registration_changes_only_when_it_differs(state):
    assert state.apply_node("n1", _registration()) is False
    assert state.apply_node("n1", _registration(gpus=2)) is True
    assert state.remove_node("n1") is True and state.node_names() == []
    assert state.remove_node("n1") is False


def test_unschedulable_pods_get_reasons(state):
    state.apply_pod("default/x", 1, _held("default/x"))
    decision = state.decide(_request("p"), ["n1", "ghost"]).decision
    assert decision.failed == {"n1": "1/1 CardInsufficientMemory", "ghost": "NodeUnregistered"}


def test_a_model_reestimate_rescores_each_kind_on_its_next_decision_only(monkeypatch):
    """The filters are one at a time: the one that re-estimates the workload model scores its
    own kind of pod afresh, not every recent kind (which stalled a filter for a second on the
    trace cluster); another kind is re-scored, under the new model, when it comes again."""
    from hami_control.placement import Engine, PlacementConfig
    from hami_control.placement import engine as engine_module
    from hami_control.placement.learn import OnlineWorkload
    from hami_control.placement.registry import PolicyRegistry
    from hami_control.state import SchedulerState
    registry = PolicyRegistry(learner=OnlineWorkload(first_refresh=4, max_interval=4))
    s = SchedulerState(Engine(PlacementConfig(), registry=registry))
    for n in range(20):
        s.apply_node(f"n{n}", _registration(f"n{n}", gpus=2, mem=1000 + n))   # all different
    calls = []
    real = engine_module.fit_pod
    monkeypatch.setattr(engine_module, "fit_pod", lambda *a: calls.append(1) or real(*a))
    for i in range(3):                       # two kinds
        s.decide(_request(f"p{i}", gpus=1 + i % 2), None)
    version = registry.learner.version
    calls.clear()
    s.decide(_request("p3", gpus=2), None)   # the 4th pod re-estimates the model
    assert registry.learner.version != version
    assert 0 < len(calls) <= 20, len(calls)  # its own kind only: one pass at most
    calls.clear()
    s.decide(_request("again", gpus=1), None)
    assert 0 < len(calls) <= 20, len(calls)  # the other kind: stale scores are not used


def test_decision_writer_reports_failed_writes():
    from hami_control.extender.writes import DecisionWriter
    writer = DecisionWriter(workers=2)
    writer.submit("ns/a", lambda: None)
    writer.submit("ns/b", lambda: "could not record")
    assert writer.wait("ns/a") is None and writer.wait("ns/b") == "could not record"
    assert writer.wait("ns/unknown") is None
    writer.forget("ns/b")
    assert writer.wait("ns/b") is None
    writer.close()
