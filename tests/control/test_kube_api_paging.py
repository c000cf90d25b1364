"""hami-control's full relist reads the cluster in pages (limit/continue), as a large cluster's
API server should be read, and gets every object and the list's resourceVersion."""
from ctlhelpers import add_gpu_node
from hami_control.cluster.kube import KubeApi, make_api_client


def test_a_relist_reads_pages_and_gets_every_node(core_v1, apiserver):
    for i in range(5):
        add_gpu_node(core_v1, f"n{i}")
    api = KubeApi(make_api_client(str(apiserver.kubeconfig)), page_size=2)
    calls = []
    real = api._core.list_node

    def counting(*args, **kwargs):        # a spy on the client boundary, not a stand-in
        calls.append((kwargs.get("limit"), kwargs.get("_continue")))
        return real(*args, **kwargs)
    api._core.list_node = counting
    try:
        items, version = api.list("nodes")
    finally:
        api.close()
    assert sorted(n["metadata"]["name"] for n in items) == [f"n{i}" for i in range(5)]
    assert version and version == core_v1.list_node().metadata.resource_version
    assert [limit for limit, _ in calls] == [2, 2, 2]
    assert calls[0][1] is None and all(token for _, token in calls[1:])
