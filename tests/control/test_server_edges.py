"""The HTTP edges: TLS, the body cap, JSON errors, probes, the command line's configuration
errors and start-up message, and the node handshake against the API server double."""
import http.client
import json
import ssl
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from ctlhelpers import add_gpu_node, eventually, gpu_pod, start_plane
from hami_common import constants as C
from hami_common import handshake
from hami_sim.certs import make_server_certs


def test_tls(apiserver, tmp_path):
    certs = make_server_certs(tmp_path / "certs")
    ctl = start_plane(apiserver, tls=(certs.cert, certs.key, certs.ca_cert))
    try:
        assert ctl.url.startswith("https://")
        assert ctl.client.review(gpu_pod("p", {"nvidia.com/gpu": 1}))["allowed"] is True
        plain = http.client.HTTPConnection("127.0.0.1", int(ctl.url.rsplit(":", 1)[1]),
                                           timeout=5)
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            plain.request("GET", "/healthz")
            plain.getresponse().read()
        untrusted = http.client.HTTPSConnection("127.0.0.1", int(ctl.url.rsplit(":", 1)[1]),
                                                timeout=5,
                                                context=ssl.create_default_context())
        with pytest.raises(ssl.SSLError):
            untrusted.request("GET", "/healthz")
    finally:
        ctl.stop()


def test_body_cap_and_json_errors(control):
    big = b'{"x": "' + b"a" * (1 << 20) + b'"}'
    status, body = control.client.request("POST", "/filter", big,
                                          {"Content-Type": "application/json"})
    assert status == 413 and "at most 1048576" in json.loads(body)["error"]
    status, body = control.client.request("POST", "/bind", b"{nope",
                                          {"Content-Type": "application/json"})
    assert status == 400 and "not valid JSON" in json.loads(body)["error"]
    status, body = control.client.request("POST", "/bind", b"[]",
                                          {"Content-Type": "application/json"})
    assert status == 400 and "ExtenderBindingArgs" in json.loads(body)["error"]
    status, body = control.client.request("POST", "/filter", b'{"NodeNames": []}',
                                          {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415 and "Content-Type: application/json" in json.loads(body)["error"]
    status, body = control.client.request("POST", "/webhook", b"{}",
                                          {"Content-Type": "application/json; charset=utf-8"})
    assert status == 400 and "AdmissionReview" in json.loads(body)["error"]
    status, body = control.client.request("GET", "/nowhere")
    assert status == 404 and json.loads(body)["status"] == 404
    status, body = control.client.request("GET", "/filter")
    assert status == 405 and json.loads(body)["status"] == 405


def test_chunked_body_over_the_cap(control):
    conn = http.client.HTTPConnection(control.url.split("//")[1], timeout=10)
    chunks = (b"a" * 65536 for _ in range(20))
    conn.request("POST", "/webhook", body=chunks, encode_chunked=True,
                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    resp = conn.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["status"] == 413


def test_probes_and_metrics(control):
    assert control.client.request("GET", "/healthz")[0] == 200
    status, body = control.client.request("GET", "/readyz")
    assert status == 200 and json.loads(body)["ok"] is True
    status, body = control.client.request("GET", "/metrics")
    text = body.decode()
    assert status == 200
    for name in ("hami_control_filter_seconds_bucket", "hami_control_bind_seconds_count",
                 "hami_control_leader 1.0", "hami_control_synced 1.0"):
        assert name in text


CONFIG_ERRORS = [
    (["--listen", "nowhere"], "--listen"),
    (["--tls-cert", __file__], "--tls-key"),
    (["--renew-deadline", "20"], "--renew-deadline"),
    (["--node-scheduler-policy", "tetris"], "--node-scheduler-policy"),
    (["--default-cores", "150"], "--default-cores"),
    (["--threads", "0"], "--threads"),
]


@pytest.mark.parametrize("args,key", CONFIG_ERRORS, ids=[c[1] for c in CONFIG_ERRORS])
def test_configuration_errors_name_the_flag(apiserver, args, key):
    proc = subprocess.run([sys.executable, "-m", "hami_control.cli", "--kubeconfig",
                           str(apiserver.kubeconfig), "--listen", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and key in proc.stderr, proc.stderr


def test_plain_http_says_so(apiserver):
    ctl = start_plane(apiserver, process=True)
    try:
        eventually(lambda: "plain HTTP" in "".join(ctl.stderr))
    finally:
        ctl.stop()


def test_handshake_written_and_stale_nodes_drop_out(core_v1, apiserver):
    add_gpu_node(core_v1, "n1")
    ctl = start_plane(apiserver, "--handshake-interval", "0.2", "--no-leader-elect")
    try:
        value = eventually(lambda: (core_v1.read_node("n1").metadata.annotations or {}).get(
            C.ANNO_NODE_HANDSHAKE))
        assert value.startswith("Requesting_")
        version = core_v1.read_node("n1").metadata.resource_version
        time.sleep(1.1)                    # five handshake periods: written once, not again
        assert core_v1.read_node("n1").metadata.resource_version == version
        old = datetime.now(timezone.utc) - timedelta(seconds=90)
        stale = handshake.encode(handshake.Handshake(handshake.REQUESTING, old))
        core_v1.patch_node("n1", {"metadata": {"annotations": {C.ANNO_NODE_HANDSHAKE: stale}}})
        core_v1.patch_node_status("n1", {"status": {"allocatable": {C.RESOURCE_GPU: "0"}}})
        eventually(lambda: ctl.plane.state.node_names() == [])
        reported = handshake.encode(handshake.Handshake(handshake.REPORTED,
                                                        datetime.now(timezone.utc)))
        core_v1.patch_node("n1", {"metadata": {"annotations": {C.ANNO_NODE_HANDSHAKE:
                                                               reported}}})
        eventually(lambda: ctl.plane.state.node_names() == ["n1"])
    finally:
        ctl.stop()
