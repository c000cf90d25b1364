"""Create / get / delete through the official client: server-side defaults, validation and
the Status bodies of errors."""
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from hami_sim.testing import pod_manifest as pod_body


def status_of(exc: ApiException) -> dict:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def test_defaults_on_create(core_v1):
    pod = core_v1.create_namespaced_pod("default", pod_body("web", containers=[
        {"name": "main", "image": "busybox:1.36",
         "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}}}]))
    meta = pod.metadata
    assert meta.uid and meta.creation_timestamp and int(meta.resource_version) > 0
    assert pod.status.phase == "Pending"
    assert pod.spec.scheduler_name == "default-scheduler"
    assert pod.spec.containers[0].resources.requests == {"nvidia.com/gpu": "1",
                                                         "nvidia.com/gpumem": "3k"}
    again = core_v1.read_namespaced_pod("web", "default")
    assert again.metadata.resource_version == meta.resource_version


def test_quantities_sent_as_numbers_are_stored_as_canonical_strings(apiserver, core_v1):
    """kubectl sends `nvidia.com/gpu: 1` from YAML as a JSON number; the server stores strings
    (the client's models refuse numbers, so a watcher would break on the pod), spelled the
    server's canonical way (0.5 -> "500m", 3000 -> "3k")."""
    import urllib.request
    body = pod_body("numbers", containers=[{"name": "main", "image": "busybox:1.36",
                                            "resources": {"limits": {"nvidia.com/gpu": 1,
                                                                     "cpu": 0.5,
                                                                     "nvidia.com/gpumem": 3000}}}])
    req = urllib.request.Request(apiserver.url + "/api/v1/namespaces/default/pods",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201
    pod = core_v1.read_namespaced_pod("numbers", "default")
    stored = {"nvidia.com/gpu": "1", "cpu": "500m", "nvidia.com/gpumem": "3k"}
    assert pod.spec.containers[0].resources.limits == stored
    assert pod.spec.containers[0].resources.requests == stored


def test_resource_versions_increase_cluster_wide(core_v1):
    versions = [int(core_v1.create_namespaced_pod("default", pod_body(f"p{i}"))
                    .metadata.resource_version) for i in range(3)]
    versions.append(int(core_v1.create_namespace({"metadata": {"name": "other"}})
                        .metadata.resource_version))
    assert versions == sorted(versions) and len(set(versions)) == 4


def test_default_namespaces_exist(core_v1):
    names = {ns.metadata.name for ns in core_v1.list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_generate_name(core_v1):
    pod = core_v1.create_namespaced_pod("default", {
        "metadata": {"generateName": "job-"},
        "spec": {"containers": [{"name": "c", "image": "x"}]}})
    assert pod.metadata.name.startswith("job-") and len(pod.metadata.name) == 9


def test_not_found_status(core_v1):
    with pytest.raises(ApiException) as exc:
        core_v1.read_namespaced_pod("nope", "default")
    body = status_of(exc.value)
    assert exc.value.status == 404 and body["reason"] == "NotFound"
    assert body["details"] == {"name": "nope", "kind": "pods"}


def test_already_exists(core_v1):
    core_v1.create_namespaced_pod("default", pod_body("dup"))
    with pytest.raises(ApiException) as exc:
        core_v1.create_namespaced_pod("default", pod_body("dup"))
    assert exc.value.status == 409 and status_of(exc.value)["reason"] == "AlreadyExists"


INVALID = [
    ("missing-name", {"metadata": {}}, "metadata.name"),
    ("uppercase-name", {"metadata": {"name": "Bad_Name"}}, "metadata.name"),
    ("wrong-kind", {"kind": "Node", "metadata": {"name": "ok"}}, "kind"),
    ("wrong-apiversion", {"apiVersion": "apps/v1", "metadata": {"name": "ok"}}, "apiVersion"),
    ("no-containers", {"metadata": {"name": "ok"}, "spec": {"containers": []}},
     "spec.containers"),
    ("no-image", {"metadata": {"name": "ok"}, "spec": {"containers": [{"name": "c"}]}},
     "spec.containers[0].image"),
    ("bad-quantity", {"metadata": {"name": "ok"}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"limits": {"cpu": "lots"}}}]}},
     "spec.containers[0].resources.limits[cpu]"),
    ("bad-label", {"metadata": {"name": "ok", "labels": {"a": "not valid!"}}},
     "metadata.labels"),
    ("extended-request-without-limit", {"metadata": {"name": "ok"}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}},
     "spec.containers[0].resources.limits"),
    ("extended-request-not-limit", {"metadata": {"name": "ok"}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpumem": "512"},
                                                  "limits": {"nvidia.com/gpumem": "1024"}}}]}},
     "spec.containers[0].resources.requests"),
]


def test_extended_resources_need_equal_limits_as_the_real_server_says(core_v1):
    """The real API server's messages (tests/k8s/test_admission_real.py checks them there):
    extended resources cannot be overcommitted."""
    def refused(resources):
        with pytest.raises(ApiException) as exc:
            core_v1.create_namespaced_pod("default", pod_body("x", containers=[
                {"name": "c", "image": "x", "resources": resources}]))
        assert exc.value.status == 422
        return status_of(exc.value)["message"]
    assert refused({"requests": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}}) == (
        'Pod "x" is invalid: spec.containers[0].resources.limits: Required value: Limit must '
        'be set for non overcommitable resources')
    assert refused({"requests": {"nvidia.com/gpumem": "512"},
                    "limits": {"nvidia.com/gpumem": "1024"}}).endswith(
        'spec.containers[0].resources.requests: Invalid value: "512": must '
        'be equal to nvidia.com/gpumem limit of 1024')


@pytest.mark.parametrize("body,field", [(b, f) for _, b, f in INVALID],
                         ids=[i for i, _, _ in INVALID])
def test_invalid_objects_are_422(core_v1, body, field):
    body = {"spec": {"containers": [{"name": "c", "image": "x"}]}, **body}
    with pytest.raises(ApiException) as exc:
        core_v1.create_namespaced_pod("default", body)
    status = status_of(exc.value)
    assert exc.value.status == 422 and status["reason"] == "Invalid"
    assert field in [c["field"] for c in status["details"]["causes"]]


def test_namespace_mismatch_and_missing_namespace(core_v1):
    with pytest.raises(ApiException) as exc:
        core_v1.create_namespaced_pod("default", pod_body("x", namespace="kube-system"))
    assert exc.value.status == 400
    with pytest.raises(ApiException) as exc:
        core_v1.create_namespaced_pod("ghost", pod_body("x"))
    assert exc.value.status == 404 and "namespaces" in status_of(exc.value)["message"]


def test_delete_returns_last_state_and_protects_default(core_v1):
    core_v1.create_namespaced_pod("default", pod_body("gone"))
    deleted = core_v1.delete_namespaced_pod("gone", "default")
    assert deleted.metadata.name == "gone"
    with pytest.raises(ApiException) as exc:
        core_v1.read_namespaced_pod("gone", "default")
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        core_v1.delete_namespace("default")
    assert exc.value.status == 403


def test_deleting_a_namespace_deletes_its_objects(core_v1):
    core_v1.create_namespace({"metadata": {"name": "team"}})
    core_v1.create_namespaced_pod("team", pod_body("a"))
    core_v1.delete_namespace("team")
    assert core_v1.list_pod_for_all_namespaces(field_selector="metadata.namespace=team").items == []


def test_nodes_patch_and_status(core_v1, apiserver):
    apiserver.server.add_node("gpu-1", cpu="8", memory="32Gi")
    node = core_v1.patch_node("gpu-1", {"metadata": {"annotations": {"hami.io/x": "1"}},
                                        "status": {"capacity": {"cpu": "999"}}})
    assert node.metadata.annotations["hami.io/x"] == "1"
    assert node.status.capacity["cpu"] == "8", "status changes only through nodes/status"
    node = core_v1.patch_node_status("gpu-1", {"status": {"capacity": {"nvidia.com/gpu": "20"},
                                                          "allocatable": {"nvidia.com/gpu": "20"}}})
    assert node.status.capacity == {"cpu": "8", "memory": "32Gi", "pods": "110",
                                    "nvidia.com/gpu": "20"}


def test_leases_events_and_quotas(kube_api_client):
    coord = client.CoordinationV1Api(kube_api_client)
    lease = coord.create_namespaced_lease("kube-system", {
        "metadata": {"name": "hami-control"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    lease.spec.holder_identity = "b"
    renewed = coord.replace_namespaced_lease("hami-control", "kube-system", lease)
    assert renewed.spec.holder_identity == "b"
    lease.spec.holder_identity = "c"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as exc:
        coord.replace_namespaced_lease("hami-control", "kube-system", lease)
    assert exc.value.status == 409 and json.loads(exc.value.body)["reason"] == "Conflict"
    core = client.CoreV1Api(kube_api_client)
    core.create_namespaced_event("default", {
        "metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p"},
        "reason": "FailedScheduling", "message": "0/2 nodes", "type": "Warning"})
    found = core.list_namespaced_event("default", field_selector="involvedObject.name=p")
    assert [e.reason for e in found.items] == ["FailedScheduling"]
    ev = client.EventsV1Api(kube_api_client).create_namespaced_event("default", {
        "metadata": {"name": "e2"}, "eventTime": "2024-01-01T00:00:00.000000Z",
        "reason": "Bound", "action": "Binding", "reportingController": "hami",
        "reportingInstance": "hami-1", "type": "Normal"})
    assert ev.reason == "Bound"
    quota = core.create_namespaced_resource_quota("default", {
        "metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}})
    assert quota.spec.hard == {"requests.nvidia.com/gpu": "4"}


def test_discovery(kube_api_client):
    assert client.CoreApi(kube_api_client).get_api_versions().versions == ["v1"]
    groups = client.ApisApi(kube_api_client).get_api_versions()
    assert "coordination.k8s.io" in [g.name for g in groups.groups]
    core = client.CoreV1Api(kube_api_client).get_api_resources()
    names = {r.name for r in core.resources}
    assert {"pods", "pods/binding", "pods/status", "nodes", "nodes/status", "namespaces",
            "events", "bindings"} <= names
    coord = client.CoordinationV1Api(kube_api_client).get_api_resources()
    assert [r.name for r in coord.resources] == ["leases"]
    assert client.VersionApi(kube_api_client).get_code().major == "1"
