"""kubectl itself against the API server double: `get` prints the real server's columns (the
double answers kubectl's Table requests). kubectl comes from the project's own build
(tools/k8s/build.sh, or $HAMI_KUBECTL)."""
import re
import subprocess


def kubectl(binary, kubeconfig, *args) -> list:
    """Runs kubectl; its table as rows of cells (split where two spaces or more separate)."""
    done = subprocess.run([binary, "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [re.split(r"\s{2,}", line.strip()) for line in done.stdout.splitlines()]


def by_name(rows, key="NAME") -> dict:
    header = rows[0]
    return {dict(zip(header, r))[key]: dict(zip(header, r)) for r in rows[1:]}


def test_kubectl_get_reads_like_a_real_cluster(apiserver, core_v1, kubeconfig_file,
                                               kubectl_binary):
    apiserver.server.add_node("gpu-1", labels={"node-role.kubernetes.io/worker": ""})
    for name in ("idle", "busy"):
        core_v1.create_namespaced_pod("default", {"metadata": {"name": name}, "spec": {
            "containers": [{"name": "main", "image": "img"}]}})
    core_v1.create_namespaced_pod_binding("busy", "default", {
        "metadata": {"name": "busy"}, "target": {"kind": "Node", "name": "gpu-1"}},
        _preload_content=False)
    core_v1.patch_namespaced_pod_status("busy", "default", {"status": {
        "phase": "Running", "podIPs": [{"ip": "10.0.0.7"}], "conditions": [
            {"type": "Ready", "status": "True"}], "containerStatuses": [
            {"name": "main", "image": "img", "imageID": "", "ready": True, "restartCount": 0,
             "state": {"running": {}}}]}}, _preload_content=False)
    core_v1.create_namespaced_event("default", {
        "metadata": {"name": "busy.1"}, "type": "Normal", "reason": "Scheduled",
        "message": "bound to gpu-1", "involvedObject": {"kind": "Pod", "name": "busy"},
        "source": {"component": "hami-scheduler"}}, _preload_content=False)

    nodes = kubectl(kubectl_binary, kubeconfig_file, "get", "nodes")
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    node = by_name(nodes)["gpu-1"]
    assert (node["STATUS"], node["ROLES"]) == ("Ready", "worker")
    assert node["VERSION"].startswith("v1.")

    pods = kubectl(kubectl_binary, kubeconfig_file, "get", "pods", "-o", "wide")
    assert pods[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE",
                       "NOMINATED NODE", "READINESS GATES"]
    rows = by_name(pods)
    assert [rows["busy"][k] for k in ("READY", "STATUS", "IP", "NODE")] == \
        ["1/1", "Running", "10.0.0.7", "gpu-1"]
    assert [rows["idle"][k] for k in ("READY", "STATUS", "NODE")] == ["0/1", "Pending",
                                                                      "<none>"]

    events = kubectl(kubectl_binary, kubeconfig_file, "get", "events")
    assert events[0] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert events[1][1:] == ["Normal", "Scheduled", "pod/busy", "bound to gpu-1"]
    namespaces = by_name(kubectl(kubectl_binary, kubeconfig_file, "get", "namespaces"))
    assert namespaces["default"]["STATUS"] == "Active"
    everywhere = kubectl(kubectl_binary, kubeconfig_file, "get", "pods", "-A")
    assert everywhere[0][:3] == ["NAMESPACE", "NAME", "READY"]     # from the rows' metadata
