"""The DRA run of bench/k8s_throughput.py: the trace's GPUs as hami-node's ResourceSlices (one
per node, shareable memory and cores, as hami-node writes them with the DRAConsumableCapacity
gate on), the trace's pods asking for them through ResourceClaimTemplates (one per request
shape, written from the pod's HAMi resources exactly as our webhook's opt-in writes them),
Kubernetes' resourceclaim controller making a claim per pod, and the default kube-scheduler
allocating them itself. No kubelet: nothing prepares the claims, as nothing runs the pods of
the other two runs either."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from hami_common.constants import DRA_DRIVER
from hami_common.dra_request import claim_devices, published_sizes
from hami_common.request import parse_pod
from hami_control.webhook.claims import template_labels
from hami_control.webhook.dra import ANNO_DRA_CLAIMS, ask_record
from hami_node.dra.slices import SliceOptions, build_slice
from hami_node.plugin.backend import Gpu
from hami_node.plugin.devices import GpuHealth
from hami_sim.realcluster.dra import dra_objects


def publish_slices(c, nodes, threads: int, split: int = 10) -> None:
    """deploy/'s DeviceClass, then one ResourceSlice per trace node."""
    from kubernetes import client
    c.apply([d for d in dra_objects() if d["kind"] == "DeviceClass"])
    api = client.ResourceV1Api(c.core_v1.api_client)

    def one(n):
        states = [GpuHealth(Gpu(uuid=d.id, index=d.index, name=d.type[len("NVIDIA-"):],
                                memory_mib=d.devmem)) for d in n.devices(split)]
        body = build_slice(states, SliceOptions(driver=DRA_DRIVER, node=n.name), 1)
        api.create_resource_slice(body, _preload_content=False)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, [n for n in nodes if n.gpus]))


def _shape(pod: dict):
    request = parse_pod({**pod, "metadata": {**pod["metadata"], "name": "x"}})
    ask = request.containers[0]
    return (ask.nums, ask.mem_mib, ask.mem_percent, ask.cores, request.filters), ask, \
        request.filters


def dra_pods(pods, namespace: str, gpus: list, scheduler: str = "",
             finalizer: bool = True) -> tuple:
    """(the templates, pod bodies): each trace pod with GPUs uses a claim from the template
    of its shape instead of nvidia.com/* resources; CPU-only pods are left as they are.
    `gpus`: (type, UUID, MiB) of the published GPUs, as the webhook's templates read them.
    With `scheduler` (hami-scheduler: its prioritize extender scores the nodes), the GPU pods
    name it and record their ask in `hami.io/dra-claims`, as the webhook's opt-in does.
    `finalizer`: the templates carry the webhook's label (hami.io/dra-claim), so their claims
    get kube-scheduler's finalizer at creation; without it, kube-scheduler adds it itself."""
    templates, bodies = {}, []
    for p in pods:
        pod = p.pod_object(namespace=namespace)
        ctr = pod["spec"]["containers"][0]
        if (ctr["resources"].get("limits") or {}):
            key, ask, filters = _shape(pod)
            if key not in templates:
                templates[key] = {
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": f"shape-{len(templates)}", "namespace": namespace},
                    "spec": {"metadata": {"labels": template_labels() if finalizer else {}},
                             "spec": {"devices": claim_devices(
                        ask, filters, published_sizes(gpus, filters))}}}
            del ctr["resources"]["limits"]
            ctr["resources"]["claims"] = [{"name": "gpu"}]
            pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName":
                                              templates[key]["metadata"]["name"]}]
            if scheduler:
                pod["spec"]["schedulerName"] = scheduler
                pod["metadata"].setdefault("annotations", {})[ANNO_DRA_CLAIMS] = json.dumps(
                    {templates[key]["metadata"]["name"]: ask_record(ask)})
        pod["spec"]["containers"][0]["image"] = "hami-k8s.local/pause:1"
        bodies.append({"apiVersion": "v1", "kind": "Pod", **pod})
    return list(templates.values()), bodies


def clear_claims(c, namespace: str, threads: int) -> None:
    """Frees the GPUs a DRA run's claims hold, for the next DRA run: its pods deleted at once
    (no kubelet confirms), each claim's delete-protection finalizer dropped and the claim
    deleted (only the resourceclaim controller runs here, at its own QPS), until none is
    left."""
    from kubernetes import client
    v1, api = c.core_v1, client.ResourceV1Api(c.core_v1.api_client)
    v1.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    for _ in range(30):
        names = [item["metadata"]["name"] for item in json.loads(
            api.list_namespaced_resource_claim(namespace, _preload_content=False).data)["items"]]
        if not names:
            return

        def one(name):
            try:
                api.patch_namespaced_resource_claim(name, namespace,
                                                    {"metadata": {"finalizers": None}})
                api.delete_namespaced_resource_claim(name, namespace)
            except client.exceptions.ApiException as e:
                if e.status != 404:
                    raise
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, names))
        time.sleep(1.0)
    raise RuntimeError(f"the claims of namespace {namespace} are still there after 30 rounds")


def packing_claims(c, namespace: str) -> dict:
    """GPUs in use and pods holding GPUs, from the allocated claims of the namespace."""
    from kubernetes import client
    resp = client.ResourceV1Api(c.core_v1.api_client).list_namespaced_resource_claim(
        namespace, _preload_content=False)
    items = json.loads(resp.data)["items"]
    gpus, holding = set(), 0
    for claim in items:
        alloc = (claim.get("status") or {}).get("allocation") or {}
        used = {(r["pool"], r["device"]) for r in (alloc.get("devices") or {}).get("results")
                or []}
        holding += bool(used)
        gpus |= used
    return {"gpus": len(gpus), "pods": holding}


def profile_scheduler(c, seconds: int, path) -> "threading.Thread":
    """Starts a thread that saves a CPU profile of the default kube-scheduler (its
    /debug/pprof/profile over `seconds`, admin credentials) to `path`; `go tool pprof -top
    <path>` reads it."""
    import ssl
    import threading
    import urllib.request

    def fetch():
        ctx = ssl.create_default_context(cafile=str(c.pki.ca))
        ctx.check_hostname = False        # kube-scheduler's self-signed serving certificate
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(str(c.pki.crt("admin")), str(c.pki.key("admin")))
        url = (f"https://127.0.0.1:{c.ports['default_scheduler']}/debug/pprof/profile"
               f"?seconds={seconds}")
        with urllib.request.urlopen(url, context=ctx, timeout=seconds + 60) as resp:
            path.write_bytes(resp.read())
    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    return thread
