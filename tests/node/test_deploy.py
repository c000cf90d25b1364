"""The deployment files: the DaemonSet manifest checked offline against the Kubernetes models
of the official client (no cluster, no network), and the systemd unit checked with
`systemd-analyze verify` where available, else by parsing it."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "hami-node.yaml"
UNIT = ROOT / "systemd" / "hami-node.service"
ENV_FILE = ROOT / "systemd" / "hami-node.env"
MODELS = {"ServiceAccount": "V1ServiceAccount", "ClusterRole": "V1ClusterRole",
          "ClusterRoleBinding": "V1ClusterRoleBinding", "DaemonSet": "V1DaemonSet"}


def documents() -> dict:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return {d["kind"]: d for d in docs}


def test_every_document_round_trips_through_the_official_models():
    from kubernetes import client
    serialise = client.ApiClient().sanitize_for_serialization
    docs = documents()
    assert set(docs) == set(MODELS)
    for kind, doc in docs.items():
        model = getattr(client, MODELS[kind]).from_dict(doc)   # types and required fields
        # Unknown or misspelt fields are dropped by the models: a round trip shows them.
        assert serialise(model) == doc, f"{kind}: fields the Kubernetes schema does not know"


def test_daemonset_has_what_the_agent_needs():
    spec = documents()["DaemonSet"]["spec"]["template"]["spec"]
    [agent] = spec["containers"]
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    volumes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    assert volumes == {"device-plugins": "/var/lib/kubelet/device-plugins",
                       "shim": "/usr/local/vgpu",
                       # DRA (kubeletPlugin: dra): hami_common.draplugin's folders, CDI's
                       "plugins-registry": "/var/lib/kubelet/plugins_registry",
                       "plugins": "/var/lib/kubelet/plugins", "cdi": "/var/run/cdi"}
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert mounts["device-plugins"] == env["HAMI_NODE_DEVICE_PLUGIN_DIR"]["value"]
    assert mounts["shim"] == env["HAMI_NODE_SHIM_HOST_DIR"]["value"]
    [init] = spec["initContainers"]
    assert init["command"][:2] == ["hami-node", "install-shim"]
    assert not agent["securityContext"].get("privileged")
    assert agent["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["serviceAccountName"] == documents()["ServiceAccount"]["metadata"]["name"]
    assert spec["hostPID"] is True        # the outside checks read /proc/<host pid>/cgroup
    # The environment the manifest sets is configuration hami-node accepts.
    from hami_node.plugin.config import KEYS
    known = {k.env_name for k in KEYS} | {"NODE_NAME", "NVIDIA_VISIBLE_DEVICES",
                                          "NVIDIA_DRIVER_CAPABILITIES"}
    assert set(env) <= known


def test_rbac_is_least_privilege():
    rules = documents()["ClusterRole"]["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {("", "pods", v) for v in ("get", "list", "watch", "patch")} | \
        {("", "nodes", "get"), ("", "nodes", "patch"), ("", "nodes/status", "patch"),
         ("", "events", "create")} | \
        {("resource.k8s.io", "resourceslices", v)
         for v in ("get", "list", "create", "update", "delete")} | \
        {("resource.k8s.io", "resourceclaims", "get")}
    binding = documents()["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == documents()["ClusterRole"]["metadata"]["name"]


DRA_MODELS = {"DeviceClass": "V1DeviceClass",
              "ValidatingAdmissionPolicy": "V1ValidatingAdmissionPolicy",
              "ValidatingAdmissionPolicyBinding": "V1ValidatingAdmissionPolicyBinding"}


def test_the_dra_manifest_round_trips_and_names_our_driver():
    from kubernetes import client
    from hami_common.constants import DRA_DEVICE_CLASS, DRA_DRIVER
    serialise = client.ApiClient().sanitize_for_serialization
    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "deploy" / "hami-dra.yaml")
                                                      .read_text()) if d}
    assert set(docs) == set(DRA_MODELS)
    for kind, doc in docs.items():
        model = getattr(client, DRA_MODELS[kind]).from_dict(doc)
        assert serialise(model) == doc, f"{kind}: fields the Kubernetes schema does not know"
    assert docs["DeviceClass"]["metadata"]["name"] == DRA_DEVICE_CLASS
    assert f'device.driver == "{DRA_DRIVER}"' in \
        docs["DeviceClass"]["spec"]["selectors"][0]["cel"]["expression"]


def unit_sections(text: str) -> dict:
    sections, current = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
        else:
            key, _, value = line.partition("=")
            current.setdefault(key, []).append(value)
    return sections


def test_unit_keys():
    service = unit_sections(UNIT.read_text())["Service"]
    assert service["Type"] == ["notify"]
    assert service["Restart"] == ["on-failure"]
    assert service["EnvironmentFile"] == ["-/etc/default/hami-node"]
    assert int(service["WatchdogSec"][0]) >= 10
    assert service["ExecStart"][0].endswith("hami-node serve")
    assert service["ExecStartPre"][0].endswith("hami-node install-shim")
    from hami_node.plugin.config import KEYS
    settings = [line.lstrip("# ") for line in ENV_FILE.read_text().splitlines()]
    names = {line.split("=")[0] for line in settings if re.match(r"^[A-Z_]+=", line)}
    assert names == {k.env_name for k in KEYS if k.field not in ("node_name", "kubeconfig")} | \
        {"NODE_NAME", "HAMI_NODE_KUBECONFIG", "HAMI_NODE_CONFIG"}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verify(tmp_path):
    # The unit names the installed path; point it at this checkout's command for the check.
    here = Path(sys.executable).with_name("hami-node")
    unit = tmp_path / "hami-node.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/hami-node", str(here)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "hami-node.service" not in done.stderr, done.stderr   # no warnings about our unit
