"""Kueue on real Kubernetes with hami-control's admission check (Kueue built from its Go
module: hami_sim/realcluster/kueue.py).

A ClusterQueue with `nvidia.com/gpumem` quota admits by the sum over pods; with the check
`hami.io/gpu-fit` in its admissionChecksStrategy, a Job whose pod no GPU can hold now (the room
is there in total, spread over two GPUs) is not admitted: its Workload says why, in the
filter's words, and the Job stays suspended. When a GPU frees up, the check turns Ready, Kueue
admits, the Job's pod is placed on that GPU and runs to completion.
"""
from __future__ import annotations

import json

import pytest
from k8shelpers import until

from hami_common import constants as C
from hami_common import pod_devices
from hami_sim.realcluster import kueue
from hami_sim.realcluster.images import WORKLOAD_IMAGE

pytestmark = pytest.mark.timeout(600)
NS, OTHER = "kueue-a", "kueue-b"
GPU_RESOURCES = (C.RESOURCE_GPU, C.RESOURCE_MEM, C.RESOURCE_CORES)




@pytest.fixture(scope="module")
def queue(real_cluster):
    """Kueue running, a ClusterQueue with GPU quota and our check, a LocalQueue in NS."""
    c = real_cluster
    kueue.start(c)
    try:
        for ns in (NS, OTHER):
            c.core_v1.create_namespace({"metadata": {"name": ns}})
        c.apply([
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
             "metadata": {"name": "gpu"}, "spec": {}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
             "metadata": {"name": "gpu-fit"}, "spec": {"controllerName": "hami.io/gpu-fit"}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
             "metadata": {"name": "gpus"},
             "spec": {"namespaceSelector": {},
                      "resourceGroups": [{"coveredResources": list(GPU_RESOURCES),
                                          "flavors": [{"name": "gpu", "resources": [
                                              {"name": C.RESOURCE_GPU, "nominalQuota": "40"},
                                              {"name": C.RESOURCE_MEM,
                                               "nominalQuota": "200000"},
                                              {"name": C.RESOURCE_CORES,
                                               "nominalQuota": "400"}]}]}],
                      "admissionChecksStrategy": {"admissionChecks": [{"name": "gpu-fit"}]}}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "gpu", "namespace": NS}, "spec": {"clusterQueue": "gpus"}}])
        until(lambda: _active(c), 60, "ClusterQueue active (its check made Active by hami-control)")
        yield c
    finally:
        for ns in (NS, OTHER):
            c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        kueue.stop(c)


def _active(c) -> bool:
    cq = json.loads(c.kubectl("get", "clusterqueue", "gpus", "-o", "json"))
    return any(x["type"] == "Active" and x["status"] == "True"
               for x in (cq.get("status") or {}).get("conditions") or [])


def _blocker(c, name: str, gpu: str) -> None:
    c.core_v1.create_namespaced_pod(OTHER, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"nvidia.com/use-gpuuuid": gpu}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": WORKLOAD_IMAGE,
                                 "command": ["python3", "-c", "import time; time.sleep(600)"],
                                 "resources": {"limits": {C.RESOURCE_GPU: "1",
                                                          C.RESOURCE_MEM: "22000",
                                                          C.RESOURCE_CORES: "5"}}}]}})


def _pods(c, ns: str) -> list:
    return json.loads(c.core_v1.list_namespaced_pod(ns, _preload_content=False).data)["items"]


def _check_state(c) -> tuple:
    items = json.loads(c.kubectl("get", "workloads", "-n", NS, "-o", "json"))["items"]
    for wl in items:
        for s in (wl.get("status") or {}).get("admissionChecks") or []:
            if s["name"] == "gpu-fit":
                return s["state"], s.get("message", "")
    return None


def test_a_job_no_gpu_can_hold_waits_with_the_reason_and_runs_when_room_appears(queue):
    c = queue
    (_, gpus), = c.gpus().items()
    a100 = [d.id for d in gpus if "A100" in d.type]
    for i, gpu in enumerate(a100):                       # 18960 MiB left on each A100
        _blocker(c, f"block-{i}", gpu)
    until(lambda: all(p["status"].get("phase") == "Running" for p in _pods(c, OTHER)) and
          len(_pods(c, OTHER)) == 2, 180, "the blockers running")
    c.apply([{"apiVersion": "batch/v1", "kind": "Job",
              "metadata": {"name": "train", "namespace": NS,
                           "labels": {"kueue.x-k8s.io/queue-name": "gpu"}},
              "spec": {"backoffLimit": 0, "template": {
                  "metadata": {"annotations": {"nvidia.com/use-gputype": "A100"}},
                  "spec": {"restartPolicy": "Never", "containers": [{
                      "name": "main", "image": WORKLOAD_IMAGE,
                      "command": ["python3", "-c", "print('trained')"],
                      "resources": {"limits": {C.RESOURCE_GPU: "1", C.RESOURCE_MEM: "30000",
                                               C.RESOURCE_CORES: "5"}}}]}}}}])
    state, message = until(lambda: (_check_state(c) or ("", ""))[1] and _check_state(c), 90,
                           "the check's verdict")
    assert state == "Pending" and "no GPU can hold pod 1 of 1" in message, message
    assert "CardInsufficientMemory" in message, message
    job = json.loads(c.kubectl("get", "job", "train", "-n", NS, "-o", "json"))
    assert job["spec"]["suspend"] is True and _pods(c, NS) == []     # Kueue's webhook, held
    c.core_v1.delete_namespaced_pod("block-1", OTHER, grace_period_seconds=0)
    until(lambda: (_check_state(c) or ("",))[0] == "Ready", 60, "the check Ready")
    pod = until(lambda: [p for p in _pods(c, NS) if p["status"].get("phase") == "Succeeded"],
                180, "the job's pod succeeded")[0]
    (ctr,) = pod_devices.decode(pod["metadata"]["annotations"][C.ANNO_DEVICES_ALLOCATED])
    assert ctr[0].uuid == a100[1]
    until(lambda: json.loads(c.kubectl("get", "job", "train", "-n", NS, "-o", "json"))[
        "status"].get("succeeded") == 1, 60, "the job complete")
