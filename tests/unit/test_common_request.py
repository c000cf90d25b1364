"""Pod -> request parsing: HAMi's defaults, and errors a user can act on."""
import pytest

from hami_common.errors import RequestError
from hami_common.quantity import cpu_millis, memory_mib, parse_quantity
from hami_common.request import RequestDefaults, parse_pod


def pod(*containers, annotations=None, init=()):
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
            "spec": {"containers": list(containers), "initContainers": list(init)}}


def ctr(name="c", limits=None, requests=None, **extra):
    return {"name": name, "resources": {"limits": limits or {}, "requests": requests or {}},
            **extra}


def single(limits, defaults=RequestDefaults()):
    (c,) = parse_pod(pod(ctr(limits=limits)), defaults).containers
    return (c.nums, c.mem_mib, c.mem_percent, c.cores)


@pytest.mark.parametrize("limits, defaults, expected", [
    ({"nvidia.com/gpu": 1}, RequestDefaults(), (1, 0, 100, 100)),
    ({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000}, RequestDefaults(), (2, 3000, 0, 0)),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 100}, RequestDefaults(),
     (1, 0, 100, 100)),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 40}, RequestDefaults(),
     (1, 0, 40, 0)),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30}, RequestDefaults(), (1, 0, 100, 30)),
    ({"nvidia.com/gpumem": 2000}, RequestDefaults(), (1, 2000, 0, 0)),
    ({"nvidia.com/gpucores": 20}, RequestDefaults(default_gpu_num=2), (2, 0, 100, 20)),
    ({"nvidia.com/gpu": 1}, RequestDefaults(default_memory=4096), (1, 4096, 0, 100)),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, RequestDefaults(default_cores=10),
     (1, 1000, 0, 10)),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "2Gi"}, RequestDefaults(), (1, 2048, 0, 0)),
    ({}, RequestDefaults(), (0, 0, 0, 0)),
], ids=["bare-gpu-exclusive", "mem-mib", "pct-100-exclusive", "pct-shared", "cores-only",
        "mem-without-count", "cores-default-num", "default-memory", "default-cores",
        "mem-with-unit", "no-gpu"])
def test_defaults(limits, defaults, expected):
    assert single(limits, defaults) == expected


def test_requests_used_when_no_limits():
    (c,) = parse_pod(pod(ctr(requests={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}))
                     ).containers
    assert (c.nums, c.cores) == (1, 50)


@pytest.mark.parametrize("limits, message", [
    ({"nvidia.com/gpu": -1}, "must not be negative"),
    ({"nvidia.com/gpu": "1.5"}, "whole number"),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": "500m"}, "whole number"),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 150}, "between 1 and 100"),
    # 0 was read as "not given": the container got the whole card's memory
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 0}, "between 1 and 100"),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 101}, "between 0 and 100"),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100, "nvidia.com/gpumem-percentage": 10},
     "only one of"),
    ({"nvidia.com/gpu": 0, "nvidia.com/gpumem": 100}, "asks for 0 GPUs"),
    ({"nvidia.com/gpu": "lots"}, "not a number"),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1.5Ki"}, "whole number of MiB"),
], ids=["negative", "fraction", "milli-cores", "pct-over-100", "pct-zero", "cores-over-100",
        "both-mem",
        "zero-count", "garbage", "sub-mib"])
def test_validation_errors(limits, message):
    with pytest.raises(RequestError, match=message):
        parse_pod(pod(ctr(limits=limits)))


def test_containers_init_first_and_gpu_less_kept():
    request = parse_pod(pod(ctr("a", limits={"nvidia.com/gpu": 1}), ctr("b"),
                            init=[ctr("i", limits={"nvidia.com/gpumem": 100}),
                                  ctr("side", limits={"nvidia.com/gpu": 1},
                                      restartPolicy="Always")]))
    assert [(c.name, c.init, c.nums) for c in request.containers] == \
        [("i", True, 1), ("side", False, 1), ("a", False, 1), ("b", False, 0)]
    assert request.wants_gpu


def test_pod_cpu_memory_is_max_of_sum_and_init():
    request = parse_pod(pod(ctr("a", requests={"cpu": "1", "memory": "1Gi"}),
                            ctr("b", limits={"cpu": "500m", "memory": "512Mi"}),
                            init=[ctr("i", requests={"cpu": "4", "memory": "100Mi"})]))
    assert (request.cpu_milli, request.memory_mib) == (4000, 1536)


def test_filters_and_policies_from_annotations():
    request = parse_pod(pod(ctr(limits={"nvidia.com/gpu": 1}), annotations={
        "nvidia.com/use-gputype": "A100, T4", "nvidia.com/nouse-gputype": "MIG",
        "nvidia.com/use-gpuuuid": "GPU-1,GPU-2", "nvidia.com/numa-bind": "true",
        "hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack"}))
    f = request.filters
    assert f.use_types == ("a100", "t4") and f.nouse_types == ("mig",) and f.numa_bind
    assert f.type_ok("NVIDIA-Tesla T4") and not f.type_ok("NVIDIA-V100")
    assert not f.type_ok("NVIDIA A100 MIG")
    assert f.uuid_ok("GPU-1") and not f.uuid_ok("GPU-3")
    assert (request.node_policy, request.gpu_policy) == ("spread", "binpack")


def test_bad_numa_annotation_and_malformed_pod():
    with pytest.raises(RequestError, match="numa-bind"):
        parse_pod(pod(ctr(), annotations={"nvidia.com/numa-bind": "sometimes"}))
    with pytest.raises(RequestError, match="JSON object"):
        parse_pod(["not", "a", "pod"])
    with pytest.raises(RequestError, match="must be an object"):
        parse_pod({"spec": {"containers": ["oops"]}})


def test_signature_ignores_names():
    a = parse_pod(pod(ctr("x", limits={"nvidia.com/gpu": 1})))
    b = parse_pod(pod(ctr("y", limits={"nvidia.com/gpu": 1})))
    assert a.signature == b.signature


@pytest.mark.parametrize("text, value", [("2", 2), ("500m", 0.5), ("1Ki", 1024), ("1e3", 1000),
                                         ("1.5G", 1.5e9), (3, 3)])
def test_quantities(text, value):
    assert float(parse_quantity(text)) == value


def test_cpu_and_memory_units():
    assert cpu_millis("0.0001") == 1 and cpu_millis("2") == 2000
    assert memory_mib("1Gi") == 1024 and memory_mib("1000000") == 1
