"""Patch and update semantics through the official client: which Content-Type it sends, what
each patch type does, stale resourceVersions, the spec/status split, immutable pod specs, and
binding (once only)."""
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from hami_sim.testing import pod_manifest

MERGE = "application/merge-patch+json"


@pytest.fixture
def pod(core_v1):
    return core_v1.create_namespaced_pod("default", pod_manifest(
        "p", containers=[{"name": "a", "image": "img:1", "env": [{"name": "X", "value": "1"}]},
                         {"name": "b", "image": "img:1"}],
        labels={"app": "web", "tier": "gpu"}, annotations={"keep": "1", "drop": "1"}))


def test_dict_body_is_a_strategic_merge_patch(core_v1, pod):
    # The client sends dict bodies as strategic merge patches: containers merge by name.
    patched = core_v1.patch_namespaced_pod("p", "default", {
        "metadata": {"annotations": {"hami.io/vgpu-node": "n1", "drop": None}},
        "spec": {"containers": [{"name": "b", "image": "img:2"}]}})
    assert patched.metadata.annotations == {"keep": "1", "hami.io/vgpu-node": "n1"}
    assert [(c.name, c.image) for c in patched.spec.containers] == [("a", "img:1"),
                                                                     ("b", "img:2")]
    assert patched.spec.containers[0].env[0].value == "1"


def test_merge_patch_null_deletes_and_lists_replace(core_v1, pod):
    patched = core_v1.patch_namespaced_pod("p", "default", {
        "metadata": {"labels": {"tier": None, "new": "x"}}}, _content_type=MERGE)
    assert patched.metadata.labels == {"app": "web", "new": "x"}


def test_list_body_is_a_json_patch(core_v1, pod):
    patched = core_v1.patch_namespaced_pod("p", "default", [
        {"op": "add", "path": "/metadata/annotations/hami.io~1bind-phase", "value": "allocating"},
        {"op": "remove", "path": "/metadata/labels/tier"},
        {"op": "test", "path": "/metadata/labels/app", "value": "web"}])
    assert patched.metadata.annotations["hami.io/bind-phase"] == "allocating"
    assert "tier" not in patched.metadata.labels


def test_failed_json_patch_test_is_422_and_changes_nothing(core_v1, pod):
    with pytest.raises(ApiException) as exc:
        core_v1.patch_namespaced_pod("p", "default", [
            {"op": "add", "path": "/metadata/labels/x", "value": "1"},
            {"op": "test", "path": "/metadata/labels/app", "value": "db"}])
    assert exc.value.status == 422
    assert "x" not in core_v1.read_namespaced_pod("p", "default").metadata.labels


def test_apply_patch_is_refused_with_415(core_v1, pod):
    with pytest.raises(ApiException) as exc:
        core_v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}},
                                     _content_type="application/apply-patch+yaml")
    assert exc.value.status == 415
    assert json.loads(exc.value.body)["reason"] == "UnsupportedMediaType"


def test_patch_with_stale_resource_version_conflicts(core_v1, pod):
    core_v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"v": "2"}}})
    with pytest.raises(ApiException) as exc:
        core_v1.patch_namespaced_pod("p", "default", {"metadata": {
            "resourceVersion": pod.metadata.resource_version, "labels": {"v": "3"}}})
    assert exc.value.status == 409 and json.loads(exc.value.body)["reason"] == "Conflict"


def test_replace_with_stale_resource_version_conflicts(core_v1, pod):
    fresh = core_v1.replace_namespaced_pod("p", "default", pod)
    assert int(fresh.metadata.resource_version) > int(pod.metadata.resource_version)
    with pytest.raises(ApiException) as exc:
        core_v1.replace_namespaced_pod("p", "default", pod)
    assert exc.value.status == 409


def test_status_only_changes_through_the_status_subresource(core_v1, pod):
    core_v1.patch_namespaced_pod("p", "default", {"status": {"phase": "Running"}})
    assert core_v1.read_namespaced_pod("p", "default").status.phase == "Pending"
    after = core_v1.patch_namespaced_pod_status("p", "default", {
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        "spec": {"nodeName": "sneaky"}})
    assert after.status.phase == "Running" and after.spec.node_name is None
    after = core_v1.patch_namespaced_pod_status("p", "default", {
        "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}})
    assert {c.type for c in after.status.conditions} == {"Ready", "PodScheduled"}


def test_pod_spec_is_immutable_except_images(core_v1, pod):
    with pytest.raises(ApiException) as exc:
        core_v1.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "n1"}})
    assert exc.value.status == 422
    ok = core_v1.patch_namespaced_pod("p", "default", {"spec": {"containers": [
        {"name": "a", "image": "img:3"}]}})
    assert ok.spec.containers[0].image == "img:3"


def _binding(name, node):
    return client.V1Binding(metadata=client.V1ObjectMeta(name=name),
                            target=client.V1ObjectReference(kind="Node", name=node))


def test_binding_sets_node_once(core_v1, pod):
    # The real server answers a Binding with a Status, which this client cannot turn into a
    # V1Binding; _preload_content=False reads the answer without deserialising it.
    resp = core_v1.create_namespaced_binding("default", _binding("p", "n1"),
                                             _preload_content=False)
    assert resp.status == 201 and json.loads(resp.data)["status"] == "Success"
    bound = core_v1.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in bound.status.conditions)
    with pytest.raises(ApiException) as exc:
        core_v1.create_namespaced_pod_binding("p", "default", _binding("p", "n2"),
                                              _preload_content=False)
    assert exc.value.status == 409
    assert 'already assigned to node "n1"' in json.loads(exc.value.body)["message"]


def test_binding_response_quirk_of_the_client(core_v1, pod):
    # Matching the real server: the bind happens, then the client fails to deserialise the
    # Status as a V1Binding (pydantic's ValidationError is a ValueError).
    with pytest.raises(ValueError):
        core_v1.create_namespaced_binding("default", _binding("p", "n1"))
    assert core_v1.read_namespaced_pod("p", "default").spec.node_name == "n1"


def test_binding_a_missing_pod_is_404(core_v1):
    with pytest.raises(ApiException) as exc:
        core_v1.create_namespaced_binding("default", _binding("ghost", "n1"),
                                          _preload_content=False)
    assert exc.value.status == 404
