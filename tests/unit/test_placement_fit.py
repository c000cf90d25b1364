"""Per-device checks in HAMi's order, reasons as HAMi counts them, multi-GPU/container pods."""
from collections import Counter

import pytest

from hami_control.placement import reasons as R
from hami_control.placement.fit import device_reason, fit_pod
from hami_control.placement.model import Device, Node
from hami_control.placement.policy import Binpack, Spread
from hami_control.placement.reasons import format_reason, summarize
from hami_common.request import parse_pod

from _placement_fixtures import gpu, pod_dict, request


def device(used=0, usedmem=0, usedcores=0, **kwargs):
    dev = Device(gpu("GPU-x", **kwargs))
    dev.used, dev.usedmem, dev.usedcores = used, usedmem, usedcores
    return dev


@pytest.mark.parametrize("dev, req, reason", [
    (device(health=False), request(mem=100), R.CARD_NOT_HEALTH),
    (device(type_="NVIDIA-A100"), request(mem=100, annotations={
        "nvidia.com/use-gputype": "t4"}), R.CARD_TYPE_MISMATCH),
    (device(), request(mem=100, annotations={"nvidia.com/nouse-gpuuuid": "GPU-x"}),
     R.CARD_UUID_MISMATCH),
    (device(used=2, count=2), request(mem=100), R.CARD_TIME_SLICING_EXHAUSTED),
    (device(usedmem=15000), request(mem=2000), R.CARD_INSUFFICIENT_MEMORY),
    (device(usedmem=8000), request(pct=60, cores=10), R.CARD_INSUFFICIENT_MEMORY),
    (device(usedcores=80), request(mem=100, cores=30), R.CARD_INSUFFICIENT_CORE),
    (device(used=1, usedmem=100), request(gpus=1, cores=100, mem=100), R.EXCLUSIVE_CONFLICT),
    (device(used=1, usedmem=16000, usedcores=100), request(mem=0, gpus=1),
     R.CARD_INSUFFICIENT_MEMORY),
    (device(used=1, usedmem=1000, usedcores=100), request(mem=100), R.CARD_COMPUTE_EXHAUSTED),
    (device(used=1, usedmem=1000, usedcores=40), request(mem=100, cores=60), None),
], ids=["unhealthy", "type", "uuid", "slots", "memory", "memory-pct", "cores", "exclusive-needs-"
        "unused", "exclusive-card-full", "cores-zero-on-full-card", "fits"])
def test_device_checks(dev, req, reason):
    (ctr,) = req.containers
    assert device_reason(dev, ctr, req.filters) == reason


def test_cordoned_device_is_refused_first_after_health():
    dev = Device(gpu("GPU-c"), cordoned=True)
    req = request(mem=100)
    assert device_reason(dev, req.containers[0], req.filters) == R.CARD_CORDONED


def node(*devices):
    return Node("n", [Device(d) for d in devices])


def test_reason_text_counts_devices_like_hami():
    n = node(*[gpu(f"GPU-{i}", type_="NVIDIA-A100" if i < 6 else "NVIDIA-T4", index=i)
               for i in range(8)])
    for dev in n.devices[6:]:
        dev.usedmem = 15000
    plan, why = fit_pod(n, request(mem=4000, annotations={"nvidia.com/use-gputype": "T4"}),
                        Binpack())
    assert plan is None
    assert why == "6/8 CardTypeMismatch, 2/8 CardInsufficientMemory"


def test_format_and_summary():
    assert format_reason(Counter({"CardInsufficientMemory": 2, R.NODE_INSUFFICIENT_CPU: 1}), 8) \
        == "2/8 CardInsufficientMemory, Insufficient cpu"
    assert summarize({"a": "2/8 CardInsufficientMemory", "b": "Insufficient cpu"}, 3) == \
        "0/3 nodes are available: 1 CardInsufficientMemory, 1 Insufficient cpu"


def test_multi_gpu_container_takes_distinct_gpus_or_says_how_many_fit():
    n = node(gpu("GPU-0", index=0), gpu("GPU-1", index=1), gpu("GPU-2", index=2))
    plan, _ = fit_pod(n, request(gpus=3, mem=1000), Spread())
    assert sorted(plan[0]) == [0, 1, 2]
    n.devices[0].usedmem = 16000
    plan, why = fit_pod(n, request(gpus=3, mem=1000), Spread())
    assert plan is None
    assert why == "2/3 AllocatedCardsInsufficientRequest, 1/3 CardInsufficientMemory"
    plan, why = fit_pod(n, request(gpus=4, mem=1), Spread())
    assert why == R.NODE_NO_DEVICES


def test_numa_bind_keeps_a_container_on_one_numa_node():
    n = node(gpu("GPU-0", numa=0, index=0), gpu("GPU-1", numa=0, index=1),
             gpu("GPU-2", numa=1, index=2), gpu("GPU-3", numa=1, index=3))
    bind = {"nvidia.com/numa-bind": "true"}
    plan, _ = fit_pod(n, request(gpus=2, mem=100, annotations=bind), Spread())
    assert {n.devices[p].numa for p in plan[0]} == {0}
    plan, why = fit_pod(n, request(gpus=3, mem=100, annotations=bind), Spread())
    assert plan is None and "NumaNotFit" in why
    plan, _ = fit_pod(n, request(gpus=3, mem=100), Spread())
    assert len(set(plan[0])) == 3


def test_binpack_and_spread_pick_gpus_by_load():
    n = node(gpu("GPU-0", index=0), gpu("GPU-1", index=1), gpu("GPU-2", index=2))
    n.devices[1].used, n.devices[1].usedmem, n.devices[1].usedcores = 1, 8000, 50
    req = request(mem=1000, cores=10)
    assert fit_pod(n, req, Binpack())[0] == ((1,),)
    assert fit_pod(n, req, Spread())[0] == ((0,),)


def test_two_containers_share_a_gpu_within_its_capacity():
    containers = [{"name": f"c{i}", "resources": {"limits": {
        "nvidia.com/gpu": 1, "nvidia.com/gpumem": 9000, "nvidia.com/gpucores": 40}}}
        for i in range(2)]
    req = parse_pod(pod_dict(containers=containers))
    one = node(gpu("GPU-0"))
    plan, why = fit_pod(one, req, Binpack())
    assert plan is None and why == "1/1 CardInsufficientMemory"
    two = node(gpu("GPU-0", index=0), gpu("GPU-1", index=1))
    plan, _ = fit_pod(two, req, Binpack())
    assert sorted(p for ctr in plan for p in ctr) == [0, 1]


def test_init_container_reuses_what_the_pod_holds_but_not_more():
    init = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 1,
                                                      "nvidia.com/gpumem": 6000,
                                                      "nvidia.com/gpucores": 30}}}]
    main = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1,
                                                      "nvidia.com/gpumem": 8000,
                                                      "nvidia.com/gpucores": 50}}}]
    req = parse_pod(pod_dict(containers=main, init=init))
    one = node(gpu("GPU-0"))
    one.devices[0].usedmem, one.devices[0].usedcores, one.devices[0].used = 8000, 50, 1
    plan, why = fit_pod(one, req, Binpack())
    assert plan == ((0,), (0,))        # the init container runs inside the main one's share
    big_init = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 1,
                                                          "nvidia.com/gpumem": 9000}}}]
    plan, why = fit_pod(one, parse_pod(pod_dict(containers=main, init=big_init)), Binpack())
    assert plan is None and why == "1/1 CardInsufficientMemory"
