"""Kueue in the real cluster (tests/k8s/test_kueue_real.py): its CRDs and its controller
manager, built from sigs.k8s.io/kueue's Go module by tools/k8s/build.sh (version pinned in
tools/k8s/versions.env), with the webhooks Kueue serves for Jobs and for its own objects.

As the rest of the process tier, the manager is a host process (admin credentials; Kueue's own
RBAC is not applied), its webhooks reached by URL on 127.0.0.1 with a certificate of the
cluster's CA (Kueue's internal certificate management needs a Service). Kueue reads its
metrics certificate from a fixed path, /etc/kueue/metrics/certs, when it does not manage
certificates itself: the manager runs in a mount namespace of its own where an overlay on /etc
holds that file, so the host's /etc is never written. Its visibility API (an aggregated API
server with another fixed certificate path, /visibility) is turned off
(`VisibilityOnDemand=false`): nothing here uses it. The CRDs are the module's bases, without
the conversion webhook: everything here reads and writes v1beta2, their storage version.
"""
from __future__ import annotations

import base64
import shlex
import urllib.request
from pathlib import Path

import yaml

from hami_sim.realcluster.cluster import free_port, wait_for
from hami_sim.realcluster.components import ensure_components
from hami_sim.realcluster.config import write_json
from hami_sim.realcluster.pki import serving

NAMESPACE = "kueue-system"
# The webhooks kept: Jobs (the integration used) and Kueue's own objects. The others serve
# integrations this configuration does not enable (pods, Deployments, Ray, ...).
KEPT_PATHS = ("-batch-v1-job", "-kueue-x-k8s-io-")
WEBHOOK_NAMES = ("kueue-mutating-webhook-configuration",
                 "kueue-validating-webhook-configuration")


def _webhooks(c, config_dir: Path, port: int) -> list:
    """Kueue's webhook configurations, kept to KEPT_PATHS, reached by URL with our CA."""
    ca = base64.b64encode(c.pki.ca.read_bytes()).decode()
    docs = []
    for doc in yaml.safe_load_all((config_dir / "webhooks.yaml").read_text()):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            if any(k in path for k in KEPT_PATHS):
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                        "caBundle": ca}
                kept.append(hook)
        prefix = "kueue-mutating" if doc["kind"].startswith("Mutating") else "kueue-validating"
        doc["metadata"] = {"name": f"{prefix}-webhook-configuration"}
        doc["webhooks"] = kept
        docs.append(doc)
    return docs


def _configuration(root: Path, ports: dict) -> dict:
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": ports["webhook"], "host": "127.0.0.1",
                        "certDir": str(root / "certs")},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["batch/job"]}}


def _argv(binary: str, root: Path, config: Path, kubeconfig: Path, ports: dict) -> list:
    certs = root / "certs"
    script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={root}/etc-upper,"
              f"workdir={root}/etc-work /etc && mkdir -p /etc/kueue/metrics/certs && "
              f"cp {certs}/tls.crt {certs}/tls.key /etc/kueue/metrics/certs/ && "
              f"exec {shlex.quote(binary)} --config={config} --kubeconfig={kubeconfig} "
              "--feature-gates=VisibilityOnDemand=false --zap-log-level=2")
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]


def start(c) -> None:
    """Installs Kueue's CRDs and starts its manager in cluster c; stop() undoes the webhooks."""
    binary = ensure_components(("kueue",))["kueue"]
    config_dir = Path(binary + "-config")
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(config_dir / "crds"),
              timeout=120)
    c.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f",
              str(config_dir / "crds"), timeout=90)
    c.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    root = c.root / "kueue"
    for sub in ("certs", "etc-upper", "etc-work"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    crt, key = serving(c.pki, "kueue-webhook", ("localhost",), ("127.0.0.1",))
    (root / "certs" / "tls.crt").write_bytes(crt.read_bytes())
    (root / "certs" / "tls.key").write_bytes(key.read_bytes())
    ports = {"health": free_port(), "webhook": free_port()}
    config = write_json(root / "config.yaml", _configuration(root, ports))
    proc = c.spawn("kueue", _argv(binary, root, config, c.kubeconfig, ports))
    wait_for("Kueue's manager ready", lambda: _ready(ports["health"]), 120,
             c.logs / "kueue.log", lambda: proc.poll() is None)
    c.apply(_webhooks(c, config_dir, ports["webhook"]))
    c.step(f"Kueue {binary.rsplit('-', 1)[-1]} running (batch/job integration, webhooks on "
           f"127.0.0.1:{ports['webhook']})")


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def stop(c) -> None:
    """Removes Kueue's webhooks (nothing may call a stopped manager) and stops it."""
    c.kubectl("delete", "mutatingwebhookconfiguration", WEBHOOK_NAMES[0], "--ignore-not-found",
              check=False)
    c.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK_NAMES[1],
              "--ignore-not-found", check=False)
    c.stop_component("kueue")
