"""Server-side printing: the API server double answers kubectl's Table requests with the columns
and cells of the real API server (read here through the Python client's ApiClient)."""
import json
import urllib.request

import pytest
from kubernetes.client.rest import ApiException

from hami_sim.apiserver.tables import human_duration, table_version

TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
KUBECTL_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,"
                  "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")


def call(client, method, path, accept=KUBECTL_ACCEPT, body=None, **query):
    """One request through the Python client's ApiClient; the decoded body (ApiException on
    an error status, as the typed methods raise)."""
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = "application/json"
    args = client.param_serialize(method, path, query_params=list(query.items()),
                                  header_params=headers, body=body,
                                  auth_settings=["BearerToken"])
    response = client.call_api(*args[:4])
    response.read()
    if response.status >= 400:
        raise ApiException(http_resp=response)
    return json.loads(response.data)


def get(client, path, accept=KUBECTL_ACCEPT, **query):
    """GET path with an Accept header (kubectl's by default)."""
    return call(client, "GET", path, accept, **query)


def columns(table, wide=True):
    return [c["name"] for c in table["columnDefinitions"] if wide or c["priority"] == 0]


def cells(table):
    return {row["cells"][0]: row["cells"] for row in table["rows"]}


def pod(name, containers=("main",), **spec):
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": c, "image": "img"} for c in containers], **spec}}


def test_accept_negotiation():
    assert table_version(KUBECTL_ACCEPT) == "v1"
    assert table_version("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == "v1beta1"
    assert table_version("application/json") is None
    assert table_version("") is None
    assert table_version("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,"
                         "application/json;as=Table;v=v1;g=meta.k8s.io") == "v1"
    assert table_version("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,"
                         "application/json") is None
    assert table_version("application/json;as=Table;v=v2;g=meta.k8s.io,*/*") is None


@pytest.mark.parametrize("seconds, text", [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (200, "3m20s"),
    (599, "9m59s"), (600, "10m"), (179 * 60, "179m"), (3 * 3600, "3h"), (3 * 3600 + 300, "3h5m"),
    (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"), (50 * 3600, "2d2h"),
    (8 * 86400, "8d"), (400 * 86400, "400d"), (731 * 86400, "2y1d"), (9 * 365 * 86400, "9y")])
def test_ages_read_as_kubectls(seconds, text):
    assert human_duration(seconds) == text


def test_pod_columns_and_cells(apiserver, core_v1, kube_api_client):
    core_v1.create_namespaced_pod("default", pod("waiting"))
    core_v1.create_namespaced_pod("default", pod("bound", ("a", "b"), readinessGates=[
        {"conditionType": "example.com/gate"}]))
    core_v1.create_namespaced_pod("default", pod("done"))
    core_v1.create_namespaced_pod_binding("bound", "default", {
        "metadata": {"name": "bound"}, "target": {"kind": "Node", "name": "node-1"}},
        _preload_content=False)
    core_v1.patch_namespaced_pod_status("bound", "default", {"status": {
        "phase": "Running", "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}],
        "nominatedNodeName": "node-2",
        "conditions": [{"type": "Ready", "status": "True"},
                       {"type": "example.com/gate", "status": "True"}],
        "containerStatuses": [
            {"name": "a", "image": "img", "imageID": "", "ready": True, "restartCount": 3,
             "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2020-01-01T00:00:00Z"}}},
            {"name": "b", "image": "img", "imageID": "", "ready": False, "restartCount": 0,
             "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})
    core_v1.patch_namespaced_pod_status("done", "default", {"status": {
        "phase": "Succeeded", "containerStatuses": [{"name": "main", "image": "img",
                                                     "imageID": "", "ready": False,
                                                     "restartCount": 0, "state": {"terminated": {
                                                         "exitCode": 0,
                                                         "reason": "Completed"}}}]}})
    table = get(kube_api_client, "/api/v1/namespaces/default/pods")
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert columns(table, wide=False) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert columns(table) == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node",
                              "Nominated Node", "Readiness Gates"]
    rows = cells(table)
    assert rows["waiting"][1:4] == ["0/1", "Pending", "0"]
    assert rows["waiting"][5:] == ["<none>"] * 4
    assert rows["bound"][1:3] == ["1/2", "CrashLoopBackOff"]
    assert rows["bound"][3].startswith("3 (") and rows["bound"][3].endswith(" ago)")
    assert rows["bound"][5:] == ["10.1.2.3", "node-1", "node-2", "1/1"]
    assert rows["done"][1:3] == ["0/1", "Completed"]
    assert rows["waiting"][4].endswith("s")                       # just created
    finished = [r for r in table["rows"] if r["cells"][0] == "done"][0]
    assert finished["conditions"][0]["reason"] == "Succeeded"
    meta = finished["object"]
    assert meta["kind"] == "PartialObjectMetadata" and meta["metadata"]["name"] == "done"
    assert table["metadata"]["resourceVersion"]


def test_one_object_include_object_and_paging(core_v1, kube_api_client):
    for name in ("p1", "p2", "p3"):
        core_v1.create_namespaced_pod("default", pod(name))
    one = get(kube_api_client, "/api/v1/namespaces/default/pods/p2", includeObject="Object")
    assert len(one["rows"]) == 1 and one["rows"][0]["object"]["spec"]["containers"]
    assert one["metadata"]["resourceVersion"] == one["rows"][0]["object"]["metadata"][
        "resourceVersion"]
    bare = get(kube_api_client, "/api/v1/namespaces/default/pods", includeObject="None")
    assert all("object" not in row for row in bare["rows"])
    page = get(kube_api_client, "/api/v1/namespaces/default/pods", limit="2")
    assert len(page["rows"]) == 2 and page["metadata"]["remainingItemCount"] == 1
    rest = get(kube_api_client, "/api/v1/namespaces/default/pods",
               **{"continue": page["metadata"]["continue"]})
    assert [r["cells"][0] for r in rest["rows"]] == ["p3"]
    old = get(kube_api_client, "/api/v1/namespaces/default/pods",
              accept="application/json;as=Table;v=v1beta1;g=meta.k8s.io")
    assert old["apiVersion"] == "meta.k8s.io/v1beta1"
    assert old["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"
    plain = get(kube_api_client, "/api/v1/namespaces/default/pods", accept="application/json")
    assert plain["kind"] == "PodList"
    with pytest.raises(ApiException) as bad:
        get(kube_api_client, "/api/v1/namespaces/default/pods", includeObject="All")
    assert bad.value.status == 400 and "includeObject" in bad.value.body


def test_node_columns_and_cells(apiserver, kube_api_client, core_v1):
    server = apiserver.server
    server.add_node("plain")
    server.add_node("worker", labels={"node-role.kubernetes.io/worker": "",
                                      "node-role.kubernetes.io/gpu": "true"})
    core_v1.patch_node("worker", {"spec": {"unschedulable": True}})
    core_v1.patch_node_status("plain", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}})
    table = get(kube_api_client, "/api/v1/nodes")
    assert columns(table, wide=False) == ["Name", "Status", "Roles", "Age", "Version"]
    assert columns(table)[5:] == ["Internal-IP", "External-IP", "OS-Image", "Kernel-Version",
                                  "Container-Runtime"]
    rows = cells(table)
    assert rows["plain"][1:3] == ["NotReady", "<none>"]
    assert rows["worker"][1:3] == ["Ready,SchedulingDisabled", "gpu,worker"]
    assert rows["worker"][4].startswith("v1.")               # the simulated kubelet's version
    assert rows["worker"][5:7] == ["127.0.0.1", "<none>"]
    assert all(cell for cell in rows["worker"][7:])


def test_events_namespaces_leases_quotas(apiserver, kube_api_client, core_v1):
    core_v1.create_namespaced_event("default", {
        "metadata": {"name": "ev1"}, "type": "Warning", "reason": "FailedScheduling",
        "message": " no node fits \n", "count": 3,
        "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{main}"},
        "source": {"component": "hami-scheduler", "host": "ctl-1"},
        "firstTimestamp": "2020-01-01T00:00:00Z", "lastTimestamp": "2020-01-01T00:00:00Z"})
    events = get(kube_api_client, "/api/v1/namespaces/default/events")
    assert columns(events, wide=False) == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert columns(events) == ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source",
                               "Message", "First Seen", "Count", "Name"]
    row = events["rows"][0]["cells"]
    assert row[1:] == ["Warning", "FailedScheduling", "pod/p", "spec.containers{main}",
                       "hami-scheduler, ctl-1", "no node fits", row[7], 3, "ev1"]
    assert row[0].endswith("d") or row[0].endswith("y")      # years ago
    client = kube_api_client
    call(client, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", body={
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "ev2"},
        "eventTime": "2020-01-01T00:00:00.000000Z", "type": "Normal", "reason": "Scheduled",
        "note": "bound", "action": "Binding", "reportingController": "hami-scheduler",
        "reportingInstance": "ctl-2", "regarding": {"kind": "Pod", "name": "q"}})
    new = get(client, "/apis/events.k8s.io/v1/namespaces/default/events")["rows"][0]["cells"]
    assert new[1:] == ["Normal", "Scheduled", "pod/q", "", "hami-scheduler, ctl-2", "bound",
                       new[0], 1, "ev2"]
    namespaces = get(client, "/api/v1/namespaces")
    assert columns(namespaces) == ["Name", "Status", "Age"]
    assert cells(namespaces)["kube-system"][1] == "Active"
    call(client, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", body={
        "metadata": {"name": "hami-control"}, "spec": {"holderIdentity": "ctl-1"}})
    leases = get(client, "/apis/coordination.k8s.io/v1/namespaces/default/leases")
    assert columns(leases) == ["Name", "Holder", "Age"]
    assert cells(leases)["hami-control"][1] == "ctl-1"
    core_v1.create_namespaced_resource_quota("default", {
        "metadata": {"name": "gpus"},
        "spec": {"hard": {"limits.nvidia.com/gpu": "4", "requests.cpu": "8", "pods": "10"}}})
    core_v1.patch_namespaced_resource_quota_status("gpus", "default", {"status": {
        "hard": {"limits.nvidia.com/gpu": "4", "requests.cpu": "8", "pods": "10"},
        "used": {"limits.nvidia.com/gpu": "1", "pods": "2"}}})
    quotas = get(client, "/api/v1/namespaces/default/resourcequotas")
    assert columns(quotas) == ["Name", "Age", "Request", "Limit"]
    assert cells(quotas)["gpus"][2:] == ["pods: 2/10, requests.cpu: 0/8",
                                         "limits.nvidia.com/gpu: 1/4"]


def test_watch_streams_one_row_tables(apiserver, core_v1):
    request = urllib.request.Request(
        apiserver.url + "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=2",
        headers={"Accept": KUBECTL_ACCEPT})
    core_v1.create_namespaced_pod("default", pod("seen"))
    with urllib.request.urlopen(request, timeout=10) as stream:
        event = json.loads(stream.readline())
    assert event["type"] == "ADDED" and event["object"]["kind"] == "Table"
    assert [r["cells"][:3] for r in event["object"]["rows"]] == [["seen", "0/1", "Pending"]]
