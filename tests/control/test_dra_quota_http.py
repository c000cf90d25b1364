"""Namespace GPU quotas for DRA claims, over HTTP against the API server double: the webhook
gates a DRA pod of a namespace with a quota, hami-control lifts the gate of the pod that fits
and keeps the next one gated with the numbers in an Event, counts the claim kube-scheduler
allocates (its consumedCapacity) in the quota's status, its metrics, the dashboard's snapshot
and against extender pods, and lifts the next gate once the claim and its pod are gone.
(kube-scheduler's part, allocating the claim, is played here; tests/k8s/test_dra_real.py
checks the gate against the real one.)"""
import json
import urllib.request

import pytest

from ctlhelpers import add_gpu_node, create, eventually, gpu_pod, read_pod, start_plane
from hami_common.constants import DRA_DRIVER
from hami_common.quantity import parse_quantity
from hami_control.webhook.dra import QUOTA_GATE

NS = "team-d"
MEM = "limits.nvidia.com/gpumem"


@pytest.fixture
def team(core_v1, apiserver):
    core_v1.create_namespace({"metadata": {"name": NS, "labels": {"hami.io/dra": "true"}}})
    add_gpu_node(core_v1, "node-a", gpus=2, mem=16000)        # for an extender pod
    control = start_plane(apiserver, "--status-period", "0.3", "--dashboard-listen", "127.0.0.1:0")
    try:
        eventually(lambda: control.plane.sync.synced and control.plane.state.node_names())
        core_v1.create_namespaced_resource_quota(NS, {"metadata": {"name": "gpu"},
                                                      "spec": {"hard": {MEM: "4000"}}})
        eventually(lambda: control.plane.state.namespace_limits(NS))
        yield control
    finally:
        control.stop()


def _dra_pod(core_v1, control, name: str, mem: int) -> dict:
    return create(core_v1, control, gpu_pod(name, {"nvidia.com/gpu": 1,
                                                   "nvidia.com/gpumem": mem}, namespace=NS))


def _gates(core_v1, name: str) -> list:
    return [g["name"] for g in read_pod(core_v1, name, NS)["spec"].get("schedulingGates") or []]


def _allocate(core_v1, pod: dict, mem: int, cores: int) -> str:
    """kube-scheduler's part: the pod's claim, allocated on a GPU of node-x and reserved for
    the pod (consumedCapacity as the allocator writes it)."""
    from kubernetes import client
    api = client.ResourceV1Api(core_v1.api_client)
    name = f"{pod['metadata']['name']}-gpu"
    api.create_namespaced_resource_claim(NS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": DRA_DRIVER}}]}}}, _preload_content=False)
    api.patch_namespaced_resource_claim_status(name, NS, {"status": {
        "allocation": {"devices": {"results": [{
            "request": "gpu", "driver": DRA_DRIVER, "pool": "node-x", "device": "gpu-x-0",
            "shareID": "7d3c6f5e-0000-4000-8000-000000000001",
            "consumedCapacity": {"memory": f"{mem}Mi", "cores": str(cores)}}]}},
        "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"],
                         "uid": pod["metadata"]["uid"]}]}}, _preload_content=False)
    return name


def _events(core_v1, name: str) -> list:
    return [(e.reason, e.message) for e in core_v1.list_namespaced_event(NS).items
            if e.involved_object.name == name]


def test_claim_pods_are_held_to_the_quota_and_their_claims_counted(core_v1, team):
    first = _dra_pod(core_v1, team, "first", 3000)
    assert first["spec"]["schedulingGates"] == [{"name": QUOTA_GATE}]    # the webhook's
    eventually(lambda: _gates(core_v1, "first") == [], timeout=10)      # fits: lifted
    second = _dra_pod(core_v1, team, "second", 2000)
    assert second["spec"]["schedulingGates"] == [{"name": QUOTA_GATE}]
    why = f"namespace {NS} {MEM}: used 3000 + asked 2000 > limit 4000 MiB"
    eventually(lambda: any(r == "GPUQuotaExceeded" and why in m
                           for r, m in _events(core_v1, "second")), timeout=10)

    claim = _allocate(core_v1, first, 3000, 30)      # counted now in what it consumed

    def used():
        status = core_v1.read_namespaced_resource_quota("gpu", NS).status
        return {k: int(parse_quantity(v)) for k, v in ((status and status.used) or {}).items()}
    eventually(lambda: used() == {MEM: 3000}, timeout=15)
    assert team.plane.state.claims.waiting(f"{NS}/first") is None      # its claim counts
    metrics = urllib.request.urlopen(team.url + "/metrics", timeout=5).read().decode()
    assert (f'hami_dra_claim_memory_bytes{{claim="{claim}",device="gpu-x-0",'
            f'namespace="{NS}",nodename="node-x"}} 3.145728e+09') in metrics
    assert f'hami_resource_quota_used{{limit="4000",namespace="{NS}",' \
           f'quota_name="nvidia.com/gpumem"}} 3000.0' in metrics
    def snapshot():
        return json.loads(urllib.request.urlopen(team.plane.dashboard.url + "/api/snapshot",
                                                 timeout=5).read())
    shown = eventually(lambda: snapshot()["claims"] and snapshot())   # built in the background
    assert shown["claims"] == [{"key": f"{NS}/{claim}", "node": "node-x",
                                   "devices": [["gpu-x-0", 3000, 30]], "pods": ["first"]}]
    assert shown["overview"]["claims"] == 1

    # An extender pod of the namespace sees the claim's 3000 MiB too.
    plain = create(core_v1, team, gpu_pod("plain", {"nvidia.com/gpu": 1,
                                                    "nvidia.com/gpumem": 2000},
                                          namespace=NS, labels={"hami.io/dra": "false"}))
    result = team.client.filter(plain, ["node-a"])
    assert "used 3000 + asked 2000 > limit 4000 MiB" in result["FailedNodes"]["node-a"]
    assert _gates(core_v1, "second") == [QUOTA_GATE]

    from kubernetes import client
    client.ResourceV1Api(core_v1.api_client).delete_namespaced_resource_claim(claim, NS)
    core_v1.delete_namespaced_pod("first", NS)
    eventually(lambda: _gates(core_v1, "second") == [], timeout=10)
    assert team.plane.state.claims.waiting(f"{NS}/second")[1] is False   # holds its ask
    eventually(lambda: used() == {MEM: 2000}, timeout=15)


def test_without_a_quota_dra_pods_are_not_gated(core_v1, team):
    core_v1.delete_namespaced_resource_quota("gpu", NS)
    eventually(lambda: not team.plane.state.namespace_limits(NS))
    assert "schedulingGates" not in _dra_pod(core_v1, team, "free", 3000)["spec"]
