"""The extender's prioritize for DRA claim pods, over HTTP against the API server double:
hami-control watches our driver's ResourceSlices and the claims, and scores the nodes of a
pod the webhook turned to claims (and gave hami-scheduler) as fragaware scores the GPU first
fit takes there; a node it does not know scores 0, a bad body gets a 400 that says why.
(kube-scheduler's part is played here; tests/k8s/test_dra_prioritize_real.py checks it
against the real one.)"""
import json
import urllib.error
import urllib.request

import pytest

from ctlhelpers import add_gpu_node, create, eventually, gpu_pod, start_plane
from hami_common.constants import DRA_DRIVER

NS = "team-p"
GIB = 1 << 30


def _slice(node: str) -> dict:
    devices = [{"name": f"gpu-{node}-{i}", "allowMultipleAllocations": True,
                "attributes": {"uuid": {"string": f"GPU-{node}-{i}"}, "index": {"int": i},
                               "type": {"string": "NVIDIA-Tesla T4"}},
                "capacity": {"memory": {"value": str(16 * GIB)}, "cores": {"value": "100"}}}
               for i in range(2)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRA_DRIVER}"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def _claim(api, node: str, mib: int) -> None:
    """kube-scheduler's part for an earlier pod: a claim allocated on the node's first GPU."""
    api.create_namespaced_resource_claim(NS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "earlier", "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": DRA_DRIVER}}]}}}, _preload_content=False)
    api.patch_namespaced_resource_claim_status("earlier", NS, {"status": {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRA_DRIVER, "pool": node,
                                 "device": f"gpu-{node}-0",
                                 "consumedCapacity": {"memory": f"{mib}Mi", "cores": "0"}}]}}}},
        _preload_content=False)


@pytest.fixture
def plane(core_v1, apiserver):
    from kubernetes import client
    api = client.ResourceV1Api(core_v1.api_client)
    core_v1.create_namespace({"metadata": {"name": NS, "labels": {"hami.io/dra": "true"}}})
    add_gpu_node(core_v1, "plugin-node")                       # a device-plugin node
    for name in ("dra-a", "dra-b"):
        core_v1.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        core_v1.patch_node_status(name, {"status": {"allocatable": {"cpu": "16",
                                                                    "memory": "64Gi"}}})
        api.create_resource_slice(_slice(name), _preload_content=False)
    _claim(api, "dra-a", 12288)
    control = start_plane(apiserver)
    try:
        eventually(lambda: control.plane.sync.synced, timeout=10)
        yield control
    finally:
        control.stop()


def test_a_claim_pod_is_scored_where_its_slice_fills_a_used_gpu(core_v1, plane):
    pod = create(core_v1, plane, gpu_pod("fill", {"nvidia.com/gpu": 1,
                                                  "nvidia.com/gpumem": 4096}, namespace=NS))
    assert pod["spec"]["schedulerName"] == "hami-scheduler"            # the webhook's
    names = ["plugin-node", "dra-b", "dra-a"]

    def answer():
        return {a["Host"]: a["Score"] for a in plane.client.prioritize(pod, names)}
    # dra-a's first GPU holds 12 GiB: 4 GiB fills it; dra-b is as free for CPU and memory
    eventually(lambda: answer()["dra-a"] == 10, timeout=10)
    assert answer() == {"plugin-node": 0, "dra-b": answer()["dra-b"], "dra-a": 10}
    assert answer()["dra-b"] < 10
    assert plane.plane.dra_nodes.assumed() == {pod["metadata"]["uid"]: "dra-a"}
    metrics = urllib.request.urlopen(plane.url + "/metrics", timeout=5).read().decode()
    assert 'hami_control_results_total{endpoint="prioritize",result="scored"}' in metrics
    assert "hami_control_prioritize_seconds_count" in metrics


def test_a_pod_of_no_claim_scores_zero_and_a_bad_body_is_told(core_v1, plane):
    plain = gpu_pod("web", namespace=NS)
    answer = plane.client.prioritize(plain, ["dra-a", "dra-b"])
    assert answer == [{"Host": "dra-a", "Score": 0}, {"Host": "dra-b", "Score": 0}]
    request = urllib.request.Request(plane.url + "/prioritize", data=json.dumps(
        {"Pod": {"metadata": {"name": "x"}}, "NodeNames": "dra-a"}).encode(),
        headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=5)
    assert e.value.code == 400
    assert "NodeNames must be a list of node names" in json.loads(e.value.read())["error"]
