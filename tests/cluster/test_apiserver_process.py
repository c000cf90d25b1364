"""`hami-sim apiserver` as a real process: kubeconfig, HTTPS with a CA, a state file kept
across restarts, fault flags, malformed requests, and refusals of bad flags."""
import http.client
import json
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from hami_sim.kubeconfig import api_client_from_kubeconfig
from hami_sim.launch import start_apiserver
from hami_sim.testing import pod_manifest


def test_process_with_kubeconfig(apiserver_process):
    v1 = client.CoreV1Api(api_client_from_kubeconfig(apiserver_process.kubeconfig))
    v1.create_namespaced_pod("default", pod_manifest("p"))
    assert [p.metadata.name for p in v1.list_namespaced_pod("default").items] == ["p"]


def test_https_with_a_ca_and_preset_nodes(tmp_path):
    api = start_apiserver(process=True, tls=True, workdir=tmp_path, nodes=["gpu-a", "gpu-b"])
    try:
        assert api.url.startswith("https://")
        v1 = client.CoreV1Api(api_client_from_kubeconfig(api.kubeconfig))
        nodes = v1.list_node().items
        assert sorted(n.metadata.name for n in nodes) == ["gpu-a", "gpu-b"]
        assert nodes[0].status.allocatable["cpu"] == "16"
    finally:
        api.stop()


def test_state_file_survives_a_restart(tmp_path):
    state = tmp_path / "state.json"
    api = start_apiserver(process=True, workdir=tmp_path, extra_args=["--state-file", str(state)])
    v1 = client.CoreV1Api(api.api_client())
    rv = v1.create_namespaced_pod("default", pod_manifest("kept")).metadata.resource_version
    api.stop()
    api = start_apiserver(process=True, workdir=tmp_path, extra_args=["--state-file", str(state)])
    try:
        v1 = client.CoreV1Api(api.api_client())
        pod = v1.read_namespaced_pod("kept", "default")
        assert pod.metadata.resource_version == rv
        newer = v1.create_namespaced_pod("default", pod_manifest("new"))
        assert int(newer.metadata.resource_version) > int(rv)
    finally:
        api.stop()


def test_faults_from_the_environment(tmp_path):
    api = start_apiserver(process=True, workdir=tmp_path, faults={"rules": [
        {"code": 500, "verbs": ["list"], "resources": ["nodes"]}]})
    try:
        v1 = client.CoreV1Api(api.api_client())
        with pytest.raises(client.ApiException) as exc:
            v1.list_node()
        assert exc.value.status == 500
        v1.list_namespace()
    finally:
        api.stop()


MALFORMED = [
    ("not-json", "POST", "/api/v1/namespaces/default/pods", b"{nope", 400),
    ("json-array", "POST", "/api/v1/namespaces/default/pods", b"[1]", 400),
    ("unknown-resource", "GET", "/api/v1/widgets", b"", 404),
    ("unknown-group", "GET", "/apis/apps/v1/deployments", b"", 404),
    ("unknown-subresource", "GET", "/api/v1/namespaces/default/pods/p/exec", b"", 404),
    ("too-large", "POST", "/api/v1/namespaces/default/pods", b"x" * (4 * 1024 * 1024), 413),
    ("put-on-collection", "PUT", "/api/v1/namespaces/default/pods", b"{}", 405),
]


@pytest.mark.parametrize("method,path,body,code", [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_malformed_requests_get_a_status(apiserver_process, method, path, body, code):
    url = urlsplit(apiserver_process.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    status = json.loads(resp.read())
    assert resp.status == code and status["kind"] == "Status" and status["code"] == code


BAD_FLAGS = [
    (["--listen", "nowhere"], "--listen"),
    (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], "--tls-cert"),
    (["--node", "n1,gpus=4"], "--node"),
    (["--fault-rule", '{"code": 200}'], "rules[0].code"),
    (["--error-rate", "2"], "error_rate"),
]


@pytest.mark.parametrize("args,named", BAD_FLAGS, ids=[b[1] for b in BAD_FLAGS])
def test_bad_flags_exit_non_zero_naming_the_flag(args, named):
    proc = subprocess.run([sys.executable, "-m", "hami_sim.cli", "apiserver", *args],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and named in proc.stderr
