"""The mutating webhook over HTTP: HAMi's defaults and rules, denials with what to fix."""
import base64
import json
import time

import pytest

from ctlhelpers import container, gpu_pod

GPU = {"nvidia.com/gpu": 1}


def _patch(response) -> list:
    return json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []


MUTATED = [
    ("bare-gpu", gpu_pod("p", GPU),
     [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]),
    ("memory-without-count", gpu_pod("p", {"nvidia.com/gpumem": 3000}),
     [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},
      {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu",
       "value": "1"}]),
    ("cores-in-init-container", gpu_pod("p", containers=[container("app")],
                                        init=[container("init", gpucores=20)]),
     [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},
      {"op": "add", "path": "/spec/initContainers/0/resources/limits/nvidia.com~1gpu",
       "value": "1"}]),
    ("default-scheduler-replaced", dict(gpu_pod("p", GPU), spec={
        "schedulerName": "default-scheduler", **gpu_pod("p", GPU)["spec"]}),
     [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]),
]


@pytest.mark.parametrize("pod,expected", [c[1:] for c in MUTATED], ids=[c[0] for c in MUTATED])
def test_gpu_pods_are_sent_to_hami_scheduler(control, pod, expected):
    response = control.client.review(pod)
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert _patch(response) == expected


UNTOUCHED = [
    ("no-gpu", gpu_pod("p", containers=[{"name": "c", "image": "x"}])),
    ("other-scheduler", dict(gpu_pod("p", GPU), spec={"schedulerName": "volcano",
                                                     **gpu_pod("p", GPU)["spec"]})),
    ("pod-label-ignore", gpu_pod("p", GPU, labels={"hami.io/webhook": "ignore"})),
]


@pytest.mark.parametrize("pod", [c[1] for c in UNTOUCHED], ids=[c[0] for c in UNTOUCHED])
def test_left_alone(control, pod):
    response = control.client.review(pod)
    assert response["allowed"] is True and "patch" not in response


def test_namespace_label_ignore(control, core_v1):
    core_v1.create_namespace({"metadata": {"name": "quiet", "labels": {"hami.io/webhook":
                                                                       "ignore"}}})
    response = control.client.review(gpu_pod("p", GPU, namespace="quiet"), namespace="quiet")
    assert response["allowed"] is True and "patch" not in response
    assert "patch" in control.client.review(gpu_pod("p", GPU))


def test_update_and_other_kinds_untouched(control):
    assert "patch" not in control.client.review(gpu_pod("p", GPU), operation="UPDATE")


def test_answered_in_the_version_asked(control):
    body = {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
            "request": {"uid": "abc", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "operation": "CREATE", "namespace": "default",
                        "object": gpu_pod("p", GPU)}}
    status, answer = control.client.post("/webhook", body)
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1"
    assert answer["kind"] == "AdmissionReview" and answer["response"]["uid"] == "abc"


DENIED = [
    ("bound", dict(gpu_pod("p", GPU), spec={"nodeName": "n1", **gpu_pod("p", GPU)["spec"]}),
     "spec.nodeName"),
    ("privileged", gpu_pod("p", containers=[dict(container("c", gpu=1),
                                                 securityContext={"privileged": True})]),
     "privileged"),
    ("negative", gpu_pod("p", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": -5}), "negative"),
    ("over-100-percent", gpu_pod("p", {"nvidia.com/gpumem-percentage": 150}), "between"),
    ("cores-over-100", gpu_pod("p", {"nvidia.com/gpucores": 101}), "between 0 and 100"),
    ("not-an-integer", gpu_pod("p", {"nvidia.com/gpu": "1.5"}), "whole number"),
    ("memory-and-percentage", gpu_pod("p", {"nvidia.com/gpumem": 100,
                                            "nvidia.com/gpumem-percentage": 10}), "only one"),
    ("unknown-policy", gpu_pod("p", GPU, {"hami.io/gpu-scheduler-policy": "tetris"}),
     "use one of"),
    ("unserved-vgpu-mode", gpu_pod("p", GPU, {"nvidia.com/vgpu-mode": "mps"}),
     "mps is not a mode hami-py serves; use hami-core or mig"),
    ("zero-percent", gpu_pod("p", {"nvidia.com/gpumem-percentage": 0}), "between 1 and 100"),
    # a forged decision would count as GPUs held, and hami-node could take the pod for one
    # waiting for its GPUs: refused, also on a pod asking for no GPU that names our scheduler
    ("forged-decision", gpu_pod("p", GPU, {"hami.io/vgpu-devices-allocated":
                                           "GPU-n1-0,NVIDIA,16384,100:;",
                                           "hami.io/vgpu-node": "n1"}),
     "is created with hami.io/vgpu-node, hami.io/vgpu-devices-allocated: only"),
    ("forged-phase-cpu-only", dict(gpu_pod("p", {}, {"hami.io/bind-phase": "allocating"}),
                                   spec={"schedulerName": "hami-scheduler", "containers": [
                                       {"name": "main", "image": "busybox"}]}),
     "hami.io/bind-phase"),
]


@pytest.mark.parametrize("pod,hint", [c[1:] for c in DENIED], ids=[c[0] for c in DENIED])
def test_denied_with_what_to_fix(control, pod, hint):
    response = control.client.review(pod)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert hint in response["status"]["message"]


MALFORMED = [
    ("not-a-review", {"kind": "Pod"}),
    ("no-uid", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {}}),
    ("object-not-a-pod", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "request": {"uid": "u", "kind": {"kind": "Pod"},
                                      "operation": "CREATE", "object": [1]}}),
    ("limits-not-an-object", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "request": {"uid": "u", "kind": {"kind": "Pod"},
                                          "operation": "CREATE", "object": {"spec": {
                                              "containers": [{"resources": {
                                                  "limits": "nvidia.com/gpu"}}]}}}}),
]


@pytest.mark.parametrize("body", [c[1] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_reviews_are_400(control, body):
    status, answer = control.client.post("/webhook", body)
    assert status == 400 and answer["error"]


def test_a_slow_api_server_does_not_make_the_webhook_time_out(control, core_v1, apiserver):
    core_v1.create_namespace({"metadata": {"name": "slow", "labels": {"team": "a"}}})
    pod = gpu_pod("p", GPU, namespace="slow")
    assert control.client.review(pod, namespace="slow")["allowed"]     # labels now cached
    control.plane.webhook.namespace_labels.ttl_s = 0                        # every review reads
    apiserver.set_faults(latency_ms=5000)
    try:
        start = time.monotonic()
        response = control.client.review(gpu_pod("q", GPU, namespace="slow"), namespace="slow")
        took = time.monotonic() - start
    finally:
        apiserver.clear_faults()
    # Answered inside the 10 s webhook timeout of deploy/, with the labels last seen.
    assert response["allowed"] and response.get("patch") and took < 4.5


def test_the_runtime_class_is_set_when_configured_and_the_pod_names_none(apiserver):
    from ctlhelpers import start_plane
    control = start_plane(apiserver, "--runtime-class", "nvidia")
    try:
        ops = _patch(control.client.review(gpu_pod("p", GPU)))
        assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"} in ops
        own = gpu_pod("q", GPU)
        own["spec"]["runtimeClassName"] = "kata"
        assert all(op["path"] != "/spec/runtimeClassName"
                   for op in _patch(control.client.review(own)))
    finally:
        control.stop()
