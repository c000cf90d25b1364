"""deploy/'s RBAC is what the components run with here (tests/k8s passing shows it is
enough); these show it is not more than needed: hami-control run with its ClusterRole minus
one verb, and the session's hami-node while its ClusterRole lacks one, break and say which
permission is missing, so the manifests cannot rot."""
from __future__ import annotations

import copy
import time

import pytest

from hami_sim.control_launch import start_control
from hami_sim.realcluster.config import deploy_docs
from hami_sim.realcluster.control_plane import token_kubeconfig

pytestmark = pytest.mark.timeout(3600)
NAMESPACE = "hami-system"


def without_verb(role: dict, resource: str, verb: str, name: str) -> dict:
    """A copy of a ClusterRole called name, minus one verb on one resource."""
    trimmed = copy.deepcopy(role)
    trimmed["metadata"] = {"name": name}
    for rule in trimmed["rules"]:
        if resource in rule["resources"] and verb in rule["verbs"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
            return trimmed
    raise AssertionError(f"deploy/'s {role['metadata']['name']} has no {verb} on {resource}")


def account_with(cluster, name: str, role: dict):
    """A ServiceAccount bound to role in hami-system; a kubeconfig with its token."""
    cluster.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": NAMESPACE}},
        role,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]}])
    return token_kubeconfig(cluster, NAMESPACE, name)


def since(log, offset: int) -> str:
    """What a log file got after byte offset."""
    return log.read_bytes()[offset:].decode(errors="replace")


def deploy_role(manifest: str, name: str) -> dict:
    """deploy/'s ClusterRole called name, from manifest."""
    return next(d for d in deploy_docs(manifest)
                if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name)


def control_role() -> dict:
    """deploy/'s ClusterRole of hami-control."""
    return deploy_role("hami-control-rbac.yaml", "hami-control")


@pytest.mark.parametrize("resource,verb", [("pods", "list"), ("nodes", "watch")])
def test_hami_control_without_one_verb_says_what_is_missing(real_cluster, resource, verb):
    c = real_cluster
    name = f"hami-control-no-{verb}-{resource}"
    kubeconfig = account_with(c, name, without_verb(control_role(), resource, verb, name))
    p = c.pki
    ctl = start_control(kubeconfig, process=True, tls=(p.crt("hami-control"),
                                                       p.key("hami-control"), p.ca),
                        extra_args=["--no-leader-elect"], wait_ready=0)
    try:
        deadline = time.monotonic() + 30
        said = f'cannot {verb} resource "{resource}"'
        while said not in "".join(ctl.stderr) and time.monotonic() < deadline:
            time.sleep(0.3)
        log = "".join(ctl.stderr)
        assert said in log, log[-2000:]
        assert f"system:serviceaccount:{NAMESPACE}:{name}" in log
        if verb == "list":      # no view at all: never ready (without watch, a stale one)
            status, _ = ctl.client.request("GET", "/readyz")
            assert status != 200, "hami-control calls itself ready without its cluster view"
    finally:
        ctl.stop()


def test_hami_node_without_one_verb_says_what_is_missing(real_cluster):
    """The session's hami-node while deploy/'s ClusterRole lacks `get nodes` (its publisher
    reads the node every second): it logs the permission its ServiceAccount lacks, and
    publishes again once the role is restored."""
    c = real_cluster
    role = deploy_role("hami-node.yaml", "hami-node")
    log = c.node.agent_log
    start = log.stat().st_size
    said = 'cannot get resource "nodes"'
    c.apply([without_verb(role, "nodes", "get", "hami-node")])
    try:
        deadline = time.monotonic() + 30
        while said not in since(log, start) and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        c.apply([role])
    text = since(log, start)
    assert said in text, text[-2000:]
    assert "system:serviceaccount:kube-system:hami-node" in text
    assert c.node.alive(), "hami-node exited instead of retrying"
