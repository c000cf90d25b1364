"""hami-node as a DRA driver in a real 1.34 cluster: the DRAConsumableCapacity gate on in
kube-apiserver, kube-controller-manager, kube-scheduler and kubelet, containerd 1.7 with CDI,
deploy/'s DeviceClass and admission policy. kube-scheduler shares out each GPU's memory and
cores between ResourceClaims itself; the CDI specs hami-node writes bring the shim, which holds
every container to its claim's share. The cluster is this module's own (one start for all);
the last test turns the gate off."""
from __future__ import annotations

import json
import os
import signal

import pytest

from hami_common.constants import DRA_DRIVER
from hami_node.shim import read_usage
from hami_sim.demo.runtime import workload_result
from hami_sim.realcluster.dra import (node_slice, set_consumable_gate, slice_ready,
                                      spawn_dra_agent)
from hami_sim.realcluster.node import spawn_kubelet
from hami_sim.realcluster.scenario import container_log, unschedulable_message

from drahelpers import (A100, SLEEP, T4, claim, claim_cache, claim_of_pod, claims_of,
                        container, kubelet_less_node, node_files, pod, request, results,
                        template, wait_until)
from k8shelpers import delete, get, wait_phase

pytestmark = pytest.mark.timeout(3600)
WORKLOADS = ["python3", "-m", "hami_sim.demo.workloads"]
MIB = 1 << 20


@pytest.fixture(scope="module")
def dra(dra_cluster):
    yield dra_cluster


def result_of(c, name: str, ctr: str) -> dict:
    """The workload's JSON result line in a container's log."""
    return workload_result(container_log(c.core_v1, get(c, name), ctr))


def gone(c, *names) -> None:
    """Deletes pods and waits until they, their claims and hami-node's files are gone."""
    delete(c, *names)
    wait_until(f"pods {names} deleted", lambda: not any(
        n in c.kubectl("get", "pods", "-o", "name") for n in names), 60)
    wait_until("their claims deleted", lambda: not any(
        claim_of_pod(c, n) for n in names), 60)


def test_the_slice_shares_every_gpu_and_the_policy_holds_the_agent_to_its_node(dra):
    c = dra
    doc = node_slice(c)
    devices = doc["spec"]["devices"]
    assert len(devices) == 4 and all(d["allowMultipleAllocations"] for d in devices)
    t4 = next(d for d in devices if d["attributes"]["model"]["string"] == "Tesla T4")
    assert t4["capacity"]["memory"]["value"] == str(15360 * MIB)
    assert t4["capacity"]["cores"]["requestPolicy"]["validRange"]["max"] == "100"
    other = json.loads(json.dumps(doc))
    other["metadata"] = {"name": "node-z-slice"}
    other["spec"]["nodeName"] = other["spec"]["pool"]["name"] = "node-z"
    out = c.kubectl("create", "-f", "-", input=json.dumps(other), check=False,
                    kubeconfig=c.root / "hami-node.kubeconfig")
    assert "hami-node may write only the ResourceSlices of its own node ('node-a')" in out


def test_claims_fill_a_gpu_until_its_memory_is_consumed_then_pending(dra):
    c = dra
    c.apply([template("half-t4", request(memory="7680Mi", cores="10", selector=T4))])
    names = [f"fill-{i}" for i in range(5)]
    try:
        for name in names:
            c.apply([pod(name, {"gpu": ("template", "half-t4")},
                         container("main", SLEEP, "gpu"))])
        running = [n for n in names[:4]]
        for name in running:
            wait_phase(c, name, ("Running",), timeout=90)
        message = wait_until("the fifth pod unschedulable", lambda: unschedulable_message(
            get(c, names[4])), 60)
        assert "cannot allocate all claims" in message, message
        shares = [r for n in running for cl in claim_of_pod(c, n) for r in results(cl)]
        assert len(shares) == 4 and len({r["shareID"] for r in shares}) == 4
        assert all(r["consumedCapacity"] == {"memory": "7680Mi", "cores": "10"}
                   for r in shares)
        assert sorted(list({r["device"] for r in shares})) == sorted(
            d["name"] for d in node_slice(c)["spec"]["devices"]
            if d["attributes"]["model"]["string"] == "Tesla T4")
        assert len(node_files(c)["specs"]) == 4
    finally:
        gone(c, *names)
    wait_until("no CDI spec or claim folder left", lambda: node_files(c) == {
        "specs": [], "claims": []}, 30)


def test_each_container_is_held_to_its_claims(dra):
    c = dra
    c.apply([template("a100-1g", request(memory="1Gi", selector=A100)),
             template("a100-30", request(memory="2Gi", cores="30", selector=A100)),
             template("a100-2g", request(memory="2Gi", selector=A100)),
             template("two-t4", request(memory="1Gi", selector=T4, count=2), distinct=True),
             template("t4-twice", request(memory="1Gi", selector=T4, count=2))])
    body = pod("caps", {"oom": ("template", "a100-1g"), "share": ("template", "a100-30"),
                        "big": ("template", "a100-2g"), "t4s": ("template", "two-t4"),
                        "twice": ("template", "t4-twice")},
               container("oom", WORKLOADS + ["oom", "--chunk-mib", "64"], "oom"),
               container("share", WORKLOADS + ["compute", "--seconds", "3"], "share"),
               container("info", WORKLOADS + ["info"], "big", "t4s"),
               container("twice", WORKLOADS + ["info"], "twice"))
    try:
        c.apply([body])
        assert wait_phase(c, "caps", timeout=120)["status"]["phase"] == "Succeeded"
        oom = result_of(c, "caps", "oom")
        assert (oom["total_mib"], oom["error"]) == (1024, "CUDA_ERROR_OUT_OF_MEMORY")
        assert 1024 - 64 <= oom["used_mib"] <= 1024
        share = result_of(c, "caps", "share")
        assert 20 <= share["share"] <= 40, share
        seen = sorted((d["name"], d["total_mib"]) for d in result_of(c, "caps",
                                                                      "info")["devices"])
        assert seen == [("NVIDIA A100-SXM4-40GB", 2048), ("Tesla T4", 1024),
                        ("Tesla T4", 1024)]
        # Without distinctAttribute, count 2 may take two shares of one GPU: the shim adds
        # them up (one device of 2 GiB) or, on two GPUs, holds each to 1 GiB.
        twice = [d["total_mib"] for d in result_of(c, "caps", "twice")["devices"]]
        assert twice in ([2048], [1024, 1024])
    finally:
        gone(c, "caps")


def test_a_claim_shared_by_two_pods_holds_them_to_one_limit(dra):
    c = dra
    c.apply([claim("shared", request(memory="1Gi", selector=T4))])
    holder = pod("holder", {"gpu": ("claim", "shared")}, container(
        "main", WORKLOADS + ["compute", "--seconds", "30", "--hold-mib", "600"], "gpu"))
    second = pod("second", {"gpu": ("claim", "shared")}, container(
        "main", WORKLOADS + ["compute", "--seconds", "1", "--hold-mib", "600"], "gpu"))
    try:
        c.apply([holder])
        wait_phase(c, "holder", ("Running",), timeout=90)
        uid = claims_of(c)[0]["metadata"]["uid"]
        cache = claim_cache(c, uid)
        wait_until("the holder's 600 MiB counted in the claim's file",
                   lambda: cache.exists() and read_usage(str(cache)).devices and
                   read_usage(str(cache)).devices[0].used >= 600 * MIB, 60)
        c.apply([second])
        done = wait_phase(c, "second", timeout=90)
        reserved = {r["name"] for r in claims_of(c)[0]["status"]["reservedFor"]}
        assert reserved >= {"holder"}
        out = result_of(c, "second", "main")
        assert "OUT_OF_MEMORY" in out.get("failed", ""), (done["status"], out)
        assert get(c, "holder")["status"]["phase"] == "Running"
    finally:
        delete(c, "holder", "second")
        wait_until("pods gone", lambda: "pod/" not in c.kubectl("get", "pods", "-o", "name"),
                   60)
        c.kubectl("delete", "resourceclaim", "shared", "--wait=true")
    wait_until("no CDI spec or claim folder left", lambda: node_files(c) == {
        "specs": [], "claims": []}, 30)


def test_kubelet_and_hami_node_restarted_under_a_running_pod(dra):
    c = dra
    c.apply([template("t4-1g", request(memory="1Gi", cores="50", selector=T4))])
    body = pod("steady", {"gpu": ("template", "t4-1g")}, container(
        "main", WORKLOADS + ["compute", "--seconds", "20", "--hold-mib", "256"], "gpu"))
    try:
        c.apply([body])
        wait_phase(c, "steady", ("Running",), timeout=90)
        before = node_files(c)
        os.killpg(c.node.agent.pid, signal.SIGKILL)
        c.node.agent.wait(timeout=10)
        c.stop_component("kubelet")
        spawn_kubelet(c)                       # wipes the node's slices when it starts
        spawn_dra_agent(c, c.root / "hami-node.kubeconfig")
        wait_until("the slice published again", lambda: slice_ready(c, True), 60)
        assert node_files(c) == before         # the checkpoint kept the running pod's claim
        c.apply([pod("after", {"gpu": ("template", "t4-1g")},
                     container("main", WORKLOADS + ["info"], "gpu"))])
        assert wait_phase(c, "after", timeout=90)["status"]["phase"] == "Succeeded"
        assert result_of(c, "after", "main")["total_mib"] == 1024
        assert wait_phase(c, "steady", timeout=90)["status"]["phase"] == "Succeeded"
        assert result_of(c, "steady", "main")["share"] <= 60
    finally:
        gone(c, "steady", "after")
    wait_until("no CDI spec or claim folder left", lambda: node_files(c) == {
        "specs": [], "claims": []}, 30)


def legacy_pod(gputype: str, limits: dict) -> dict:
    """A pod in HAMi's form (nvidia.com/* limits) in the opted-in namespace."""
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "legacy-", "namespace": "dra-opt-in",
                         "annotations": {"nvidia.com/use-gputype": gputype}},
            "spec": {"restartPolicy": "Never", "containers": [container(
                "main", WORKLOADS + ["oom", "--chunk-mib", "64"])]}}
    body["spec"]["containers"][0]["resources"] = {"limits": limits}
    return body


def test_the_webhook_turns_hami_resources_into_a_claim_the_pod_owns(dra):
    c = dra
    c.kubectl("create", "namespace", "dra-opt-in")
    c.kubectl("label", "namespace", "dra-opt-in", "hami.io/dra=true")
    made = [json.loads(c.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body)))
            for body in (legacy_pod("a100", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1500",
                                             "nvidia.com/gpucores": "20"}),
                         legacy_pod("t4", {"nvidia.com/gpumem-percentage": "10"}))]
    names = [m["metadata"]["name"] for m in made]
    for m in made:
        limits = m["spec"]["containers"][0]["resources"].get("limits") or {}
        assert not [k for k in limits if k.startswith("nvidia.com/")]
    seen = []
    for name in names:
        done = wait_phase(c, name, timeout=120, namespace="dra-opt-in")
        assert done["status"]["phase"] == "Succeeded"
        oom = workload_result(container_log(c.core_v1, done, "main"))
        seen.append((oom["name"], oom["total_mib"], oom["error"]))
    # 10 % of a 15360 MiB T4: the percentage became a subrequest per published memory size
    assert seen == [("NVIDIA A100-SXM4-40GB", 1500, "CUDA_ERROR_OUT_OF_MEMORY"),
                    ("Tesla T4", 1536, "CUDA_ERROR_OUT_OF_MEMORY")]
    ref = made[0]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    template = json.loads(c.kubectl("get", "resourceclaimtemplate", "-n", "dra-opt-in", ref,
                                    "-o", "json"))
    assert template["metadata"]["ownerReferences"][0]["uid"] == made[0]["metadata"]["uid"]
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["capacity"]["requests"] == {"memory": "1500Mi", "cores": "20"}
    delete(c, *names, namespace="dra-opt-in")
    wait_until("the pods' templates and claims collected with them", lambda: not json.loads(
        c.kubectl("get", "resourceclaimtemplates,resourceclaims", "-n", "dra-opt-in",
                  "-o", "json"))["items"], 60)

def test_claims_carry_the_finalizer_from_birth_and_go_with_their_pods(dra):
    # The webhook gives our templates' claims kube-scheduler's finalizer at creation, so
    # kube-scheduler skips its Update; the resourceclaim controller still lets them go, whether
    # their pod was scheduled (allocated claim) or deleted before (claim never allocated).
    c = dra
    held, running = (legacy_pod("t4", {"nvidia.com/gpumem": "512"}) for _ in range(2))
    held["spec"]["schedulingGates"] = [{"name": "example.com/never"}]     # never scheduled
    running["spec"]["containers"][0]["command"] = SLEEP
    names = [json.loads(c.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body)))[
        "metadata"]["name"] for body in (held, running)]
    [unplaced], [placed] = [wait_until(f"the claim of {n}", lambda n=n: [
        cl for cl in claim_of_pod(c, n, "dra-opt-in") if cl["metadata"].get("finalizers")
        and (n == names[0] or results(cl))], 120) for n in names]
    # (kubectl leaves managedFields out unless asked)
    unplaced, placed = (json.loads(c.kubectl(
        "get", "resourceclaim", cl["metadata"]["name"], "-n", "dra-opt-in", "-o", "json",
        "--show-managed-fields")) for cl in (unplaced, placed))
    for cl in (unplaced, placed):
        assert cl["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert cl["metadata"]["labels"] == {"hami.io/dra-claim": "true"}
        # kube-scheduler wrote the status alone: no finalizer Update of its own
        assert not [m for m in cl["metadata"]["managedFields"]
                    if m.get("manager") == "kube-scheduler" and not m.get("subresource")]
    assert not results(unplaced)
    assert any(m.get("manager") == "kube-scheduler" and m.get("subresource") == "status"
               for m in placed["metadata"]["managedFields"])     # the manager name is right
    for name in names:
        delete(c, name, namespace="dra-opt-in")
        wait_until(f"the claim of {name} collected with it", lambda n=name: not claim_of_pod(
            c, n, "dra-opt-in"), 60)


def test_a_namespace_gpu_quota_holds_dra_pods_and_counts_their_claims(dra):
    """The webhook gates the opted-in pods of a namespace with a quota; hami-control lets the
    first through (the real kube-scheduler allocates its claim, counted in the quota's status
    in what the claim consumed) and keeps the second gated until the first is gone."""
    c, ns = dra, "dra-quota"
    c.kubectl("create", "namespace", ns)
    c.kubectl("label", "namespace", ns, "hami.io/dra=true")
    c.apply([{"apiVersion": "v1", "kind": "ResourceQuota",
              "metadata": {"name": "gpu", "namespace": ns},
              "spec": {"hard": {"limits.nvidia.com/gpumem": "1000"}}}])
    wait_until("hami-control sees the quota (its use written)", lambda: "limits.nvidia.com/"
               "gpumem" in (json.loads(c.kubectl("get", "quota", "gpu", "-n", ns, "-o", "json"))
                            .get("status", {}).get("used") or {}), 30)
    bodies = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "namespace": ns},
               "spec": {"containers": [{**container("main", SLEEP), "resources": {
                   "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "800"}}}]}}
              for n in ("q-first", "q-second")]
    c.apply(bodies[:1])
    wait_phase(c, "q-first", ("Running",), timeout=90, namespace=ns)
    c.apply(bodies[1:])

    def used():
        status = json.loads(c.kubectl("get", "quota", "gpu", "-n", ns, "-o", "json"))["status"]
        return (status.get("used") or {}).get("limits.nvidia.com/gpumem")
    assert wait_until("the claim counted in the quota's status", lambda: used() == "800", 30)
    events = wait_until("the second pod held back, with the numbers", lambda: [
        e["message"] for e in json.loads(c.kubectl("get", "events", "-n", ns, "-o", "json"))[
            "items"] if e["reason"] == "GPUQuotaExceeded"], 30)
    assert "used 800 + asked 800 > limit 1000 MiB" in events[0]
    second = get(c, "q-second", ns)
    assert second["spec"]["schedulingGates"] == [{"name": "hami.io/gpu-quota"}]
    assert any(x.get("reason") == "SchedulingGated" for x in second["status"]["conditions"])
    delete(c, "q-first", namespace=ns)
    wait_phase(c, "q-second", ("Running",), timeout=90, namespace=ns)
    delete(c, "q-second", namespace=ns)
    c.kubectl("delete", "namespace", ns, "--wait=false")


def test_our_node_scores_place_a_claim_pod_where_kube_scheduler_alone_would_not(dra):
    """The prioritize extender: node-a's first T4 half held by a claim, and beside it node-z,
    a node without kubelet publishing the same GPUs with 64 CPUs free. kube-scheduler alone
    (the default scheduler: node scores of CPU and memory, first-fit devices) puts a claim pod
    on node-z; the webhook's claim pod (hami-scheduler) goes to node-a, where its 7680 MiB
    fill the used T4, as hami-control's node scores say."""
    c, ns = dra, "dra-scores"
    c.kubectl("create", "namespace", ns, check=False)
    c.kubectl("label", "namespace", ns, "hami.io/dra=true", "--overwrite")
    c.apply([template("half-t4-a", request(memory="7680Mi", selector=T4)),
             template("small-t4", request(memory="1Gi", selector=T4))])
    earlier = pod("earlier", {"gpu": ("template", "half-t4-a")}, container("main", SLEEP, "gpu"))
    earlier["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m"}
    alone = pod("alone", {"gpu": ("template", "small-t4")}, {
        **container("main", SLEEP, "gpu"), "image": "hami-k8s.local/never-pulled:1"})
    ours = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ours", "namespace": ns,
                         "annotations": {"nvidia.com/use-gputype": "T4"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{**container("main", SLEEP), "resources": {"limits": {
                         "nvidia.com/gpu": "1", "nvidia.com/gpumem": "7680"}}}]}}
    for body in (alone, ours):
        body["spec"]["tolerations"] = [{"operator": "Exists"}]     # node-z's not-ready taints
    try:
        c.apply([earlier])
        held = wait_phase(c, "earlier", ("Running",), timeout=90)
        assert held["spec"]["nodeName"] == "node-a"
        [first] = [r["device"] for cl in claim_of_pod(c, "earlier") for r in results(cl)]
        with kubelet_less_node(c, "node-z", node_slice(c)):
            c.apply([alone])
            assert wait_until("kube-scheduler alone binds a claim pod", lambda: get(
                c, "alone")["spec"].get("nodeName"), 60) == "node-z"
            made = json.loads(c.kubectl("create", "-o", "json", "-f", "-",
                                        input=json.dumps(ours)))
            assert made["spec"]["schedulerName"] == "hami-scheduler"        # the webhook's
            node = wait_until("hami-scheduler binds the webhook's claim pod", lambda: get(
                c, "ours", ns)["spec"].get("nodeName"), 60)
            assert node == "node-a"
            [filled] = [r for cl in claim_of_pod(c, "ours", ns) for r in results(cl)]
            assert (filled["pool"], filled["device"]) == ("node-a", first)   # the used T4
            assert filled["consumedCapacity"]["memory"] == "7680Mi"
    finally:
        delete(c, "ours", namespace=ns)
        gone(c, "earlier")
        c.kubectl("delete", "namespace", ns, "--wait=false")


def test_with_the_gate_off_claims_get_whole_gpus_as_documented(dra):
    c = dra
    set_consumable_gate(c, False)
    wait_until("the slice published again with whole GPUs", lambda: slice_ready(c, False), 60)
    assert "DRAConsumableCapacity feature gate is off" in c.node.agent_log.read_text()
    c.apply([template("t4-gate-off", request(memory="1Gi", cores="30", selector=T4))])
    stored = json.loads(c.kubectl("get", "resourceclaimtemplate", "t4-gate-off", "-o", "json"))
    assert "capacity" not in stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    names = ["whole-0", "whole-1", "whole-2", "whole-3"]
    try:
        c.apply([pod("whole-0", {"gpu": ("template", "t4-gate-off")},
                     container("main", WORKLOADS + ["info"], "gpu"))])
        assert wait_phase(c, "whole-0", timeout=90)["status"]["phase"] == "Succeeded"
        assert result_of(c, "whole-0", "main")["total_mib"] == 15360
        for name in names[1:]:
            c.apply([pod(name, {"gpu": ("template", "t4-gate-off")},
                         container("main", SLEEP, "gpu"))])
        running = [n for n in names[1:] if wait_phase(c, n, ("Running", "Pending"))]
        wait_phase(c, "whole-1", ("Running",))
        [whole] = [r for cl in claim_of_pod(c, "whole-1") for r in results(cl)]
        assert "shareID" not in whole and "consumedCapacity" not in whole
        message = wait_until("a third whole-T4 pod unschedulable while two hold both T4s",
                             lambda: [unschedulable_message(get(c, n)) for n in running
                                      if unschedulable_message(get(c, n))], 90)
        assert len(message) == 1 and "cannot allocate all claims" in message[0]
    finally:
        gone(c, *names)
