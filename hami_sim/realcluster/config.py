"""The configuration files of the real cluster's pieces, written into its work folder, and
what it takes from deploy/: the RBAC objects, the MutatingWebhookConfiguration and
kube-scheduler's KubeSchedulerConfiguration, each as shipped except where the cluster has no
Service routing (no kube-proxy, no cluster DNS): the webhook is reached by URL and the
extender by 127.0.0.1, with the Service's DNS name kept as the TLS server name.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Optional

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CGROUP_ROOT = "hami-k8s"
POD_SUBNET = "10.88.0.0/16"
# The objects of deploy/ that the processes need; workloads (Deployment, DaemonSet, Service,
# ConfigMap) are replaced by processes.
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding")


def deploy_docs(name: str) -> list:
    """The YAML documents of deploy/<name>."""
    with open(DEPLOY / name) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def rbac_objects() -> list:
    """deploy/'s namespace, service accounts, roles and bindings, as shipped."""
    docs = []
    for name in ("hami-control-namespace.yaml", "hami-control-rbac.yaml", "hami-node.yaml"):
        docs += [d for d in deploy_docs(name) if d.get("kind") in RBAC_KINDS]
    return docs


def webhook_config(control_url: str, ca_pem: bytes) -> dict:
    """deploy/'s MutatingWebhookConfiguration with our CA in caBundle; the Service reference
    becomes a URL on 127.0.0.1 (same path)."""
    import base64
    doc = copy.deepcopy(deploy_docs("hami-control-webhook.yaml")[0])
    for hook in doc["webhooks"]:
        service = hook["clientConfig"].pop("service")
        hook["clientConfig"]["url"] = control_url + service.get("path", "/")
        hook["clientConfig"]["caBundle"] = base64.b64encode(ca_pem).decode()
    return doc


def scheduler_config(control_url: str, ca_file: Path, kubeconfig: Path) -> dict:
    """deploy/'s KubeSchedulerConfiguration (from its ConfigMap): the extender's URL on
    127.0.0.1, its CA file ours, the client connection the given kubeconfig."""
    cm = next(d for d in deploy_docs("scheduler-config.yaml") if d.get("kind") == "ConfigMap")
    cfg = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    for ext in cfg.get("extenders", []):
        ext["urlPrefix"] = control_url
        ext.setdefault("tlsConfig", {})["caFile"] = str(ca_file)
    cfg["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    return cfg


def gate_args(gates: dict) -> list:
    """--feature-gates for the control plane's components ([] without gates)."""
    if not gates:
        return []
    return ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}"
                                          for k, v in sorted(gates.items()))]


def containerd_config(root: Path, runtime_wrapper: Path, pause_image: str,
                      cdi_dir: Optional[Path] = None) -> str:
    """containerd's configuration (version 2: 1.6 and 1.7 read it alike): state under root,
    our runtime wrapper as runc, CRI with the CNI bridge, no OOM score below the caller's
    (this machine forbids it); CDI (containerd 1.7.2+) from cdi_dir when given."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    cdi = f'enable_cdi = true\n  cdi_spec_dirs = ["{cdi_dir}"]' if cdi_dir else \
        "enable_cdi = false"
    return f"""version = 2
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{root}/containerd.sock"
[ttrpc]
  address = "{root}/containerd-ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[{cri}]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  {cdi}
[{cri}.containerd]
  default_runtime_name = "hami"
[{cri}.containerd.runtimes.hami]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.hami.options]
  BinaryName = "{runtime_wrapper}"
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{root}/net.d"
"""


def cni_config() -> str:
    """A bridge network with host-local addresses, and loopback (the node becomes Ready)."""
    return json.dumps({
        "cniVersion": "0.4.0", "name": "hami-k8s",
        "plugins": [{"type": "bridge", "bridge": "hami-k8s0", "isGateway": True,
                     "ipMasq": False, "hairpinMode": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                              "routes": [{"dst": "0.0.0.0/0"}]}},
                    {"type": "loopback"}]}, indent=2)


def kubelet_config(pki, containerd_socket: Path, port: int, healthz_port: int,
                   pod_logs: Path, gates: Optional[dict] = None) -> dict:
    """KubeletConfiguration: cgroupfs under our own cgroup root (cgroup v1 accepted), webhook
    authentication and authorization, eviction thresholds a busy shared disk does not hit."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": "0.0.0.0", "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki.ca)}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki.crt("kubelet-serving")),
        "tlsPrivateKeyFile": str(pki.key("kubelet-serving")),
        "cgroupDriver": "cgroupfs", "cgroupRoot": "/" + CGROUP_ROOT,
        "failCgroupV1": False, "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "2s", "syncFrequency": "5s",
        "fileCheckFrequency": "5s", "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False, "localStorageCapacityIsolation": False,
        "podLogsDir": str(pod_logs), **({"featureGates": dict(gates)} if gates else {}),
    }


def write_json(path: Path, doc) -> Path:
    """Writes doc as JSON (valid YAML too); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    return path
