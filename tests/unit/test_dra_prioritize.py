"""Node scores for DRA claim pods: the slice and claim readers, the HostPriorityList levels,
and the DRA nodes' model (claims, assumptions, unknown nodes) scoring as fragaware does for
the GPUs first fit takes."""
import json
import logging

import pytest

from hami_common.constants import DRA_DRIVER
from hami_common.errors import HamiFormatError
from hami_control.claims.nodes import DraNodes
from hami_control.placement.claims import ClaimDeviceUse, ClaimUse
from hami_control.placement.dra import MAX_PRIORITY, SHARED_SLOTS, priorities, slice_gpus

GIB = 1 << 30


class Clock:
    def __init__(self):
        self.t = 0.0

    def monotonic(self):
        return self.t

    def now(self):
        return self.t


def slice_of(node: str, gpus: int = 2, mem_gib: int = 16, shared: bool = True) -> dict:
    devices = []
    for i in range(gpus):
        dev = {"name": f"gpu-{node}-{i}",
               "attributes": {"uuid": {"string": f"GPU-{node}-{i}"}, "index": {"int": i},
                              "type": {"string": "NVIDIA-Tesla T4"}, "numaNode": {"int": 0}},
               "capacity": {"memory": {"value": str(mem_gib * GIB)}, "cores": {"value": "100"}}}
        if shared:
            dev["allowMultipleAllocations"] = True
        devices.append(dev)
    return {"metadata": {"name": f"{node}-{DRA_DRIVER}"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node, "pool": {"name": node},
                     "devices": devices}}


def node_of(name: str, cpu: str = "32", mem: str = "128Gi") -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": mem}}}


def claim_pod(name: str, mem_mib: int, cores: int = 0, uid: str = "") -> dict:
    asks = {f"t-{name}": {"container": "main", "nums": 1, "memMiB": mem_mib, "memPercent": 0,
                          "cores": cores}}
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}",
                         "annotations": {"hami.io/dra-claims": json.dumps(asks)}},
            "spec": {"containers": [{"name": "main", "image": "i", "resources": {
                "requests": {"cpu": "1"}, "claims": [{"name": "hami-gpu-0"}]}}]}}


def use(name: str, node: str, device: int, mem: int, cores: int = 0, pods=()) -> ClaimUse:
    return ClaimUse("ns", name, f"c-{name}", (ClaimDeviceUse(node, f"gpu-{node}-{device}", mem,
                                                             cores),), tuple(pods))


def scores(answer: list) -> dict:
    return {a["Host"]: a["Score"] for a in answer}


@pytest.fixture
def model():
    nodes = DraNodes(Clock())
    for name in ("node-a", "node-b"):
        nodes.apply_node(node_of(name), deleted=False)
        nodes.apply_slice(slice_of(name), deleted=False)
    return nodes


def test_a_slice_reads_as_its_node_s_gpus_in_order():
    read = slice_gpus(slice_of("n1", gpus=2))
    assert (read.node, read.pool) == ("n1", "n1")
    assert [(g.id, g.index, g.devmem, g.devcore, g.count, g.type) for g in read.gpus] == [
        ("gpu-n1-0", 0, 16384, 100, SHARED_SLOTS, "NVIDIA-Tesla T4"),
        ("gpu-n1-1", 1, 16384, 100, SHARED_SLOTS, "NVIDIA-Tesla T4")]
    assert [g.count for g in slice_gpus(slice_of("n1", shared=False)).gpus] == [1, 1]


@pytest.mark.parametrize("broken, words", [
    (lambda s: s["spec"].pop("nodeName"), "no spec.nodeName"),
    (lambda s: s["spec"]["devices"][0]["capacity"].pop("memory"), "no capacity 'memory'"),
    (lambda s: s["spec"]["devices"][1]["capacity"]["cores"].update(value="many"), "cores"),
], ids=["no-node", "no-memory", "bad-cores"])
def test_an_unreadable_slice_is_refused_with_what_is_wrong(broken, words):
    item = slice_of("n1")
    broken(item)
    with pytest.raises(HamiFormatError, match=words):
        slice_gpus(item)


@pytest.mark.parametrize("given, expected", [
    ({"a": 5.0, "b": 3.0, "c": 1.0}, {"a": 10, "b": 4, "c": 0, "x": 0}),
    ({"a": 2.0, "b": 2.0}, {"a": 10, "b": 10, "c": 0, "x": 0}),
    ({"a": -1.0, "b": -1.5}, {"a": 10, "b": 0, "c": 0, "x": 0}),
    ({}, {"a": 0, "b": 0, "c": 0, "x": 0}),
], ids=["spread", "tie-at-the-top", "negative", "nothing-known"])
def test_priorities_put_the_best_nodes_alone_at_the_top(given, expected):
    answer = priorities(given, ["a", "b", "c", "x"])
    assert [a["Host"] for a in answer] == ["a", "b", "c", "x"]
    assert scores(answer) == expected
    assert all(0 <= a["Score"] <= MAX_PRIORITY for a in answer)


def test_a_claim_pod_goes_where_its_slice_fills_a_used_gpu(model):
    # node-a's first GPU holds 12 GiB of a claim: a 4 GiB claim fills it exactly, where
    # kube-scheduler's CPU/memory scores would pick either node (node-b is as free).
    model.apply_claim("ns/old", use("old", "node-a", 0, 12288, pods=[("old", "uid-old")]))
    answer = scores(model.score(claim_pod("p", 4096), ["node-a", "node-b"]))
    assert answer["node-a"] == MAX_PRIORITY and answer["node-b"] < MAX_PRIORITY


def test_a_pod_scored_is_assumed_on_its_best_node_until_its_claim_comes(model):
    model.apply_claim("ns/old", use("old", "node-a", 0, 12288, pods=[("old", "uid-old")]))
    model.score(claim_pod("p", 4096), ["node-a", "node-b"])
    assert model.assumed() == {"uid-p": "node-a"}
    # node-a's GPU 0 is full now (assumed): a second 4 GiB pod does not count on it
    gpu0 = model.view.node("node-a").devices[0]
    assert gpu0.usedmem == 16384
    model.apply_claim("ns/p", use("p", "node-a", 0, 4096, pods=[("p", "uid-p")]))
    assert model.assumed() == {} and gpu0.usedmem == 16384       # the claim, not both


def test_an_assumption_ends_when_the_pod_goes_or_after_its_time(model):
    model.score(claim_pod("tie", 4096), ["node-a", "node-b"])
    assert model.assumed() == {}           # two nodes alike: kube-scheduler's choice, unknown
    model.apply_claim("ns/old", use("old", "node-a", 0, 8192, pods=[("old", "uid-old")]))
    model.score(claim_pod("p", 4096), ["node-a", "node-b"])
    assert list(model.assumed()) == ["uid-p"]
    model.apply_pod(claim_pod("p", 4096), deleted=True)
    assert model.assumed() == {}
    model.score(claim_pod("q", 4096), ["node-a", "node-b"])
    model.clock.t += 31
    model.score(claim_pod("r", 4096), ["node-a", "node-b"])
    assert list(model.assumed()) == ["uid-r"]


def test_unknown_nodes_and_pods_without_claims_of_ours_score_zero(model, caplog):
    caplog.set_level(logging.INFO)
    answer = scores(model.score(claim_pod("p", 4096), ["node-a", "node-z", "node-b"]))
    assert answer["node-z"] == 0 and MAX_PRIORITY in (answer["node-a"], answer["node-b"])
    assert "node node-z publishes no GPU of our DRA driver" in caplog.text
    plain = {"metadata": {"name": "web", "namespace": "ns"}, "spec": {"containers": []}}
    assert scores(model.score(plain, ["node-a", "node-b"])) == {"node-a": 0, "node-b": 0}


def test_a_pod_that_fits_on_no_gpu_scores_zero_everywhere(model):
    answer = scores(model.score(claim_pod("big", 20000), ["node-a", "node-b"]))
    assert answer == {"node-a": 0, "node-b": 0}
    assert model.assumed() == {}


def test_a_whole_device_takes_one_claim(model):
    model.apply_slice(slice_of("node-b", gpus=1, shared=False), deleted=False)
    model.apply_claim("ns/w", use("w", "node-b", 0, 16384, 100, pods=[("w", "uid-w")]))
    answer = scores(model.score(claim_pod("p", 1024), ["node-a", "node-b"]))
    assert answer == {"node-a": MAX_PRIORITY, "node-b": 0}


def test_a_slice_deleted_takes_its_node_out(model):
    model.apply_slice(slice_of("node-b"), deleted=True)
    assert model.view.node("node-b") is None
    model.reconcile_slices([f"node-a-{DRA_DRIVER}"])
    assert model.view.node("node-a") is not None
    model.reconcile_slices([])
    assert len(model.view) == 0


def test_a_slice_seen_again_unchanged_places_no_claim_again_and_a_change_only_its_own(model):
    placed = []
    real = model._place_claim
    model._place_claim = lambda key: placed.append(key) or real(key)
    model.apply_claim("ns/a", use("a", "node-a", 0, 4096))
    model.apply_claim("ns/b", use("b", "node-b", 0, 4096))
    model.apply_claim("ns/c", use("c", "node-c", 0, 4096))     # its slice comes later
    assert model.view.reservation("claim:ns/c") is None
    placed.clear()
    model.apply_slice(slice_of("node-a"), deleted=False)        # a relist: the same slice
    assert placed == []
    model.apply_slice(slice_of("node-a", mem_gib=24), deleted=False)
    assert placed == ["ns/a"]
    assert model.view.node("node-a").devices[0].usedmem == 4096
    placed.clear()
    model.apply_node(node_of("node-c"), deleted=False)
    model.apply_slice(slice_of("node-c"), deleted=False)
    assert placed == ["ns/c"] and model.view.reservation("claim:ns/c").node == "node-c"
