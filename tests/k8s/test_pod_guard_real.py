"""A tenant allowed to patch its own pods cannot rewrite what hami-control and hami-node wrote
on them (deploy/hami-control-pod-guard.yaml, a ValidatingAdmissionPolicy the real API server
evaluates), while its other edits pass and hami-node still records the allocation."""
from __future__ import annotations

import json

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from hami_common import constants as C
from hami_sim.realcluster.control_plane import token_kubeconfig

from k8shelpers import create, delete, get, pod, until, wait_phase

pytestmark = pytest.mark.timeout(600)
TENANT = "tenant"
GPU = {"limits": {C.RESOURCE_GPU: "1", C.RESOURCE_MEM: "1024"}}
SLEEP = ["python3", "-c", "import time; time.sleep(20)"]
SAYS = "are written only by hami-control and hami-node"


def tenant_api(c) -> client.CoreV1Api:
    """A client as ServiceAccount default/tenant, allowed every verb on pods in default."""
    rules = [{"apiGroups": [""], "resources": ["pods"],
              "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]
    c.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": TENANT, "namespace": "default"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": TENANT, "namespace": "default"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": TENANT, "namespace": "default"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT},
         "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": "default"}]}])
    kubeconfig = token_kubeconfig(c, "default", TENANT)
    return client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))


def forgeries(annotations: dict) -> list:
    """(case, merge patch of annotations) a tenant might try on a bound pod."""
    given = annotations[C.ANNO_DEVICES_ALLOCATED]
    bigger = given.replace(",1024,", ",40960,")
    assert bigger != given, given
    return [("raise-the-memory-cap", {C.ANNO_DEVICES_ALLOCATED: bigger}),
            ("rewrite-what-to-allocate", {C.ANNO_DEVICES_TO_ALLOCATE: bigger}),
            ("remove-the-bind-phase", {C.ANNO_BIND_PHASE: None}),
            ("add-a-mig-allocation", {C.ANNO_MIG_ALLOCATIONS: "GPU-x:1g.5gb"}),
            ("change-the-node", {C.ANNO_VGPU_NODE: "node-b"})]


def test_a_tenant_cannot_rewrite_the_decision_on_its_pod(real_cluster):
    c = real_cluster
    tenant = tenant_api(c)
    try:
        create(c, pod("guarded", GPU, command=SLEEP))
        bound = until(lambda: (get(c, "guarded")["metadata"].get("annotations") or {}).get(
            C.ANNO_DEVICES_ALLOCATED) and get(c, "guarded"), 90, "the scheduler's decision")
        before = {k: v for k, v in bound["metadata"]["annotations"].items()
                  if k in C.SCHEDULER_POD_ANNOTATIONS}
        refused, cases = [], forgeries(bound["metadata"]["annotations"])
        for case, patch in cases:
            try:
                tenant.patch_namespaced_pod("guarded", "default",
                                            {"metadata": {"annotations": patch}})
            except ApiException as e:
                message = json.loads(e.body).get("message", "")
                assert e.status == 403 and SAYS in message, (case, e.status, message)
                assert next(iter(patch)) in message, (case, message)
                refused.append(case)
                continue
            pytest.fail(f"{case}: the tenant's patch was accepted")
        print(f"\npod guard: tenant patches of hami-py's annotations refused: "
              f"{len(refused)} / {len(cases)}")
        tenant.patch_namespaced_pod("guarded", "default",
                                    {"metadata": {"annotations": {"team": "blue"}}})
        done = wait_phase(c, "guarded", timeout=120)
        after = done["metadata"]["annotations"]
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert after["team"] == "blue"
        # hami-node's own writes passed the policy; what the tenant tried did not land.
        assert after[C.ANNO_BIND_PHASE] == C.BIND_PHASE_SUCCESS
        assert after[C.ANNO_DEVICES_ALLOCATED] == before[C.ANNO_DEVICES_ALLOCATED]
        assert not any("40960" in v for v in after.values()), after
        assert after[C.ANNO_VGPU_NODE] == before[C.ANNO_VGPU_NODE]
        assert C.ANNO_MIG_ALLOCATIONS not in after
    finally:
        delete(c, "guarded")
