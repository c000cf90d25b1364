"""charts/hami-py with a real helm (built from its Go module by tools/k8s/build.sh, cached like
the Kubernetes binaries): it lints, renders valid objects, agrees with deploy/ where they share
objects, and its values do what they say."""
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from hami_common import constants as C
from hami_sim.realcluster.components import versions

K8S_VERSION = versions()["K8S_VERSION"]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "hami-py"
DEPLOY = ROOT / "deploy"
NAMESPACE = "hami-system"


@pytest.fixture(scope="module")
def helm():
    """The helm binary: $HAMI_HELM, else built (once) by tools/k8s/build.sh."""
    if os.environ.get("HAMI_HELM"):
        return os.environ["HAMI_HELM"]
    done = subprocess.run(["bash", str(ROOT / "tools/k8s/build.sh"), "helm"],
                          capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, f"building helm failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


def render(helm, *sets, kube_version="1.34.4", check=True):
    """`helm template` of the chart (kube_version None: helm's own, as offline users get)."""
    args = [helm, "template", "hami", str(CHART), "--namespace", NAMESPACE]
    if kube_version is not None:
        args += ["--kube-version", kube_version]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if not check:
        return done
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def by(docs, kind, name):
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def deploy_docs():
    return [d for f in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())
            if d]


def test_the_chart_lints(helm):
    done = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_rendered_object_is_a_valid_kubernetes_object(helm):
    api = client.ApiClient()
    for doc in render(helm):
        model = f"V1{doc['kind']}"
        assert hasattr(client, model), f"no model for {doc['kind']}"
        obj = api._ApiClient__deserialize(doc, model)
        assert api.sanitize_for_serialization(obj)["metadata"]["name"] == doc["metadata"]["name"]


@pytest.mark.parametrize("kind,name", [
    ("ClusterRole", "hami-control"), ("ClusterRole", "hami-node"), ("Role", "hami-control-leases"),
    ("MutatingWebhookConfiguration", "hami-control"), ("Service", "hami-control"),
    ("Service", "hami-control-leader")])
def test_the_chart_and_deploy_agree(helm, kind, name):
    ours, theirs = by(render(helm), kind, name), by(deploy_docs(), kind, name)
    for field in ("rules", "webhooks", "spec"):
        if field in theirs:
            assert ours[field] == theirs[field], field


def test_the_pod_guard_agrees_with_deploy_and_names_this_release_accounts(helm):
    docs = render(helm)
    ours = by(docs, "ValidatingAdmissionPolicy", "hami-pod-decisions")["spec"]
    theirs = by(deploy_docs(), "ValidatingAdmissionPolicy", "hami-pod-decisions")["spec"]
    for field in ("failurePolicy", "matchConstraints", "variables", "validations"):
        assert ours[field] == theirs[field], field
    (condition,) = ours["matchConditions"]
    assert f"system:serviceaccount:{NAMESPACE}:hami-node" in condition["expression"]
    assert f"system:serviceaccount:{NAMESPACE}:hami-control" in condition["expression"]
    assert by(docs, "ValidatingAdmissionPolicyBinding", "hami-pod-decisions")["spec"] == \
        by(deploy_docs(), "ValidatingAdmissionPolicyBinding", "hami-pod-decisions")["spec"]


def test_the_scheduler_configuration_and_the_control_flags_agree_with_deploy(helm):
    docs = render(helm)
    config = by(docs, "ConfigMap", "hami-scheduler-config")["data"]["scheduler-config.yaml"]
    theirs = by(deploy_docs(), "ConfigMap", "hami-scheduler-config")["data"][
        "scheduler-config.yaml"]
    assert yaml.safe_load(config) == yaml.safe_load(theirs)

    def control(docs_):
        spec = by(docs_, "Deployment", "hami-control")["spec"]["template"]["spec"]
        return {c["name"]: c for c in spec["containers"]}["hami-control"]
    assert control(docs)["args"] == control(deploy_docs())["args"]


def test_values_do_what_they_say(helm):
    docs = render(helm, "control.runtimeClassName=nvidia", "devicePlugin.cdiKind=nvidia.com/gpu",
                  "devicePlugin.deviceSplitCount=4", "schedulerName=gpu-sched",
                  "devicePlugin.evictOverShare=true", "devicePlugin.overShareTolerance=15",
                  kube_version="1.31.2")
    pod = by(docs, "Deployment", "hami-control")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert "--runtime-class=nvidia" in containers["hami-control"]["args"]
    assert "--scheduler-name=gpu-sched" in containers["hami-control"]["args"]
    # kube-scheduler follows the cluster's version unless an image is given.
    assert containers["kube-scheduler"]["image"] == "registry.k8s.io/kube-scheduler:v1.31.2"
    node = by(docs, "DaemonSet", "hami-node")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in node["containers"][0]["env"]}
    assert (env["HAMI_NODE_CDI_KIND"], env["HAMI_NODE_DEVICE_SPLIT_COUNT"]) == \
        ("nvidia.com/gpu", "4")
    assert (env["HAMI_NODE_EVICT_OVER_SHARE"], env["HAMI_NODE_OVER_SHARE_TOLERANCE"]) == \
        ("true", "15")
    assert node["hostPID"] is True
    rules = by(docs, "ClusterRole", "hami-node")["rules"]
    assert any("pods/eviction" in r["resources"] for r in rules)
    assert not any(p.startswith("system-") for p in
                   (pod["priorityClassName"], node["priorityClassName"]))


def test_the_chart_renders_offline_without_a_kube_version(helm):
    """Our helm carries the Kubernetes version of the client libraries it is built with, as
    an official build does (tools/k8s/build.sh); one built without it assumes v1.20, which the
    chart's kubeVersion refuses. Those libraries are the release of tools/k8s/versions.env."""
    minor = K8S_VERSION.split(".")[1]
    docs = render(helm, kube_version=None)
    pod = by(docs, "Deployment", "hami-control")["spec"]["template"]["spec"]
    image = {c["name"]: c for c in pod["containers"]}["kube-scheduler"]["image"]
    assert image == f"registry.k8s.io/kube-scheduler:v1.{minor}.0"


def test_the_dashboard_is_off_unless_enabled(helm):
    def control(*values):
        spec = by(render(helm, *values), "Deployment", "hami-control")["spec"]["template"]["spec"]
        return {c["name"]: c for c in spec["containers"]}["hami-control"]
    assert not [a for a in control()["args"] if a.startswith("--dashboard")]
    on = control("control.dashboard.enabled=true", "control.dashboard.port=9500")
    assert "--dashboard-listen=0.0.0.0:9500" in on["args"]
    assert {"name": "dashboard", "containerPort": 9500, "protocol": "TCP"} in on["ports"]


def test_tls_modes(helm):
    generated = by(render(helm), "Secret", "hami-control-tls")["data"]
    assert set(generated) == {"ca.crt", "tls.crt", "tls.key"}
    managed = render(helm, "tls.mode=certManager")
    webhook = by(managed, "MutatingWebhookConfiguration", "hami-control")
    assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{NAMESPACE}/hami-control-serving"
    assert by(managed, "Certificate", "hami-control-serving")["spec"]["secretName"] == \
        "hami-control-tls"
    bad = render(helm, "tls.mode=self", check=False)
    assert bad.returncode != 0 and "tls.mode must be generate, certManager or existing" in \
        bad.stderr
    missing = render(helm, "tls.mode=existing", check=False)
    assert missing.returncode != 0 and "tls.existingSecret is required" in missing.stderr


def test_the_dra_objects_come_with_dra_enabled_and_agree_with_deploy(helm):
    assert not [d for d in render(helm) if d["kind"] == "DeviceClass"]
    docs = render(helm, "dra.enabled=true", "devicePlugin.kubeletPlugin=dra")
    for kind, name in (("DeviceClass", C.DRA_DEVICE_CLASS),
                       ("ValidatingAdmissionPolicy", "hami-node-own-slices"),
                       ("ValidatingAdmissionPolicyBinding", "hami-node-own-slices")):
        ours, theirs = by(docs, kind, name), by(deploy_docs(), kind, name)
        if kind == "ValidatingAdmissionPolicy":    # the agent's ServiceAccount namespace
            theirs = yaml.safe_load(yaml.safe_dump(theirs).replace(
                "serviceaccount:kube-system:", f"serviceaccount:{NAMESPACE}:"))
        assert ours["spec"] == theirs["spec"], kind
    env = {e["name"]: e.get("value") for e in by(docs, "DaemonSet", "hami-node")["spec"][
        "template"]["spec"]["containers"][0]["env"]}
    assert env["HAMI_NODE_KUBELET_PLUGIN"] == "dra"
