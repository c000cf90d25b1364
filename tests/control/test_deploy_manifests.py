"""deploy/: every manifest is a valid Kubernetes object (deserialised into the official
client's models, no field lost on the way back), the pieces agree with each other and with
hami-control (routes, flags, RBAC for every call it makes), and the certificate script works."""
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from hami_common import constants as C
from hami_control.config import parser
from hami_control.webhook.claims import template_labels

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MODELS = {"Namespace": "V1Namespace", "ServiceAccount": "V1ServiceAccount",
          "ClusterRole": "V1ClusterRole", "ClusterRoleBinding": "V1ClusterRoleBinding",
          "Role": "V1Role", "RoleBinding": "V1RoleBinding", "ConfigMap": "V1ConfigMap",
          "Service": "V1Service", "Deployment": "V1Deployment",
          "MutatingWebhookConfiguration": "V1MutatingWebhookConfiguration",
          "PriorityClass": "V1PriorityClass",
          "ValidatingAdmissionPolicy": "V1ValidatingAdmissionPolicy",
          "ValidatingAdmissionPolicyBinding": "V1ValidatingAdmissionPolicyBinding"}
# KubeSchedulerConfiguration extender keys (protocols section 2).
EXTENDER_KEYS = {"urlPrefix", "filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb",
                 "weight", "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable",
                 "managedResources", "ignorable"}
TLS_KEYS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData",
            "caData"}


def _documents() -> list:
    files = sorted(DEPLOY.glob("hami-control*.yaml")) + sorted(DEPLOY.glob("scheduler*.yaml"))
    assert files, "no manifests"
    return [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]


DOCS = _documents()


def _by_kind(kind: str) -> list:
    return [d for d in DOCS if d["kind"] == kind]


def _subset(original, roundtrip, path="") -> None:
    if isinstance(original, dict):
        assert isinstance(roundtrip, dict), path
        for key, value in original.items():
            assert key in roundtrip, f"unknown field {path}.{key}"
            _subset(value, roundtrip[key], f"{path}.{key}")
    elif isinstance(original, list):
        assert len(original) == len(roundtrip), path
        for i, (a, b) in enumerate(zip(original, roundtrip)):
            _subset(a, b, f"{path}[{i}]")


@pytest.mark.parametrize("doc", DOCS, ids=[f"{d['kind']}/{d['metadata']['name']}" for d in DOCS])
def test_valid_object(doc):
    """Required fields are enforced by the models; unknown ones are lost on the way back."""
    api = client.ApiClient()
    model = api.deserialize(json.dumps(doc), MODELS[doc["kind"]], "application/json")
    _subset(doc, api.sanitize_for_serialization(model))


def _scheduler_config() -> dict:
    data = _by_kind("ConfigMap")[0]["data"]["scheduler-config.yaml"]
    return yaml.safe_load(data)


def test_scheduler_configuration_names_the_extender():
    config = _scheduler_config()
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == [C.SCHEDULER_NAME]
    extender, scores = config["extenders"]
    assert set(extender) <= EXTENDER_KEYS and set(extender["tlsConfig"]) <= TLS_KEYS
    # node scores for DRA claim pods: asked about every pod, never holding one
    assert set(scores) <= EXTENDER_KEYS and scores["prioritizeVerb"] == "prioritize"
    assert "managedResources" not in scores and scores["ignorable"] is True
    assert not {"filterVerb", "bindVerb", "preemptVerb"} & set(scores)
    assert scores["weight"] == 20 and scores["nodeCacheCapable"] is True
    assert (scores["urlPrefix"], scores["tlsConfig"]) == (extender["urlPrefix"],
                                                          extender["tlsConfig"])
    assert extender["filterVerb"] == "filter" and extender["bindVerb"] == "bind"
    assert extender["preemptVerb"] == "preempt"
    assert extender["nodeCacheCapable"] is True and extender["enableHTTPS"] is True
    assert {r["name"] for r in extender["managedResources"]} == set(C.GPU_RESOURCES)
    assert all(r["ignoredByScheduler"] is True for r in extender["managedResources"])
    service = _service("hami-control-leader")
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert extender["urlPrefix"] == f"https://{host}:{service['spec']['ports'][0]['port']}"
    # The certificate is made for the webhook Service's name; kube-scheduler checks that name.
    webhook_service = _service("hami-control")
    assert extender["tlsConfig"]["serverName"] == \
        f"{webhook_service['metadata']['name']}.{webhook_service['metadata']['namespace']}.svc"


def _service(name: str) -> dict:
    (service,) = [s for s in _by_kind("Service") if s["metadata"]["name"] == name]
    return service


def test_the_extender_reaches_only_the_leader_and_the_webhook_every_ready_replica():
    leader, webhook = _service("hami-control-leader"), _service("hami-control")
    assert leader["spec"]["selector"] == {**webhook["spec"]["selector"],
                                          C.LABEL_CONTROL_LEADER: "true"}
    hook = _by_kind("MutatingWebhookConfiguration")[0]["webhooks"][0]["clientConfig"]["service"]
    assert (hook["name"], hook["port"]) == ("hami-control", 443)
    deployment = _by_kind("Deployment")[0]
    control = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in control["hami-control"]["env"]}
    assert env["POD_NAME"] == "metadata.name"      # the pod it labels while it leads
    assert control["hami-control"]["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_routes_exist_for_the_verbs_and_the_webhook_path():
    from hami_control.server.app import Endpoints, make_app
    app = make_app(Endpoints(*([lambda *a: {}] * 6)), 1024)
    routes = {(r.method, r.rule) for r in app.routes}
    webhook = _by_kind("MutatingWebhookConfiguration")[0]["webhooks"][0]
    for path in ("/filter", "/bind", "/preempt", webhook["clientConfig"]["service"]["path"]):
        assert ("POST", path) in routes
    assert set(webhook["admissionReviewVersions"]) == {"v1", "v1beta1"}


def test_deployment_agrees_with_service_and_flags():
    deployment, service = _by_kind("Deployment")[0], _service("hami-control")
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    control = containers["hami-control"]
    assert service["spec"]["ports"][0]["targetPort"] in [p["name"] for p in control["ports"]]
    args = parser().parse_args(control["args"])        # every flag exists
    assert args.tls_cert and args.tls_key
    mounts = {m["mountPath"] for m in containers["kube-scheduler"]["volumeMounts"]}
    assert "/etc/hami-control/tls" in mounts
    assert _scheduler_config()["extenders"][0]["tlsConfig"]["caFile"].startswith(
        "/etc/hami-control/tls/")


NEEDED = [("", "nodes", v) for v in ("get", "list", "watch", "patch")] + \
    [("", "pods", v) for v in ("get", "list", "watch", "patch", "delete")] + \
    [("", "pods/status", "patch")] + \
    [("policy", "poddisruptionbudgets", v) for v in ("get", "list", "watch")] + \
    [("kueue.x-k8s.io", r, v) for r in ("workloads", "admissionchecks") for v in ("get", "list")]\
    + [("kueue.x-k8s.io", f"{r}/status", "patch") for r in ("workloads", "admissionchecks")] + \
    [("", "bindings", "create"), ("", "events", "create"), ("", "namespaces", "get")] + \
    [("", "resourcequotas", v) for v in ("get", "list", "watch")] + \
    [("", "resourcequotas/status", "patch")] + \
    [("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")] + \
    [("admissionregistration.k8s.io", "mutatingwebhookconfigurations", v)
     for v in ("get", "patch")] + \
    [("resource.k8s.io", "resourceclaimtemplates", "create"),     # the DRA opt-in
     ("resource.k8s.io", "resourceslices", "list")] + \
    [("resource.k8s.io", "resourceclaims", v) for v in ("list", "watch")]   # DRA quotas


def _allows(rules, group, resource, verb) -> bool:
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", [])
               and verb in r.get("verbs", []) for r in rules)


@pytest.mark.parametrize("group,resource,verb", NEEDED, ids=[f"{r}-{v}" for _, r, v in NEEDED])
def test_rbac_allows_every_call_and_little_else(group, resource, verb):
    rules = [r for kind in ("ClusterRole", "Role") for d in _by_kind(kind) for r in d["rules"]]
    assert _allows(rules, group, resource, verb)
    cluster_rules = _by_kind("ClusterRole")[0]["rules"]
    assert not any("*" in r.get("verbs", []) + r.get("resources", []) for r in cluster_rules)
    assert not _allows(cluster_rules, "", "nodes", "delete")
    assert not _allows(cluster_rules, "", "pods/exec", "create")
    assert not _allows(cluster_rules, "", "secrets", "get")


def test_certificate_script(tmp_path):
    out = tmp_path / "certs"
    subprocess.run(["sh", str(DEPLOY / "hami-control-certs.sh"), "--out", str(out),
                    "--out-only", "--days", "2"], check=True, capture_output=True, timeout=60)
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(out / "ca.crt"),
                             str(out / "tls.crt")], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    text = subprocess.run(["openssl", "x509", "-in", str(out / "tls.crt"), "-noout", "-text"],
                          capture_output=True, text=True).stdout
    assert "DNS:hami-control.hami-system.svc" in text


def test_no_system_priority_class_outside_kube_system():
    (deployment,) = _by_kind("Deployment")
    name = deployment["spec"]["template"]["spec"]["priorityClassName"]
    assert not name.startswith("system-"), "system-* classes are for kube-system"
    assert name in [p["metadata"]["name"] for p in _by_kind("PriorityClass")]


def test_the_webhook_fails_closed_only_for_pods_asking_for_our_resources():
    hook, _ = _by_kind("MutatingWebhookConfiguration")[0]["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    # Kept by hami-control, outside the manifest: re-applying deploy/ must not empty it.
    assert "caBundle" not in hook["clientConfig"]
    (condition,) = hook["matchConditions"]
    named = set(re.findall(r"'(nvidia\.com/[\w-]+)'", condition["expression"]))
    assert named == set(C.GPU_RESOURCES)
    forged = set(re.findall(r"'(hami\.io/[\w.-]+)'", condition["expression"]))
    assert forged == set(C.SCHEDULER_POD_ANNOTATIONS)
    (deployment,) = _by_kind("Deployment")
    control = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    args = parser().parse_args(control["hami-control"]["args"])
    assert args.webhook_configuration == _by_kind("MutatingWebhookConfiguration")[0][
        "metadata"]["name"]
    assert args.webhook_ca_file.startswith("/etc/hami-control/tls/")


def test_the_claim_webhook_sees_only_our_templates_claims_and_fails_open():
    pods, claims = _by_kind("MutatingWebhookConfiguration")[0]["webhooks"]
    assert claims["failurePolicy"] == "Ignore"      # a missed finalizer costs one write
    assert claims["objectSelector"] == {"matchLabels": template_labels()}
    assert claims["clientConfig"]["service"] == pods["clientConfig"]["service"]
    assert claims["rules"] == [{"operations": ["CREATE"], "apiGroups": ["resource.k8s.io"],
                                "apiVersions": ["v1"], "resources": ["resourceclaims"],
                                "scope": "Namespaced"}]


def test_the_pod_guard_names_our_annotations_and_our_service_accounts():
    (policy,) = _by_kind("ValidatingAdmissionPolicy")
    (binding,) = _by_kind("ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
        "resources": ["pods"]}]
    keys = next(v for v in spec["variables"] if v["name"] == "keys")["expression"]
    assert set(re.findall(r"'(hami\.io/[\w.-]+)'", keys)) == set(C.SCHEDULER_POD_ANNOTATIONS)
    (condition,) = spec["matchConditions"]
    allowed = set(re.findall(r"'system:serviceaccount:([\w-]+):([\w-]+)'",
                             condition["expression"]))
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"])
                for name in ("hami-control-rbac.yaml", "hami-node.yaml")
                for d in yaml.safe_load_all((DEPLOY / name).read_text())
                if d and d["kind"] == "ServiceAccount"}
    assert allowed == accounts
