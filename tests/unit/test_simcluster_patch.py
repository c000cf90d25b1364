"""The API server double's patch algorithms and selectors, as pure functions."""
import pytest

from hami_sim.apiserver.errors import ApiError
from hami_sim.apiserver.patch import json_patch, merge_patch, strategic_merge_patch
from hami_sim.apiserver.selectors import (compile_selector, parse_field_selector,
                                          parse_label_selector)

MERGE = [
    ("null-deletes", {"a": 1, "b": 2}, {"b": None}, {"a": 1}),
    ("nested", {"m": {"x": 1, "y": 2}}, {"m": {"y": 3, "z": 4}}, {"m": {"x": 1, "y": 3, "z": 4}}),
    ("list-replaces", {"l": [1, 2]}, {"l": [3]}, {"l": [3]}),
    ("scalar-over-map", {"m": {"x": 1}}, {"m": 5}, {"m": 5}),
]


@pytest.mark.parametrize("doc,patch,want", [m[1:] for m in MERGE], ids=[m[0] for m in MERGE])
def test_merge_patch(doc, patch, want):
    assert merge_patch(doc, patch) == want


SMP = [
    ("containers-by-name",
     {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]},
     {"containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}]},
     {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"},
                     {"name": "c", "image": "3"}]}),
    ("delete-directive",
     {"conditions": [{"type": "Ready"}, {"type": "PodScheduled"}]},
     {"conditions": [{"type": "Ready", "$patch": "delete"}]},
     {"conditions": [{"type": "PodScheduled"}]}),
    ("replace-map", {"m": {"x": 1}}, {"m": {"$patch": "replace", "y": 2}}, {"m": {"y": 2}}),
    ("finalizers-union", {"finalizers": ["a"]}, {"finalizers": ["b", "a"]},
     {"finalizers": ["a", "b"]}),
    ("delete-from-primitive-list", {"finalizers": ["a", "b"]},
     {"$deleteFromPrimitiveList/finalizers": ["a"]}, {"finalizers": ["b"]}),
    ("unkeyed-list-replaces", {"tolerations": [{"key": "a"}]}, {"tolerations": [{"key": "b"}]},
     {"tolerations": [{"key": "b"}]}),
    ("order-directive-ignored", {"l": [1]}, {"$setElementOrder/l": [1], "x": 1},
     {"l": [1], "x": 1}),
]


@pytest.mark.parametrize("doc,patch,want", [m[1:] for m in SMP], ids=[m[0] for m in SMP])
def test_strategic_merge_patch(doc, patch, want):
    assert strategic_merge_patch(doc, patch) == want


def test_json_patch_ops():
    doc = {"a": {"b": [1, 2]}, "c": "x"}
    out = json_patch(doc, [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "replace", "path": "/c", "value": "y"},
        {"op": "copy", "from": "/c", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e~1f"},
        {"op": "remove", "path": "/a/b/1"},
        {"op": "test", "path": "/a/b", "value": [0, 2, 3]}])
    assert out == {"a": {"b": [0, 2, 3]}, "c": "y", "e/f": "y"}


@pytest.mark.parametrize("ops,code", [
    ({"op": "add"}, 400), ([{"op": "jump", "path": "/a"}], 400),
    ([{"op": "remove", "path": "/missing"}], 422), ([{"op": "replace", "path": "/x/y",
                                                     "value": 1}], 422),
    ([{"op": "test", "path": "/a", "value": 2}], 422)],
    ids=["not-a-list", "unknown-op", "remove-missing", "replace-missing", "test-fails"])
def test_json_patch_errors(ops, code):
    with pytest.raises(ApiError) as exc:
        json_patch({"a": 1}, ops)
    assert exc.value.code == code


def test_selectors_compile_to_predicates():
    match = compile_selector(parse_label_selector("env in (a,b),!legacy,tier!=db"),
                             parse_field_selector("spec.nodeName=,status.phase!=Failed", (
                                 "spec.nodeName", "status.phase")))
    pod = {"metadata": {"labels": {"env": "a"}}, "spec": {}, "status": {"phase": "Pending"}}
    assert match(pod)
    assert not match({**pod, "spec": {"nodeName": "n1"}})
    assert not match({**pod, "metadata": {"labels": {"env": "a", "legacy": ""}}})
