"""KubeApi's single-object calls, which go straight through the client's connection pool: the
paths they build, and each refusal of the API server (the double) as the error the callers act
on. (That they carry the ServiceAccount's token is shown on the real tier: tests/k8s' RBAC
tests run hami-control with nothing else to authenticate it.)"""
import pytest

from ctlhelpers import add_gpu_node, gpu_pod
from hami_common import constants as C
from hami_control.cluster.api import ApiError, Conflict, Invalid, NotFound
from hami_control.cluster.kube import KubeApi, make_api_client


@pytest.fixture
def api(apiserver):
    client = KubeApi(make_api_client(str(apiserver.kubeconfig)), request_timeout=5)
    try:
        yield client
    finally:
        client.close()


def test_reads_and_writes_of_pods_and_nodes(api, core_v1):
    add_gpu_node(core_v1, "n1")
    core_v1.create_namespace({"metadata": {"name": "team-a"}})
    core_v1.create_namespaced_pod("team-a", gpu_pod("p", {C.RESOURCE_GPU: 1},
                                                    namespace="team-a"))
    assert api.get_node("n1")["metadata"]["name"] == "n1"
    assert api.get_node("absent") is None and api.get_pod("team-a", "absent") is None
    patched = api.patch_pod_annotations("team-a", "p", {"a": "1"}, {"l": "2"})
    assert patched["metadata"]["annotations"]["a"] == "1"
    assert patched["metadata"]["labels"]["l"] == "2"
    api.bind_pod("team-a", "p", patched["metadata"]["uid"], "n1", {"b": "3"})
    pod = api.get_pod("team-a", "p")
    assert pod["spec"]["nodeName"] == "n1" and pod["metadata"]["annotations"]["b"] == "3"
    node = api.patch_node_annotations("n1", {"x": "y"}, api.get_node("n1")["metadata"][
        "resourceVersion"])
    assert node["metadata"]["annotations"]["x"] == "y"


def test_refusals_are_the_errors_callers_act_on(api, core_v1):
    add_gpu_node(core_v1, "n1")
    with pytest.raises(Conflict):                         # a stale resourceVersion
        api.patch_node_annotations("n1", {"x": "y"}, "1")
    with pytest.raises(Invalid):                          # a JSON patch whose test fails
        api.json_patch_node("n1", [{"op": "test", "path": "/metadata/name", "value": "n2"}])
    with pytest.raises(NotFound):
        api.patch_pod_annotations("default", "absent", {"a": "1"})
    with pytest.raises(ApiError) as e:                    # the UID of another pod
        api.bind_pod("default", "absent", "not-its-uid", "n1", {})
    assert e.value.status in (404, 409)


def test_an_unreachable_api_server_says_so(apiserver):
    client = make_api_client(str(apiserver.kubeconfig))
    client.configuration.host = "http://127.0.0.1:9"       # nothing listens (discard port)
    api = KubeApi(client, request_timeout=2)
    try:
        with pytest.raises(ApiError) as e:
            api.get_node("n1")
        assert e.value.status == 0 and "did not answer" in str(e.value)
    finally:
        api.close()
