"""Fault injection (at start and at runtime over HTTP), dropped and slow watchers, and many
concurrent writers losing no update."""
import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from hami_sim.launch import start_apiserver
from hami_sim.testing import pod_manifest


def test_forced_error_on_a_verb_and_resource_then_cleared(apiserver, core_v1):
    core_v1.create_namespaced_pod("default", pod_manifest("p"))
    apiserver.set_faults(rules=[{"code": 409, "verbs": ["patch"], "resources": ["pods"],
                                 "times": 2}])
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            core_v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}})
        assert exc.value.status == 409
    core_v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}})
    core_v1.read_namespaced_pod("p", "default")  # other verbs were never affected


def test_error_after_the_write_happened(apiserver, core_v1):
    core_v1.create_namespaced_pod("default", pod_manifest("p"))
    apiserver.set_faults(rules=[{"code": 500, "verbs": ["create"],
                                 "resources": ["pods/binding", "bindings"], "after": True}])
    with pytest.raises(ApiException) as exc:
        core_v1.create_namespaced_binding("default", client.V1Binding(
            metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(name="n")),
            _preload_content=False)
    assert exc.value.status == 500
    assert core_v1.read_namespaced_pod("p", "default").spec.node_name == "n"


def test_error_rate_and_latency(apiserver, core_v1):
    apiserver.set_faults(error_rate=0.5, seed=7)
    codes = []
    for _ in range(40):
        try:
            core_v1.list_namespaced_pod("default")
            codes.append(200)
        except ApiException as e:
            codes.append(e.status)
    assert set(codes) == {200, 500} and 8 <= codes.count(500) <= 32
    apiserver.set_faults(error_rate=0, latency_ms=150)
    start = time.monotonic()
    core_v1.list_namespaced_pod("default")
    assert time.monotonic() - start >= 0.15
    assert apiserver.clear_faults()["latency_ms"] == 0


def test_bad_fault_spec_is_a_400_naming_the_key(apiserver):
    url = urlsplit(apiserver.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
    conn.request("POST", "/_sim/faults", body=json.dumps({"error_rate": 3}))
    resp = conn.getresponse()
    assert resp.status == 400 and "error_rate" in json.loads(resp.read())["message"]


def _open_watch(v1, events, errors, **kw):
    def run():
        try:
            for e in watch.Watch().stream(v1.list_namespaced_pod, "default", **kw):
                events.append(e["type"])
        except Exception as e:  # noqa: BLE001 the test inspects what ended the stream
            errors.append(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_drop_every_watch_now(apiserver, core_v1):
    events, errors = [], []
    threads = [_open_watch(core_v1, events, errors, timeout_seconds=30) for _ in range(3)]
    time.sleep(0.5)
    assert apiserver.drop_watches() == 3
    for t in threads:
        t.join(timeout=5)
        assert not t.is_alive()
    assert len(errors) == 3  # an abrupt close, as a broken network looks to the client


def test_drop_watches_after_n_events(apiserver, core_v1):
    apiserver.set_faults(watch_drop_after=2, watch_drop_mode="end")
    events, errors = [], []
    t = _open_watch(core_v1, events, errors, timeout_seconds=30, resource_version="1")
    for i in range(4):
        core_v1.create_namespaced_pod("default", pod_manifest(f"p{i}"))
    t.join(timeout=5)
    assert not t.is_alive() and events == ["ADDED", "ADDED"] and not errors


def test_slow_watcher_is_dropped_without_blocking_writers(tmp_path):
    api = start_apiserver(workdir=tmp_path, watch_queue=5)
    try:
        url = urlsplit(api.url)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that lags
        sock.connect((url.hostname, url.port))
        conn.sock = sock
        conn.request("GET", "/api/v1/namespaces/default/pods?watch=1&resourceVersion=1")
        resp = conn.getresponse()  # opened, and never read while the writes happen
        writer = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
        start, big = time.monotonic(), "x" * 100_000
        for i in range(60):  # 6 MB of events: more than the socket buffers hold
            writer.request("POST", "/api/v1/namespaces/default/pods", body=json.dumps(
                pod_manifest(f"p{i}", annotations={"pad": big})))
            created = writer.getresponse()
            assert created.status == 201, created.read()
            created.read()
        assert time.monotonic() - start < 10, "writers must not wait for a slow watcher"
        lines = resp.read().splitlines()  # the stream ends: the watcher was dropped
        assert 0 < len(lines) < 60
    finally:
        api.stop()


def test_fifty_concurrent_writers_lose_no_update(core_v1, kube_api_client):
    core_v1.create_namespaced_pod("default", pod_manifest("counter",
                                                          annotations={"count": "0"}))
    increments, conflicts = 4, []

    def writer(_):
        v1 = client.CoreV1Api(kube_api_client)
        done = 0
        while done < increments:
            pod = v1.read_namespaced_pod("counter", "default")
            n = int(pod.metadata.annotations["count"])
            try:
                v1.patch_namespaced_pod("counter", "default", {"metadata": {
                    "resourceVersion": pod.metadata.resource_version,
                    "annotations": {"count": str(n + 1)}}})
                done += 1
            except ApiException as e:
                assert e.status == 409
                conflicts.append(1)
    kube_api_client.configuration.connection_pool_maxsize = 50
    with ThreadPoolExecutor(50) as pool:
        list(pool.map(writer, range(50)))
    final = core_v1.read_namespaced_pod("counter", "default").metadata.annotations["count"]
    assert int(final) == 50 * increments
    assert conflicts, "50 writers on one object must have collided at least once"
