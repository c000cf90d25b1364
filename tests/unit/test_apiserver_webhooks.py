"""The API server double's mutating webhooks (hami_sim/apiserver/webhooks.py): which objects
a webhook gets, how its patch, denial and failure come back, as a real API server does."""
import base64
import json

import pytest

from hami_sim.apiserver.errors import ApiError
from hami_sim.apiserver.resources import lookup
from hami_sim.apiserver.selectors import selector_matches
from hami_sim.apiserver.webhooks import MutatingWebhooks

PODS = lookup("", "v1", "pods")
NODES = lookup("", "v1", "nodes")
IGNORE = {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn",
                                "values": ["ignore"]}]}


def _config(**hook) -> dict:
    base = {"name": "pods.test", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/webhook", "caBundle": "Q0E="},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}],
            "namespaceSelector": IGNORE, "objectSelector": IGNORE}
    base.update(hook)
    return {"metadata": {"name": "test"}, "webhooks": [base]}


def _answer(allowed=True, patch=None, status=None):
    def post(url, body, ca, timeout):
        review = json.loads(body)
        calls.append((url, review, ca, timeout))
        response = {"uid": review["request"]["uid"], "allowed": allowed}
        if patch is not None:
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        if status is not None:
            response["status"] = status
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": response}
    calls = []
    post.calls = calls
    return post


def _pod(labels=None) -> dict:
    return {"metadata": {"name": "p", "namespace": "team", "labels": labels or {}},
            "spec": {"containers": [{"name": "c"}]}}


def test_a_matching_pod_is_sent_and_patched():
    post = _answer(patch=[{"op": "add", "path": "/spec/schedulerName", "value": "hami"}])
    hooks = MutatingWebhooks(lambda: [_config(timeoutSeconds=3)], lambda ns: {}, post)
    pod, patched = hooks.admit(PODS, "team", _pod())
    assert patched and pod["spec"]["schedulerName"] == "hami"
    url, review, ca, timeout = post.calls[0]
    assert (url, ca, timeout) == ("https://127.0.0.1:1/webhook", "Q0E=", 3.0)
    request = review["request"]
    assert review["apiVersion"] == "admission.k8s.io/v1" and request["operation"] == "CREATE"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["namespace"] == "team" and request["object"]["metadata"]["name"] == "p"


@pytest.mark.parametrize("resource, labels, ns_labels", [
    (NODES, {}, {}),                                     # the rules name pods only
    (PODS, {"hami.io/webhook": "ignore"}, {}),           # objectSelector
    (PODS, {}, {"hami.io/webhook": "ignore"}),           # namespaceSelector
], ids=["other-resource", "pod-opted-out", "namespace-opted-out"])
def test_what_the_rules_and_selectors_leave_out_is_not_sent(resource, labels, ns_labels):
    post = _answer(patch=[{"op": "add", "path": "/spec/x", "value": 1}])
    hooks = MutatingWebhooks(lambda: [_config()], lambda ns: ns_labels, post)
    assert hooks.admit(resource, "team", _pod(labels)) == (_pod(labels), False)
    assert post.calls == []


def test_a_denial_is_the_api_servers_error():
    post = _answer(allowed=False, status={"code": 403, "reason": "Forbidden",
                                          "message": "container c is privileged"})
    hooks = MutatingWebhooks(lambda: [_config()], lambda ns: {}, post)
    with pytest.raises(ApiError) as e:
        hooks.admit(PODS, "team", _pod())
    assert e.value.code == 403 and e.value.message == \
        'admission webhook "pods.test" denied the request: container c is privileged'


def test_an_unreachable_webhook_fails_closed_unless_ignored():
    def down(url, body, ca, timeout):
        raise ConnectionRefusedError(111, "Connection refused")
    hooks = MutatingWebhooks(lambda: [_config()], lambda ns: {}, down)
    with pytest.raises(ApiError) as e:
        hooks.admit(PODS, "team", _pod())
    assert e.value.code == 500 and 'failed calling webhook "pods.test"' in e.value.message
    ignoring = MutatingWebhooks(lambda: [_config(failurePolicy="Ignore")], lambda ns: {}, down)
    assert ignoring.admit(PODS, "team", _pod()) == (_pod(), False)


def test_a_webhook_given_by_service_is_passed_over():
    post = _answer(patch=[{"op": "add", "path": "/spec/x", "value": 1}])
    by_service = _config(clientConfig={"service": {"name": "s", "namespace": "n"}})
    assert MutatingWebhooks(lambda: [by_service], lambda ns: {}, post).admit(
        PODS, "team", _pod()) == (_pod(), False)
    assert post.calls == []


def test_label_selectors():
    assert selector_matches(None, {}) and selector_matches({}, {"a": "b"})
    assert selector_matches({"matchLabels": {"a": "b"}}, {"a": "b"})
    assert not selector_matches({"matchLabels": {"a": "b"}}, {"a": "c"})
    for op, labels, want in (("In", {"k": "x"}, True), ("In", {}, False),
                             ("NotIn", {"k": "x"}, False), ("NotIn", {}, True),
                             ("Exists", {"k": ""}, True), ("DoesNotExist", {"k": ""}, False)):
        expr = {"key": "k", "operator": op, "values": ["x"]}
        assert selector_matches({"matchExpressions": [expr]}, labels) is want, (op, labels)
