"""The webhook's ResourceClaim CREATE: claims of our templates are given kube-scheduler's
delete-protection finalizer at creation; every other claim, and every other operation, is
left untouched."""
import base64
import json

import pytest

from hami_control.webhook.admission import Webhook

FINALIZER = "resource.kubernetes.io/delete-protection"


def review(claim: dict, operation: str = "CREATE", kind: str = "ResourceClaim") -> dict:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": operation, "namespace": "ns",
                        "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
                        "object": claim}}
    answer = Webhook()(body)
    assert answer["response"]["uid"] == "u-1" and answer["response"]["allowed"] is True
    return answer["response"]


def claim(labels=None, finalizers=None) -> dict:
    meta = {"generateName": "p-gpu-", "namespace": "ns",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"}}
    if labels is not None:
        meta["labels"] = labels
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": []}}}


def finalizers_after(response: dict, obj: dict) -> list:
    """The claim's finalizers once the answer's JSON patch is applied (add ops only)."""
    meta = dict(obj["metadata"])
    for op in json.loads(base64.b64decode(response["patch"])):
        assert op["op"] == "add"
        if op["path"] == "/metadata/finalizers":
            meta["finalizers"] = list(op["value"])
        elif op["path"] == "/metadata/finalizers/-":
            meta["finalizers"] = meta["finalizers"] + [op["value"]]
        else:
            raise AssertionError(f"unexpected patch path {op['path']}")
    return meta["finalizers"]


@pytest.mark.parametrize("finalizers, want", [
    (None, [FINALIZER]),
    ([], [FINALIZER]),
    (["example.com/keep"], ["example.com/keep", FINALIZER]),
], ids=["none", "empty", "another-kept"])
def test_a_claim_of_our_templates_gets_the_finalizer_at_creation(finalizers, want):
    obj = claim({"hami.io/dra-claim": "true", "app": "x"}, finalizers)
    response = review(obj)
    assert response["patchType"] == "JSONPatch"
    assert finalizers_after(response, obj) == want


@pytest.mark.parametrize("obj, operation, kind", [
    (claim(), "CREATE", "ResourceClaim"),
    (claim({"hami.io/dra-claim": "false"}), "CREATE", "ResourceClaim"),
    (claim({"hami.io/dra-claim": "true"}, [FINALIZER]), "CREATE", "ResourceClaim"),
    (claim({"hami.io/dra-claim": "true"}), "UPDATE", "ResourceClaim"),
    (claim({"hami.io/dra-claim": "true"}), "CREATE", "ResourceClaimTemplate"),
], ids=["not-ours", "label-false", "has-it-already", "update", "template"])
def test_everything_else_is_left_untouched(obj, operation, kind):
    assert "patch" not in review(obj, operation, kind)
