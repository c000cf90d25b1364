"""The fragmentation-aware policy: what it learns and what it prefers."""
from hami_common.pod_devices import ContainerDevice
from hami_control.placement import Engine, PlacementConfig, Reservation
from hami_control.placement.learn import OnlineWorkload
from hami_control.placement.workload import PodClass, Workload, typical_classes

from _placement_fixtures import gpu, request, view_of

FRAGAWARE = PlacementConfig(resource_fit=True)


def trained(*requests) -> Engine:
    engine = Engine(FRAGAWARE)
    for req in requests:
        engine.registry.observe(req)
    engine.registry.learner.refresh()
    return engine


def test_learner_replaces_its_estimate_only_when_the_workload_changes():
    learner = OnlineWorkload(first_refresh=4, max_interval=8)
    for i in range(12):                     # refresh points at 4 and 12 pods
        learner.observe(request(name=f"a{i}", pct=50, cores=50, cpu="1"))
    assert learner.version == 1             # the second estimate equals the first: kept
    assert [(cls.share, p) for cls, p in learner.current.classes] == [(500, 1.0)]
    for i in range(12):                     # refresh points at 20 and 28 pods
        learner.observe(request(name=f"b{i}", pct=20, cores=20, cpu="2"))
    assert learner.version >= 2
    shares = {cls.share: p for cls, p in learner.current.classes}
    assert set(shares) == {500, 200} and learner.current.cpu_per_milli > 0
    learner.refresh(force=False)
    assert learner.refresh(force=False) is False and learner.refresh() is True


def test_typical_classes_cover_the_popularity_share():
    a = PodClass(1, 500, 1000, 0, request().filters)
    b = PodClass(1, 1000, 1000, 0, request().filters)
    c = PodClass(0, 0, 2000, 0, request().filters)
    kept = typical_classes({a: 90, b: 6, c: 4}, 0.95)
    assert [cls for cls, _ in kept] == [a, b]
    assert abs(sum(p for _, p in kept) - 1) < 1e-9


def test_unconstrained_pods_keep_off_gpus_that_constrained_pods_need():
    view = view_of({"t4": [gpu("GPU-t4", type_="NVIDIA-T4")],
                    "g2": [gpu("GPU-g2", type_="NVIDIA-G2")]}, cpu=64000, mem=65536)
    t4_only = {"nvidia.com/use-gputype": "T4"}
    engine = trained(*[request(name=f"t{i}", annotations=t4_only) for i in range(5)],
                     *[request(name=f"u{i}") for i in range(5)])
    assert engine.place(view, request(name="any")).node == "g2"


def test_cpu_hungry_pods_keep_off_nodes_whose_gpus_they_would_strand():
    view = view_of({"lean": [gpu("GPU-l0"), gpu("GPU-l1", index=1)]}, cpu=8000, mem=65536)
    view.upsert_node("rich", [gpu("GPU-r0"), gpu("GPU-r1", index=1)], 64000, 65536)
    engine = trained(*[request(name=f"g{i}", cpu="4") for i in range(8)])
    cpu_only = request(name="batch", gpus=None, cpu="6")
    assert engine.place(view, cpu_only).node == "rich"


def test_a_slice_goes_where_it_leaves_no_fragment():
    view = view_of({"n": [gpu("GPU-0"), gpu("GPU-1", index=1)]})
    view.reserve(Reservation("t/old", "n", ((ContainerDevice("GPU-0", 9600, 60),),)))
    engine = trained(*[request(name=f"s{i}", pct=40, cores=40) for i in range(4)],
                     *[request(name=f"w{i}") for i in range(4)])
    decision = engine.place(view, request(name="slice", pct=40, cores=40))
    assert decision.devices[0][0].uuid == "GPU-0"       # the whole GPU stays whole


def test_fragmentation_measure_counts_what_a_class_cannot_use():
    small = PodClass(1, 300, 0, 0, request().filters)
    whole = PodClass(1, 1000, 0, 0, request().filters)
    workload = Workload([(small, 0.5), (whole, 0.5)])
    items = (("nvidia-t4", 200), ("nvidia-t4", 1000))
    # small: the 200 left on GPU 0 is too small; whole: GPU 1 fits, GPU 0 is lost
    assert workload.frag(items, float("inf")) == 0.5 * 200 + 0.5 * 200
    assert workload.frag((("nvidia-t4", 200),), float("inf")) == 0.5 * 200 + 0.5 * 200


def test_classes_weigh_more_when_few_nodes_can_ever_host_them():
    from hami_control.placement.fragaware import FragAware
    from hami_control.placement.learn import WorkloadEstimate
    view = view_of({"t4": [gpu("GPU-t", type_="NVIDIA-T4")]}, cpu=8000, mem=65536)
    view.upsert_node("big", [gpu(f"GPU-b{i}", type_="NVIDIA-G2", index=i) for i in range(3)],
                     128000, 65536)
    anywhere = PodClass(1, 1000, 1000, 0, request().filters)
    t4_only = PodClass(1, 1000, 1000, 0, request(annotations={
        "nvidia.com/use-gputype": "T4"}).filters)
    cpu_hungry = PodClass(1, 500, 64000, 0, request().filters)
    nowhere = PodClass(4, 1000, 1000, 0, request().filters)
    estimate = WorkloadEstimate([(anywhere, 0.25), (t4_only, 0.25), (cpu_hungry, 0.25),
                                 (nowhere, 0.25)], 0.0, 0.0, 1)
    weights = dict(FragAware._weighted(estimate, view).classes)
    assert weights[anywhere] == 0.25
    assert weights[t4_only] == 0.25 * 4 / 1          # 1 of the 4 GPUs is a T4
    assert weights[cpu_hungry] == 0.25 * 4 / 3       # only the 128-core node has the CPU
    assert weights[nowhere] == 0.25                  # fits no node: plain frequency
