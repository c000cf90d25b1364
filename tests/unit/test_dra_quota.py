"""DRA claims against namespace GPU quotas: a claim's allocation read in quota units, a DRA
pod's ask, and the ClaimBook (gate admission, holds until the claims count, claims shared by
pods counted once) on a real ClusterView."""
import threading
import time

import pytest

from hami_common.constants import DRA_DRIVER
from hami_common.errors import HamiFormatError
from hami_common.request import ContainerRequest
from hami_control.claims.book import ClaimBook
from hami_control.claims.gate import gate_index
from hami_control.placement import ClusterView
from hami_control.placement.claims import ask_amount, parse_claim
from hami_control.placement.quota import Amount
from hami_control.webhook.dra import QUOTA_GATE


def claim(name="c", results=(), pods=(), namespace="team"):
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "status": {"allocation": {"devices": {"results": list(results)}},
                       "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"}
                                       for p in pods]}}


def result(device="gpu-0", consumed=None, driver=DRA_DRIVER, pool="node-a"):
    out = {"request": "gpu", "driver": driver, "pool": pool, "device": device}
    if consumed is not None:
        out["consumedCapacity"] = consumed
    return out


@pytest.mark.parametrize("results,want", [
    ([result(consumed={"memory": "3000Mi", "cores": "30"})], Amount(1, 3000, 30)),
    ([result(consumed={"memory": str(2**20 + 1), "cores": "0"})], Amount(1, 2, 0)),
    ([result("gpu-0", {"memory": "1Gi", "cores": "10"}),
      result("gpu-1", {"memory": "1Gi", "cores": "10"})], Amount(2, 2048, 20)),
    ([result(consumed=None)], Amount(1, 15360, 100)),          # whole GPU: the gate is off
    ([result(consumed={"memory": "1Gi"}, driver="other.example.com"),
      result("gpu-3", {"memory": "1Gi", "cores": "5"})], Amount(1, 1024, 5)),
], ids=["shared", "bytes-round-up", "two-devices", "whole", "other-driver-ignored"])
def test_a_claim_holds_what_it_consumed(results, want):
    use = parse_claim(claim(results=results, pods=["p"]), lambda pool, dev: 15360)
    assert use.amount == want and use.pods == (("p", "uid-p"),)


def test_a_claim_of_no_gpu_of_ours_holds_nothing_and_bad_capacity_says_where():
    assert parse_claim({"metadata": {"name": "x"}, "status": {}}) is None
    assert parse_claim(claim(results=[result(driver="other.example.com")])) is None
    with pytest.raises(HamiFormatError, match="resourceclaim team/c device gpu-0"):
        parse_claim(claim(results=[result(consumed={"memory": "lots"})]))


def test_a_pods_ask_counts_a_percentage_on_the_largest_gpu_it_may_get():
    asks = [ContainerRequest("a", nums=2, mem_mib=3000, cores=10),
            ContainerRequest("b", nums=1, mem_percent=25, cores=5)]
    assert ask_amount(asks, [16000, 40000]) == Amount(3, 16000, 25)


def book():
    view = ClusterView()
    return ClaimBook(view, threading.RLock()), view


def test_a_gated_pod_is_admitted_only_within_the_quota_and_holds_until_its_claim_counts():
    b, view = book()
    limits = {"limits.nvidia.com/gpumem": 4000}
    b.apply_pod("team/a", "uid-a", "team", Amount(1, 3000, 0), 1, gated=True, gone=False)
    assert view.namespace_used("team") == Amount()                 # gated: holds nothing
    assert b.admit("team/a", limits) is None
    assert view.namespace_used("team") == Amount(1, 3000, 0)       # let through: holds its ask
    b.apply_pod("team/b", "uid-b", "team", Amount(1, 2000, 0), 1, gated=True, gone=False)
    assert "used 3000 + asked 2000 > limit 4000 MiB" in b.admit("team/b", limits)
    b.apply_claim("team/a-gpu", parse_claim(claim("a-gpu", [result(consumed={
        "memory": "2000Mi", "cores": "0"})], pods=["a"])))
    assert view.namespace_used("team") == Amount(1, 2000, 0)       # the claim, not the ask
    assert b.waiting("team/a") is None and b.admit("team/b", limits) is None
    b.apply_claim("team/a-gpu", None)
    b.forget("team/a")
    assert view.namespace_used("team") == Amount(1, 2000, 0)       # b's ask only


def test_a_claim_shared_by_two_pods_counts_once_and_a_regate_gives_the_ask_back():
    b, view = book()
    b.apply_claim("team/shared", parse_claim(claim("shared", [result(consumed={
        "memory": "1Gi", "cores": "20"})], pods=["p", "q"])))
    assert view.namespace_used("team") == Amount(1, 1024, 20)
    assert [c.key for c in b.claims()] == ["team/shared"]
    b.apply_pod("team/r", "uid-r", "team", Amount(1, 100, 0), 1, gated=True, gone=False)
    assert b.admit("team/r", {}) is None and b.gated() == []
    b.regate("team/r")
    assert b.gated() == [("team/r", "team")] and view.namespace_used("team") == \
        Amount(1, 1024, 20)
    assert b.reconcile_claims([]) == 1 and view.namespace_used("team") == Amount()


def test_the_gate_is_found_among_other_gates():
    assert gate_index({"spec": {"schedulingGates": [{"name": "x"}, {"name": QUOTA_GATE}]}}) == 1
    assert gate_index({"spec": {}}) == -1


class _NoDraApi:
    """A WatchSource of a cluster that serves no resource.k8s.io/v1 (before 1.34)."""

    def list(self, kind, field_selector=""):
        from hami_control.cluster.api import NotFound
        if kind == "resourceclaims":
            raise NotFound(404, "NotFound", "the server could not find the requested resource")
        return [], "1"

    def watch(self, kind, resource_version, timeout_s, field_selector=""):
        return iter(())

    def close_watches(self):
        pass


def test_the_sync_counts_claims_and_carries_on_without_the_dra_api(caplog):
    from hami_control.cluster.sync import CLAIMS, ClusterSync
    from hami_control.state import make_state
    state = make_state()
    sync = ClusterSync(source=None, state=state, claims=True,
                       whole_mib=lambda pool, device: 15360)
    sync._apply(CLAIMS, "ADDED", claim("w", [result(consumed=None)]))
    sync._apply(CLAIMS, "ADDED", claim("bad", [result(consumed={"memory": "lots"})]))
    assert state.view.namespace_used("team") == Amount(1, 15360, 100)
    assert "counted as holding nothing" in caplog.text
    sync._apply(CLAIMS, "DELETED", claim("w"))
    assert state.view.namespace_used("team") == Amount()

    sync = ClusterSync(_NoDraApi(), make_state(), claims=True, resync_s=60).start()
    try:
        deadline = time.monotonic() + 5
        while not sync.synced and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sync.synced                   # ready all the same, and says why it counts less
        assert "DRA claims are not counted against namespace GPU quotas" in caplog.text
    finally:
        sync.stop()


def test_published_sizes_are_worked_out_once_per_list_and_filters():
    from hami_common.request import DeviceFilters
    from hami_control.claims.published import PublishedGpus

    def device(kind, mib, n):
        return {"name": f"gpu-{n}", "attributes": {"type": {"string": kind},
                                                   "uuid": {"string": f"GPU-{n}"}},
                "capacity": {"memory": {"value": f"{mib}Mi"}}}

    class Api:
        lists = 0
        devices = [device("NVIDIA-Tesla T4", 15360, 0), device("NVIDIA A100", 40960, 1)]

        def list_slices(self, driver):
            Api.lists += 1
            return [{"spec": {"devices": list(Api.devices)}}]

    class Clock:
        now = 0.0

        def monotonic(self):
            return Clock.now

    published = PublishedGpus(Api(), Clock(), ttl_s=30.0)
    t4 = DeviceFilters(use_types=("t4",))
    assert published.sizes(DeviceFilters()) == [15360, 40960]
    assert published.sizes(t4) == [15360] and published.sizes(t4) == [15360]
    assert Api.lists == 1
    Api.devices.append(device("NVIDIA-Tesla T4", 16384, 2))
    assert published.sizes(t4) == [15360]             # the cached list, until it is old
    Clock.now = 31.0
    assert published.sizes(t4) == [15360, 16384] and Api.lists == 2
