"""Helpers of the real tier's DRA tests: claims, templates and pods that use them, and what
hami-node left on the node."""
from __future__ import annotations

import contextlib
import datetime
import json

from hami_common.constants import DRA_DEVICE_CLASS, DRA_DRIVER
from hami_node.dra.state import spec_path
from hami_node.plugin.layout import CACHE_FILE, HostLayout
from hami_sim.realcluster.images import WORKLOAD_IMAGE
from hami_sim.testing import wait_for

RESOURCE = "resource.k8s.io/v1"
T4 = f'device.attributes["{DRA_DRIVER}"].model == "Tesla T4"'
A100 = f'device.attributes["{DRA_DRIVER}"].model.startsWith("NVIDIA A100")'
SLEEP = ["sleep", "600"]


def request(name="gpu", memory=None, cores=None, selector=None, count=1) -> dict:
    """One request of our DeviceClass, asking for capacity where given."""
    exactly = {"deviceClassName": DRA_DEVICE_CLASS, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    wanted = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    if wanted:
        exactly["capacity"] = {"requests": wanted}
    return {"name": name, "exactly": exactly}


def template(name: str, *requests, namespace="default", distinct=False) -> dict:
    """A ResourceClaimTemplate; `distinct`: its devices on different GPUs (with shareable
    GPUs, `count: 2` may otherwise take two shares of one)."""
    devices = {"requests": list(requests)}
    if distinct:
        devices["constraints"] = [{"requests": [r["name"] for r in requests],
                                   "distinctAttribute": f"{DRA_DRIVER}/uuid"}]
    return {"apiVersion": RESOURCE, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": devices}}}


def claim(name: str, *requests, namespace="default") -> dict:
    """A ResourceClaim of its own (pods may share it)."""
    return {"apiVersion": RESOURCE, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": list(requests)}}}


def container(name: str, command, *claims) -> dict:
    """A container of the workload image using the pod's claims (names)."""
    return {"name": name, "image": WORKLOAD_IMAGE, "command": list(command),
            "resources": {"claims": [{"name": c} for c in claims]}}


def pod(name: str, claims: dict, *containers, namespace="default") -> dict:
    """A pod whose claims map a pod claim name to ("template"|"claim", object name)."""
    refs = [{"name": n, ("resourceClaimTemplateName" if kind == "template"
                         else "resourceClaimName"): obj} for n, (kind, obj) in claims.items()]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"restartPolicy": "Never", "resourceClaims": refs,
                     "terminationGracePeriodSeconds": 0, "containers": list(containers)}}


def get_json(cluster, *args) -> dict:
    """`kubectl get ... -o json` as JSON."""
    return json.loads(cluster.kubectl("get", *args, "-o", "json"))


def claims_of(cluster, namespace="default") -> list:
    """The ResourceClaims of a namespace."""
    return get_json(cluster, "resourceclaims", "-n", namespace).get("items") or []


def claim_of_pod(cluster, pod_name: str, namespace="default") -> list:
    """The claims made for a pod from its templates."""
    found = []
    for item in claims_of(cluster, namespace):
        owners = item["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Pod" and o.get("name") == pod_name for o in owners):
            found.append(item)
    return found


def results(claim_doc: dict) -> list:
    """A claim's allocation results."""
    alloc = (claim_doc.get("status") or {}).get("allocation") or {}
    return (alloc.get("devices") or {}).get("results") or []


def node_files(cluster) -> dict:
    """What hami-node keeps for prepared claims: CDI specs and claim folders."""
    layout = HostLayout(cluster.node.shim_dir)
    prefix = spec_path(cluster.cdi_dir, "").name[:-len(".json")]
    return {"specs": sorted(p.name for p in cluster.cdi_dir.glob(prefix + "*")),
            "claims": sorted(p.name for p in layout.claims.glob("*"))
            if layout.claims.is_dir() else []}


def claim_cache(cluster, claim_uid: str):
    """The accounting file of a claim on the host."""
    return HostLayout(cluster.node.shim_dir).claim_dir(claim_uid) / CACHE_FILE


def wait_until(what: str, check, timeout: float = 60.0):
    """Polls check() every half second until it returns something true; that value."""
    return wait_for(check, timeout, what, 0.5)


@contextlib.contextmanager
def kubelet_less_node(cluster, name: str, slice_doc: dict):
    """A Node object with no kubelet behind it (64 CPUs, 256 GiB, Ready; its taints are
    tolerated by the pods meant for it) and a ResourceSlice publishing the GPUs `slice_doc`
    publishes: kube-scheduler may bind pods to it and allocate claims there (nothing runs).
    Removed, with the pods bound to it, at the end."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}))
    size = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    cluster.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"capacity": size, "allocatable": size, "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady",
                         "message": "no kubelet (a test's node)", "lastHeartbeatTime": now,
                         "lastTransitionTime": now}]}}))
    twin = {"apiVersion": RESOURCE, "kind": "ResourceSlice", "metadata": {"name": f"{name}-gpus"},
            "spec": {**slice_doc["spec"], "nodeName": name,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}}}
    cluster.kubectl("create", "-f", "-", input=json.dumps(twin))
    try:
        yield name
    finally:
        cluster.kubectl("delete", "pods", "--all-namespaces", "--grace-period=0", "--force",
                        f"--field-selector=spec.nodeName={name}", check=False)
        cluster.kubectl("delete", "resourceslice", f"{name}-gpus", check=False)
        cluster.kubectl("delete", "node", name, check=False)
