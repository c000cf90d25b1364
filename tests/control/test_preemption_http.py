"""Preemption over HTTP against the API server double: the filter preempts the fewest
lower-priority pods on the GPU a refused pod needs (DisruptionTarget, deletion, nominated
node), the freed slices are held for it and for nobody else, a hold ends when its pod goes
elsewhere; the preempt verb answers kube-scheduler's proposals (its own victims plus what the
GPU needs, a PodDisruptionBudget spared where another set exists), and a pod over its
namespace's quota preempts only its own namespace."""
import pytest

from ctlhelpers import (add_gpu_node, allocated, create, eventually, gpu_pod, read_pod,
                        schedule, start_plane)

NODE = "node-a"


@pytest.fixture
def plane(core_v1, apiserver, request):
    add_gpu_node(core_v1, NODE, gpus=2, mem=40000, gpu_type="NVIDIA-A100")
    extra = getattr(request, "param", ())
    control = start_plane(apiserver, *extra)
    try:
        eventually(lambda: control.plane.state.node_names() == [NODE])
        yield control
    finally:
        control.stop()


def _pod(core_v1, control, name, mem, priority=0, gpu=None, namespace="default", labels=None):
    annotations = {"nvidia.com/use-gpuuuid": gpu} if gpu else {}
    pod = gpu_pod(name, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem,
                         "nvidia.com/gpucores": 10}, annotations, namespace=namespace,
                  labels=labels)
    pod["spec"]["priority"] = priority
    return create(core_v1, control, pod)


def _placed(core_v1, control, name, mem, priority=0, gpu=None, **kw):
    pod = _pod(core_v1, control, name, mem, priority, gpu, **kw)
    node, result, _ = schedule(core_v1, control, pod)
    assert node == NODE, result
    return read_pod(core_v1, name, kw.get("namespace", "default"))


def _gone(core_v1, name, namespace="default"):
    from kubernetes.client.rest import ApiException
    try:
        core_v1.read_namespaced_pod(name, namespace)
    except ApiException as e:
        return e.status == 404
    return False


def _uuid(pod):
    (ctr,) = allocated(pod)
    return ctr[0].uuid


def test_filter_preempts_the_fewest_on_one_gpu_and_holds_the_slices(core_v1, plane):
    g0, g1 = "GPU-node-a-0", "GPU-node-a-1"
    _placed(core_v1, plane, "a", 20000, gpu=g0)
    _placed(core_v1, plane, "b", 20000, gpu=g0)
    _placed(core_v1, plane, "c", 30000, gpu=g1)
    _placed(core_v1, plane, "d", 8000, priority=1000, gpu=g1)       # as high: stays
    high = _pod(core_v1, plane, "high", 30000, priority=1000)
    result = plane.client.filter(high, [NODE])
    assert result["NodeNames"] == [] and "preempting: evicting default/c (priority 0) frees " \
        f"{g1}" in result["FailedNodes"][NODE]
    eventually(lambda: _gone(core_v1, "c"))          # the double deletes at once
    assert not any(_gone(core_v1, n) for n in ("a", "b", "d"))
    assert read_pod(core_v1, "high")["status"].get("nominatedNodeName") == NODE
    # a third pod of low priority cannot take what c left: it is held for `high`
    third = _pod(core_v1, plane, "third", 20000, gpu=g1)
    assert plane.client.filter(third, [NODE])["NodeNames"] == []
    snapshot = plane.plane.state.preemption_snapshot()
    assert [(h["preemptor"], h["victims"]) for h in snapshot["holds"]] == [
        ("default/high", ["default/c"])]
    node, _, _ = schedule(core_v1, plane, read_pod(core_v1, "high"))
    assert node == NODE and _uuid(read_pod(core_v1, "high")) == g1
    assert plane.plane.state.preemption_snapshot()["holds"] == []
    assert plane.plane.state.overcommitted() == []


def test_a_hold_ends_when_its_pod_goes_elsewhere(core_v1, plane):
    _placed(core_v1, plane, "low", 35000, gpu="GPU-node-a-0")
    _placed(core_v1, plane, "low2", 35000, gpu="GPU-node-a-1")
    high = _pod(core_v1, plane, "high", 30000, priority=10)
    assert plane.client.filter(high, [NODE])["NodeNames"] == []
    eventually(lambda: len([n for n in ("low", "low2") if _gone(core_v1, n)]) == 1)
    core_v1.delete_namespaced_pod("high", "default")
    eventually(lambda: plane.plane.state.preemption_snapshot()["holds"] == [])
    third = _pod(core_v1, plane, "third", 30000)
    assert schedule(core_v1, plane, third)[0] == NODE       # the freed slices are free again


def test_no_preemption_for_equal_priority_or_preemption_policy_never(core_v1, plane):
    _placed(core_v1, plane, "x", 38000, priority=5, gpu="GPU-node-a-0")
    _placed(core_v1, plane, "y", 38000, priority=5, gpu="GPU-node-a-1")
    same = _pod(core_v1, plane, "same", 10000, priority=5)
    assert "preempting" not in str(plane.client.filter(same, [NODE])["FailedNodes"])
    never = _pod(core_v1, plane, "never", 10000, priority=100)
    never["spec"]["preemptionPolicy"] = "Never"
    assert "preempting" not in str(plane.client.filter(never, [NODE])["FailedNodes"])
    assert not _gone(core_v1, "x") and not _gone(core_v1, "y")


@pytest.mark.parametrize("plane", [("--preemption", "verb")], indirect=True)
def test_preempt_verb_adds_what_the_gpu_needs_and_spares_a_budget(core_v1, plane):
    g0, g1 = "GPU-node-a-0", "GPU-node-a-1"
    from kubernetes import client
    policy = client.PolicyV1Api(core_v1.api_client)
    policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"app": "db"}},
                                             "minAvailable": 1}})
    policy.patch_namespaced_pod_disruption_budget_status("db", "default", {"status": {
        "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}})
    db = _placed(core_v1, plane, "db", 30000, gpu=g0, labels={"app": "db"})
    q = _placed(core_v1, plane, "q", 15000, gpu=g1)
    r = _placed(core_v1, plane, "r", 15000, gpu=g1)
    _placed(core_v1, plane, "keep", 8000, priority=100, gpu=g1)
    cpu_only = "uid-of-a-pod-kube-scheduler-needs-gone"
    eventually(lambda: plane.plane.state.preemption.budgets)
    high = _pod(core_v1, plane, "high", 28000, priority=100)
    filtered = plane.client.filter(high, [NODE])
    assert filtered["NodeNames"] == [] and "preempting" not in filtered["FailedNodes"][NODE]
    # kube-scheduler >= #135486 offers the node with no victims; 1.34 with its own (CPU) one
    answer = plane.client.preempt(high, {NODE: [cpu_only]})["NodeNameToMetaVictims"]
    assert cpu_only in [p["UID"] for p in answer[NODE]["Pods"]] and len(answer[NODE]["Pods"]) == 3
    answer = plane.client.preempt(high, {NODE: []})["NodeNameToMetaVictims"]
    assert sorted(p["UID"] for p in answer[NODE]["Pods"]) == sorted(
        [q["metadata"]["uid"], r["metadata"]["uid"]]) and answer[NODE]["NumPDBViolations"] == 0
    assert db["metadata"]["uid"] not in str(answer)
    # kube-scheduler evicts q and r: the proposal becomes the hold, the slices wait for `high`
    core_v1.delete_namespaced_pod("q", "default")
    core_v1.delete_namespaced_pod("r", "default")
    eventually(lambda: [h["victims"] for h in
                        plane.plane.state.preemption_snapshot()["holds"]] ==
               [["default/q", "default/r"]])
    third = _pod(core_v1, plane, "third", 15000, gpu=g1)
    assert plane.client.filter(third, [NODE])["NodeNames"] == []
    assert schedule(core_v1, plane, read_pod(core_v1, "high"))[0] == NODE
    assert _uuid(read_pod(core_v1, "high")) == g1 and not _gone(core_v1, "db")


def test_over_quota_preempts_only_its_own_namespace(core_v1, plane):
    for ns in ("team", "other"):
        core_v1.create_namespace({"metadata": {"name": ns}})
    core_v1.create_namespaced_resource_quota("team", {
        "metadata": {"name": "gpu"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "30000"}}})
    eventually(lambda: plane.plane.state.namespace_limits("team"))
    _placed(core_v1, plane, "theirs", 38000, gpu="GPU-node-a-0", namespace="other")
    _placed(core_v1, plane, "mine", 20000, gpu="GPU-node-a-1", namespace="team")
    _placed(core_v1, plane, "more", 18000, gpu="GPU-node-a-1", namespace="other")
    big = _pod(core_v1, plane, "big", 20000, priority=100, namespace="team")
    result = plane.client.filter(big, [NODE])
    assert "preempting: evicting team/mine (priority 0)" in result["FailedNodes"][NODE]
    assert "may preempt only pods of namespace team" in result["FailedNodes"][NODE]
    eventually(lambda: _gone(core_v1, "mine", "team"))
    assert not _gone(core_v1, "theirs", "other") and not _gone(core_v1, "more", "other")
    huge = _pod(core_v1, plane, "huge", 35000, priority=100, namespace="team")
    result = plane.client.filter(huge, [NODE])
    assert "preempting" not in str(result["FailedNodes"])          # only other's pods would do
    assert not _gone(core_v1, "theirs", "other")
