"""The demo's scenario, pod by pod: every example pod went through the webhook, the extender,
kubelet's Allocate on hami-node and ran under the shim against its node's simulated GPUs;
each expectation is asserted here on its own, from the structured result and the API."""
import json

from hami_common import constants as C
from hami_sim.demo.expect import MIB
from hami_sim.demo.report import HEADERS, format_table, pod_row

SHARE_BAND = 5.0            # percentage points around the gpucores limit


def table(run) -> str:
    return format_table(HEADERS, [pod_row(p) for p in run.result.pods]) + "\n" + run.output


def test_every_example_meets_its_expectation(demo_run):
    result = demo_run.result
    assert not result.timed_out, table(demo_run)
    assert [p.name for p in result.pods] == ["gpumem-oom", "gpucores-30", "share-a", "share-b",
                                             "t4-only", "too-big"]
    assert result.ok, table(demo_run)


def test_every_pod_went_through_the_webhook_and_the_extender(demo_run):
    v1 = demo_run.cluster.core_v1
    for pod in demo_run.result.pods:
        obj = json.loads(v1.read_namespaced_pod(pod.name, "default",
                                                _preload_content=False).data)
        assert obj["spec"]["schedulerName"] == C.SCHEDULER_NAME
        annotations = obj["metadata"].get("annotations") or {}
        if pod.node:
            assert annotations[C.ANNO_VGPU_NODE] == pod.node
            assert annotations[C.ANNO_BIND_PHASE] == C.BIND_PHASE_SUCCESS
        else:
            assert C.ANNO_VGPU_NODE not in annotations


def test_out_of_memory_at_the_gpumem_limit_within_one_chunk(demo_run):
    pod = demo_run.result.pod("gpumem-oom")
    [c] = pod.containers
    r = c.result
    assert r["error"] == "CUDA_ERROR_OUT_OF_MEMORY", table(demo_run)
    assert c.memory_limit == 1024 * MIB                      # the example's nvidia.com/gpumem
    assert r["total_mib"] == 1024                            # the device size the container saw
    # the limit holds by the driver's count: what was allocated plus the context and modules
    assert 0 <= 1024 - r["used_mib"] < r["chunk_mib"]
    assert r["held_mib"] < r["used_mib"]                     # the context costs something
    assert c.memory_peak <= c.memory_limit
    assert c.memory_peak >= (1024 - r["chunk_mib"]) * MIB


def test_gpucores_hold_the_achieved_share_near_the_limit(demo_run):
    for name, limit in (("gpucores-30", 30), ("share-a", 40), ("share-b", 20)):
        [c] = demo_run.result.pod(name).containers
        assert c.cores_limit == limit
        # c.share is the simulator's timeline (ground truth); the workload's own figure agrees.
        assert abs(c.share - limit) <= SHARE_BAND, table(demo_run)
        assert abs(c.result["share"] - c.share) <= 2.0, (name, c.result, c.share)


def test_two_pods_share_one_gpu(demo_run):
    a, b = demo_run.result.pod("share-a"), demo_run.result.pod("share-b")
    assert a.node == b.node and a.node is not None
    assert len(a.gpus) == 1 and a.gpus == b.gpus, table(demo_run)
    node = demo_run.cluster.node(a.node)
    assert a.gpus[0] in node.gpu_index


def test_gpu_model_constraint_is_honoured(demo_run):
    pod = demo_run.result.pod("t4-only")
    assert pod.node == "node-b"                              # the only node with T4s
    assert all("Tesla T4" in pod.gpu_types[u] for u in pod.gpus)
    [c] = pod.containers
    assert c.result["name"] == "Tesla T4" and c.result["count"] == 1


def test_pod_that_cannot_fit_stays_pending_with_the_extenders_reasons(demo_run):
    pod = demo_run.result.pod("too-big")
    assert pod.node is None and pod.phase == "Pending"
    assert set(pod.failed_nodes) == {"node-a", "node-b"}
    assert all("CardInsufficientMemory" in r for r in pod.failed_nodes.values())
    v1 = demo_run.cluster.core_v1
    obj = json.loads(v1.read_namespaced_pod("too-big", "default", _preload_content=False).data)
    [cond] = [c for c in obj["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("0/2 nodes are available:")
    events = v1.list_namespaced_event("default", field_selector="involvedObject.name=too-big")
    failed = [e for e in events.items if e.reason == "FailedScheduling"]
    assert failed and failed[0].type == "Warning"
    assert "CardInsufficientMemory" in failed[0].message


def test_report_names_each_step(demo_run):
    out = demo_run.output
    for text in ("hami-control serving https://", "created (schedulerName hami-scheduler",
                 "filter chose node-", "FailedScheduling: 0/2 nodes are available",
                 "container default/gpumem-oom/main exited 0"):
        assert text in out, out
