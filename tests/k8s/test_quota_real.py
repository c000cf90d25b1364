"""Namespace GPU quotas and visible capacity on real Kubernetes (the real tier's fixtures:
tests/k8s/conftest.py, hami_sim/realcluster). What only a real cluster can show:
- the real quota controller keeps the `limits.nvidia.com/*` used values hami-control writes,
  while it computes Kubernetes' own `requests.nvidia.com/*` keys beside them;
- both quotas apply: the API server's admission refuses a pod over a `requests.` key at
  creation, counting the pod spec's per-GPU figures; hami-control refuses at filter, counting
  what the chosen GPUs give (2 GPUs x 3000 MiB are 6000 MiB for HAMi, 3000 for Kubernetes);
- kube-scheduler retries a pod refused with ResourceQuotaNotFit once a pod of its namespace
  ends, and 32 pods created at once never get past the quota; kubelet admits pods although
  nvidia.com/gpumem is now in the node's allocatable;
- kubectl shows node capacity and namespace use.
"""
from __future__ import annotations

import json
import time

import pytest
from k8shelpers import until

from hami_common import constants as C
from hami_common import pod_devices
from hami_common.quantity import parse_quantity
from hami_sim.realcluster.control_plane import QUOTA_SYNC_S

pytestmark = pytest.mark.timeout(900)
IMAGE = "ghcr.io/hami-py/hami-py:0.1.0"
MEM, REQ_MEM = "limits.nvidia.com/gpumem", "requests.nvidia.com/gpumem"



def _wait(check, timeout: float, what: str):
    return until(check, timeout, what, interval=1)


@pytest.fixture
def namespace(real_cluster):
    """namespace(name, hard): a namespace with a ResourceQuota `gpu`; deleted afterwards (its
    pods with it), so that the session's other tests find the GPUs free."""
    made = []

    def make(name: str, hard: dict) -> None:
        v1 = real_cluster.core_v1
        v1.create_namespace({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": name}})
        made.append(name)
        _wait(lambda: "default" in real_cluster.kubectl(
            "get", "serviceaccount", "-n", name, "-o", "name", check=False), 60, "default SA")
        v1.create_namespaced_resource_quota(name, {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu"},
            "spec": {"hard": hard}})
    yield make
    for name in made:
        real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _pod(cluster, namespace: str, name: str, seconds: int, **limits):
    cluster.core_v1.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": IMAGE,
            "command": ["python3", "-c", f"import time; time.sleep({seconds})"],
            "resources": {"limits": {f"nvidia.com/{k}": str(v) for k, v in limits.items()}}}]}})


def _read(cluster, namespace: str, name: str) -> dict:
    return json.loads(cluster.core_v1.read_namespaced_pod(name, namespace,
                                                          _preload_content=False).data)


def _unschedulable(pod: dict) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond.get("message") or ""
    return ""


def _used(cluster, namespace: str) -> dict:
    status = cluster.core_v1.read_namespaced_resource_quota("gpu", namespace).status
    return {k: int(parse_quantity(v)) for k, v in ((status and status.used) or {}).items()}


def test_gpumem_quota_refuses_with_numbers_and_frees_when_a_pod_ends(real_cluster, namespace):
    c = real_cluster
    namespace("quota-a", {MEM: "4000"})
    _pod(c, "quota-a", "first", 25, gpu=1, gpumem=3000, gpucores=10)
    _wait(lambda: _read(c, "quota-a", "first")["spec"].get("nodeName"), 120, "first bound")
    _pod(c, "quota-a", "second", 5, gpu=1, gpumem=3000, gpucores=10)
    message = _wait(lambda: _unschedulable(_read(c, "quota-a", "second")), 120,
                    "second refused")
    assert f"ResourceQuotaNotFit: namespace quota-a {MEM}: used 3000 + asked 3000 > limit " \
           "4000 MiB" in message
    assert _wait(lambda: _used(c, "quota-a").get(MEM) == 3000, 60, "status used")
    shown = c.kubectl("get", "quota", "gpu", "-n", "quota-a")
    assert f"{MEM}: 3k/4k" in shown, shown              # used/limit in kubectl's LIMIT column
    # first ends after 25 s (the checks above take a few): the refused pod is retried by
    # kube-scheduler and placed
    _wait(lambda: _read(c, "quota-a", "second")["spec"].get("nodeName"), 420,
          "second placed after first ended")


def test_a_percentage_counts_in_mib_of_the_gpu_it_got(real_cluster, namespace):
    c = real_cluster
    (_, gpus), = c.gpus().items()
    namespace("quota-p", {MEM: "100000"})
    _pod(c, "quota-p", "quarter", 300, gpu=1, **{"gpumem-percentage": 25, "gpucores": 10})
    given = _wait(lambda: _read(c, "quota-p", "quarter")["metadata"].get(
        "annotations", {}).get(C.ANNO_DEVICES_ALLOCATED), 120, "devices chosen")
    (device,), = pod_devices.decode(given)
    devmem = {d.id: d.devmem for d in gpus}[device.uuid]
    assert device.usedmem == devmem * 25 // 100, (given, devmem)
    # the quota counts the MiB of the GPU chosen, as kube-scheduler's quota never could
    assert _wait(lambda: _used(c, "quota-p").get(MEM) == devmem * 25 // 100, 60, "status used")


def test_kubernetes_and_hami_quotas_both_apply_and_count_differently(real_cluster, namespace):
    c = real_cluster
    namespace("quota-b", {MEM: "8000", REQ_MEM: "8000", "requests.nvidia.com/gpu": "3"})
    _pod(c, "quota-b", "two-gpus", 300, gpu=2, gpumem=3000, gpucores=10)
    _wait(lambda: _read(c, "quota-b", "two-gpus")["spec"].get("nodeName"), 120, "bound")
    # Kubernetes charged 3000 (the per-GPU figure), HAMi 6000 (what the two GPUs give)
    assert _wait(lambda: _used(c, "quota-b").get(MEM) == 6000 and
                 _used(c, "quota-b").get(REQ_MEM) == 3000, 60, "both used values")
    _pod(c, "quota-b", "one-more", 300, gpu=1, gpumem=3000, gpucores=10)   # K8s: 6000 <= 8000
    message = _wait(lambda: _unschedulable(_read(c, "quota-b", "one-more")), 120, "refused")
    assert "used 6000 + asked 3000 > limit 8000" in message
    from kubernetes.client.rest import ApiException
    with pytest.raises(ApiException) as refused:           # K8s: 3 GPUs asked > 3 at creation
        _pod(c, "quota-b", "over-k8s", 300, gpu=1, gpumem=100, gpucores=10)
    assert refused.value.status == 403 and "exceeded quota" in str(refused.value.body)
    time.sleep(QUOTA_SYNC_S + 3)    # the quota controller recounts: our keys stay beside its own
    assert _used(c, "quota-b")[MEM] == 6000


def test_32_pods_created_at_once_never_exceed_the_quota(real_cluster, namespace):
    c = real_cluster
    namespace("quota-c", {MEM: "5000"})
    for i in range(32):
        _pod(c, "quota-c", f"r{i}", 300, gpu=1, gpumem=1000, gpucores=1)

    def counts():
        items = json.loads(c.core_v1.list_namespaced_pod(
            "quota-c", _preload_content=False).data)["items"]
        bound = sum(1 for p in items if p["spec"].get("nodeName"))
        refused = sum(1 for p in items if "ResourceQuotaNotFit" in _unschedulable(p))
        return bound, refused
    assert _wait(lambda: counts() == (5, 27), 300, "5 bound, 27 refused")
    time.sleep(15)                          # retries (pod events) never let a sixth through
    assert counts()[0] == 5 and _used(c, "quota-c")[MEM] == 5000


def test_kubectl_shows_node_gpu_capacity_and_allocation(real_cluster):
    c = real_cluster
    (name, gpus), = c.gpus().items()
    node = json.loads(c.kubectl("get", "node", name, "-o", "json"))
    for section in ("capacity", "allocatable"):
        values = node["status"][section]
        assert int(parse_quantity(values[C.RESOURCE_MEM])) == sum(d.devmem for d in gpus)
        assert int(parse_quantity(values[C.RESOURCE_CORES])) == sum(d.devcore for d in gpus)
    described = c.kubectl("describe", "node", name)
    assert C.ANNO_NODE_GPU_SUMMARY in described and "gpumem" in described
