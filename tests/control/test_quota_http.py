"""Namespace GPU quotas over HTTP against the API server double: hami-control watches
ResourceQuota objects, refuses with ResourceQuotaNotFit and the numbers, counts a percentage in
MiB of its GPU, never lets racing pods of a namespace past the quota, frees quota as pods
finish, and writes the use into the quota's status, its metrics and the node's summary
annotation; Kubernetes' own requests.nvidia.com/* quota (the double's admission) applies too."""
import re
import subprocess
import threading
import urllib.request

import pytest

from ctlhelpers import (add_gpu_node, create, eventually, gpu_pod, read_pod, schedule,
                        start_plane)
from hami_common.quantity import parse_quantity

NS = "team-a"
MEM = "limits.nvidia.com/gpumem"


@pytest.fixture
def team(core_v1, apiserver):
    core_v1.create_namespace({"metadata": {"name": NS}})
    add_gpu_node(core_v1, "node-a", gpus=4, mem=16000)
    add_gpu_node(core_v1, "node-b", gpus=4, mem=16000)
    control = start_plane(apiserver, "--status-period", "0.3")
    try:
        eventually(lambda: len(control.plane.state.node_names()) == 2)
        yield control
    finally:
        control.stop()


def _quota(core_v1, control, hard: dict) -> None:
    core_v1.create_namespaced_resource_quota(NS, {"metadata": {"name": "gpu"},
                                                  "spec": {"hard": hard}})
    eventually(lambda: [q for q in control.plane.state.namespace_quotas() if q[0] == NS])


def _pod(core_v1, control, name, **limits):
    return create(core_v1, control, gpu_pod(name, {f"nvidia.com/{k}": v
                                                   for k, v in limits.items()}, namespace=NS))


def test_quota_refuses_with_numbers_writes_status_and_frees(core_v1, team):
    _quota(core_v1, team, {MEM: "10000", "limits.nvidia.com/gpu": "4"})
    first = _pod(core_v1, team, "first", gpu=1, gpumem=6000, gpucores=10)
    first_node = schedule(core_v1, team, first)[0]
    assert first_node
    second = _pod(core_v1, team, "second", gpu=1, gpumem=6000, gpucores=10)
    node, result, _ = schedule(core_v1, team, second)
    assert node is None and not result["Error"]          # retryable: FailedNodes, no Error
    reasons = set(result["FailedNodes"].values())
    assert reasons == {f"ResourceQuotaNotFit: namespace {NS} {MEM}: used 6000 + asked 6000 > "
                       "limit 10000 MiB"}

    def status_used():
        status = core_v1.read_namespaced_resource_quota("gpu", NS).status
        return {k: int(parse_quantity(v)) for k, v in ((status and status.used) or {}).items()}
    eventually(lambda: status_used() == {MEM: 6000, "limits.nvidia.com/gpu": 1}, timeout=15)
    metrics = urllib.request.urlopen(team.url + "/metrics", timeout=5).read().decode()
    assert f'hami_resource_quota_used{{limit="10000",namespace="{NS}",' \
           f'quota_name="nvidia.com/gpumem"}} 6000.0' in metrics
    assert f'hami_resource_quota_limit{{namespace="{NS}",quota_name="nvidia.com/gpu"}} 4.0' \
        in metrics

    def summary():
        return (core_v1.read_node(first_node).metadata.annotations or {}).get(
            "hami.io/node-gpu-allocated")
    eventually(lambda: summary() == "gpus 1/4 in use (1/40 slices), gpumem 6000/64000 MiB, "
                                    "gpucores 10/400", timeout=15)

    core_v1.patch_namespaced_pod_status("first", NS, {"status": {"phase": "Succeeded"}})
    eventually(lambda: schedule(core_v1, team, read_pod(core_v1, "second", NS))[0])
    eventually(lambda: status_used() == {MEM: 6000, "limits.nvidia.com/gpu": 1}, timeout=15)


def test_a_percentage_counts_in_mib_of_its_gpu(core_v1, team):
    _quota(core_v1, team, {MEM: "10000"})
    pod = _pod(core_v1, team, "half", gpu=2, **{"gpumem-percentage": 25, "gpucores": 10})
    assert schedule(core_v1, team, pod)[0]                # 2 x 4000 MiB of 16000-MiB GPUs
    more = _pod(core_v1, team, "more", gpu=1, **{"gpumem-percentage": 25, "gpucores": 10})
    _, result, _ = schedule(core_v1, team, more)
    assert "used 8000 + asked 4000 > limit 10000 MiB" in result["FailedNodes"]["node-a"]


def test_racing_pods_of_one_namespace_never_exceed_the_quota(core_v1, team):
    _quota(core_v1, team, {MEM: str(5 * 3000)})
    pods = [_pod(core_v1, team, f"r{i}", gpu=1, gpumem=3000, gpucores=5) for i in range(32)]
    results, barrier = [None] * len(pods), threading.Barrier(len(pods))

    def one(i):
        barrier.wait()
        results[i] = team.client.filter(pods[i], ["node-a", "node-b"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(pods))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    passed = [r for r in results if r and r["NodeNames"]]
    refused = [r for r in results if r and not r["NodeNames"]]
    assert len(passed) == 5 and len(refused) == 27, results
    assert all("ResourceQuotaNotFit" in next(iter(r["FailedNodes"].values())) for r in refused)


def test_kubernetes_and_hami_quotas_both_apply_and_count_differently(core_v1, team):
    """requests.nvidia.com/* is Kubernetes' (charged at creation by the API server's quota
    admission, from the pod spec: 2 GPUs x 3000 MiB are 3000), limits.nvidia.com/* hami-control's
    (charged at filter from the GPUs given: 6000); each refuses on its own, and hami-control's
    status writes leave Kubernetes' keys alone."""
    from kubernetes.client.rest import ApiException
    req_mem = "requests.nvidia.com/gpumem"
    _quota(core_v1, team, {MEM: "8000", req_mem: "8000", "requests.nvidia.com/gpu": "3"})
    assert schedule(core_v1, team, _pod(core_v1, team, "two-gpus", gpu=2, gpumem=3000))[0]
    more = _pod(core_v1, team, "one-more", gpu=1, gpumem=3000)     # Kubernetes: 6000 <= 8000
    _, result, _ = schedule(core_v1, team, more)
    assert "used 6000 + asked 3000 > limit 8000 MiB" in result["FailedNodes"]["node-a"]
    with pytest.raises(ApiException) as refused:                   # Kubernetes: 4 GPUs > 3
        _pod(core_v1, team, "over", gpu=1, gpumem=100)
    assert refused.value.status == 403 and "exceeded quota: gpu" in refused.value.body

    def used():
        s = core_v1.read_namespaced_resource_quota("gpu", NS).status
        return {k: int(parse_quantity(v)) for k, v in (s.used or {}).items()}
    eventually(lambda: used().get(MEM) == 6000, timeout=15)
    assert used() == {MEM: 6000, req_mem: 6000, "requests.nvidia.com/gpu": 3}


def test_kubectl_describe_shows_namespace_use_and_node_allocation(core_v1, apiserver, team,
                                                                  kubectl_binary):
    _quota(core_v1, team, {MEM: "20000"})
    node = schedule(core_v1, team, _pod(core_v1, team, "p", gpu=2, gpumem=3000, gpucores=10))[0]

    def kubectl(*args):
        done = subprocess.run([kubectl_binary, "--kubeconfig", str(apiserver.kubeconfig),
                               *args],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout
    quota = eventually(lambda: re.search(rf"{re.escape(MEM)}\s+6k\s+20k",
                                         kubectl("describe", "quota", "-n", NS)), timeout=15,
                       interval=0.3)
    assert quota                                    # Used 6000 of Hard 20000, as placed
    described = eventually(lambda: "gpumem 6000/64000 MiB" in kubectl("describe", "node", node)
                           and kubectl("describe", "node", node), timeout=15, interval=0.3)
    assert "hami.io/node-gpu-allocated: gpus 2/4 in use (2/40 slices)" in described
