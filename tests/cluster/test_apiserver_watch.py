"""List with selectors and paging, and watch through kubernetes.watch: from a version, 410
Gone and recovery, bookmarks, timeouts, selector transitions, dropped and slow watchers."""
import http.client
import json
import threading
import time
from urllib.parse import urlsplit

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from hami_sim.launch import start_apiserver
from hami_sim.testing import pod_manifest

LABELLED = {"a": {"app": "web", "tier": "gpu"}, "b": {"app": "db"}, "c": {"tier": "cpu"},
            "d": {}}

SELECTORS = [
    ("app=web", {"a"}), ("app==web", {"a"}), ("app!=web", {"b", "c", "d"}),
    ("app in (web,db)", {"a", "b"}), ("app notin (web)", {"b", "c", "d"}),
    ("tier", {"a", "c"}), ("!tier", {"b", "d"}), ("app,tier", {"a"}),
    ("app in (web, db),!tier", {"b"}),
]


@pytest.fixture
def labelled(core_v1):
    for name, labels in LABELLED.items():
        core_v1.create_namespaced_pod("default", pod_manifest(name, labels=labels))
    return core_v1


@pytest.mark.parametrize("selector,expected", SELECTORS, ids=[s for s, _ in SELECTORS])
def test_label_selectors(labelled, selector, expected):
    items = labelled.list_namespaced_pod("default", label_selector=selector).items
    assert {p.metadata.name for p in items} == expected


def test_bad_selectors_are_400(labelled):
    for kwargs in ({"label_selector": "app in web"}, {"field_selector": "spec.color=red"}):
        with pytest.raises(ApiException) as exc:
            labelled.list_namespaced_pod("default", **kwargs)
        assert exc.value.status == 400


def test_field_selectors_and_all_namespaces(core_v1):
    core_v1.create_namespace({"metadata": {"name": "ml"}})
    for ns, name in (("default", "x"), ("ml", "y"), ("ml", "z")):
        core_v1.create_namespaced_pod(ns, pod_manifest(name))
    core_v1.create_namespaced_binding("ml", client.V1Binding(
        metadata=client.V1ObjectMeta(name="y"), target=client.V1ObjectReference(name="n1")),
        _preload_content=False)
    core_v1.patch_namespaced_pod_status("z", "ml", {"status": {"phase": "Succeeded"}})

    def names(**kw):
        return sorted(p.metadata.name for p in core_v1.list_pod_for_all_namespaces(**kw).items)
    assert names() == ["x", "y", "z"]
    assert names(field_selector="spec.nodeName=n1") == ["y"]
    assert names(field_selector="spec.nodeName=") == ["x", "z"]
    assert names(field_selector="status.phase!=Succeeded,metadata.namespace=ml") == ["y"]
    assert names(field_selector="metadata.name=x") == ["x"]


def test_list_paging(core_v1):
    for i in range(5):
        core_v1.create_namespaced_pod("default", pod_manifest(f"p{i}"))
    first = core_v1.list_namespaced_pod("default", limit=2)
    assert len(first.items) == 2 and first.metadata.remaining_item_count == 3
    rest = core_v1.list_namespaced_pod("default", limit=10, _continue=first.metadata._continue)
    assert [p.metadata.name for p in first.items + rest.items] == [f"p{i}" for i in range(5)]


def _collect(core_v1, **kwargs):
    w = watch.Watch()
    return [(e["type"], e["raw_object"]["metadata"].get("name"))
            for e in w.stream(core_v1.list_namespaced_pod, "default", **kwargs)]


def test_watch_from_a_resource_version(core_v1):
    start = core_v1.list_namespaced_pod("default").metadata.resource_version
    core_v1.create_namespaced_pod("default", pod_manifest("w"))
    core_v1.patch_namespaced_pod("w", "default", {"metadata": {"labels": {"x": "1"}}})
    core_v1.delete_namespaced_pod("w", "default")
    events = _collect(core_v1, resource_version=start, timeout_seconds=1)
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_watch_without_version_starts_with_current_objects(core_v1):
    core_v1.create_namespaced_pod("default", pod_manifest("old"))
    assert _collect(core_v1, timeout_seconds=1) == [("ADDED", "old")]


def test_watch_sees_selector_transitions(core_v1):
    core_v1.create_namespaced_pod("default", pod_manifest("t", labels={"gpu": "yes"}))
    start = core_v1.list_namespaced_pod("default").metadata.resource_version
    core_v1.patch_namespaced_pod("t", "default", {"metadata": {"labels": {"gpu": "no"}}})
    core_v1.patch_namespaced_pod("t", "default", {"metadata": {"labels": {"gpu": "yes"}}})
    events = _collect(core_v1, resource_version=start, timeout_seconds=1,
                      label_selector="gpu=yes")
    assert events == [("DELETED", "t"), ("ADDED", "t")]


def test_live_events_and_bookmarks(core_v1):
    start = core_v1.list_namespaced_pod("default").metadata.resource_version
    got = []

    def watcher():
        w = watch.Watch()
        for e in w.stream(core_v1.list_namespaced_pod, "default", resource_version=start,
                          timeout_seconds=2, allow_watch_bookmarks=True):
            got.append(e["type"])
    t = threading.Thread(target=watcher)
    t.start()
    time.sleep(0.3)
    core_v1.create_namespaced_pod("default", pod_manifest("live"))
    t.join(timeout=10)
    assert "ADDED" in got and "BOOKMARK" in got  # the fixture's bookmark interval is 0.5 s


def test_too_old_version_is_410_and_relist_recovers(tmp_path):
    api = start_apiserver(workdir=tmp_path, history=5)
    try:
        v1 = client.CoreV1Api(api.api_client())
        start = v1.list_namespaced_pod("default").metadata.resource_version
        for i in range(8):
            v1.create_namespaced_pod("default", pod_manifest(f"p{i}"))
        with pytest.raises(ApiException) as exc:
            _collect(v1, resource_version=start, timeout_seconds=1)
        assert exc.value.status == 410 and "too old resource version" in exc.value.reason
        # The informer's recovery: list again, watch from the list's version.
        listed = v1.list_namespaced_pod("default")
        assert len(listed.items) == 8
        v1.create_namespaced_pod("default", pod_manifest("after"))
        events = _collect(v1, resource_version=listed.metadata.resource_version,
                          timeout_seconds=1)
        assert events == [("ADDED", "after")]
    finally:
        api.stop()


def test_410_is_streamed_as_an_error_event(tmp_path):
    # Without timeout_seconds the client retries once, then raises; on the wire the server
    # answers 200 and an ERROR event with a Status, as the real one does.
    api = start_apiserver(workdir=tmp_path, history=3)
    try:
        v1 = client.CoreV1Api(api.api_client())
        for i in range(5):
            v1.create_namespaced_pod("default", pod_manifest(f"p{i}"))
        url = urlsplit(api.url)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
        conn.request("GET", "/api/v1/pods?watch=true&resourceVersion=1")
        resp = conn.getresponse()
        assert resp.status == 200
        event = json.loads(resp.readline())
        assert event["type"] == "ERROR"
        assert event["object"]["kind"] == "Status" and event["object"]["code"] == 410
        assert event["object"]["reason"] == "Expired"
        conn.close()
    finally:
        api.stop()
