"""Allocate end to end: the kubelet double admits pods the test scheduled (annotations written
with the hami_common codecs), hami-node answers, and the answer and the annotations are
checked. One hami-node serves the whole module; every test uses its own pods."""
import os
import stat
import threading

import pytest

from hami_common import constants as C
from hami_common import pod_devices
from hami_node.plugin.layout import CONTAINER_CACHE, CONTAINER_LIB, CONTAINER_SHARED_DIR

from nodehelpers import NODE, Scheduler, samples, wait_for


@pytest.fixture
def env(shared_node, gpu_uuids):
    node, kubelet, sched, proc = shared_node
    created = []

    class Env:
        pass
    e = Env()
    e.node, e.kubelet, e.sched, e.proc, e.uuids = node, kubelet.kubelet, sched, proc, gpu_uuids
    e.created = created
    yield e
    sched.delete(*created)
    # Devices of deleted pods return to kubelet's pool at its next sync.
    wait_for(lambda: not any(a.pod in created for a in kubelet.kubelet.allocations()),
             what="deleted pods to release their devices")


def schedule(e, name, devices, containers, **kw):
    e.created.append(name)
    e.sched.schedule(name, devices, containers, **kw)


def test_one_container_gets_env_mounts_and_devices(env):
    uuid = env.uuids[1]
    schedule(env, "one", [[(uuid, 3000, 30)]], [Scheduler.container("main")])
    [alloc] = env.kubelet.wait_allocated("default", "one")
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert alloc.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert alloc.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == CONTAINER_CACHE
    mounts = {m["container_path"]: m for m in alloc.mounts}
    shim = env.node.shim_dir
    assert mounts[CONTAINER_LIB] == {"container_path": CONTAINER_LIB, "read_only": True,
                                     "host_path": str(shim / "libvgpu.so")}
    assert mounts["/etc/ld.so.preload"]["host_path"] == str(shim / "ld.so.preload")
    shared = mounts[CONTAINER_SHARED_DIR]
    assert not shared["read_only"]
    assert stat.S_IMODE(os.stat(shared["host_path"]).st_mode) == 0o777
    assert os.path.basename(shared["host_path"]).endswith("_main")
    paths = [d["container_path"] for d in alloc.devices]
    # /dev/nvidia-uvm* only where the host has them (a missing host path fails the container).
    uvm = {p for p in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if os.path.exists(p)}
    assert set(paths) == {"/dev/nvidiactl", "/dev/nvidia1"} | uvm
    # GetPreferredAllocation steered kubelet to a virtual device of the scheduled GPU.
    assert all(d.startswith(uuid) for d in alloc.devices_by_resource[C.RESOURCE_GPU])
    ann = wait_for(lambda: (a := env.sched.pod_annotations("one"))
                   .get(C.ANNO_BIND_PHASE) == "success" and a, what="bind-phase success")
    assert pod_devices.decode(ann[C.ANNO_DEVICES_TO_ALLOCATE]) == ((),)
    assert C.ANNO_NODE_LOCK not in env.sched.node_annotations()


def test_multi_container_pod_with_init_container(env):
    a100, t4 = env.uuids
    containers = [Scheduler.container("first"), Scheduler.container("no-gpu", gpus=0),
                  Scheduler.container("second", extra_limits={C.RESOURCE_PRIORITY: "1"})]
    init = [Scheduler.container("setup")]
    schedule(env, "multi", [[(t4, 1000, 10)], [(a100, 2000, 20)], [], [(t4, 4000, 40)]],
             containers, init_containers=init)
    allocs = {a.container: a for a in env.kubelet.wait_allocated("default", "multi")}
    assert set(allocs) == {"setup", "first", "second"}
    assert allocs["setup"].envs["NVIDIA_VISIBLE_DEVICES"] == t4
    assert allocs["setup"].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert allocs["first"].envs["NVIDIA_VISIBLE_DEVICES"] == a100
    assert allocs["first"].envs["CUDA_DEVICE_SM_LIMIT"] == "20"
    assert allocs["second"].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"
    assert allocs["second"].envs["CUDA_TASK_PRIORITY"] == "1"
    assert "CUDA_TASK_PRIORITY" not in allocs["first"].envs
    dirs = {a.container: {m["container_path"]: m["host_path"] for m in a.mounts}
            [CONTAINER_SHARED_DIR] for a in allocs.values()}
    assert len(set(dirs.values())) == 3, "each container gets its own shared directory"
    ann = wait_for(lambda: (a := env.sched.pod_annotations("multi"))
                   .get(C.ANNO_BIND_PHASE) == "success" and a, what="bind-phase success")
    assert ann[C.ANNO_DEVICES_TO_ALLOCATE] == ";;;;"


def test_multi_gpu_container(env):
    a100, t4 = env.uuids
    schedule(env, "twogpu", [[(t4, 5000, 50), (a100, 6000, 0)]],
             [Scheduler.container("main", gpus=2)])
    [alloc] = env.kubelet.wait_allocated("default", "twogpu")
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == f"{t4},{a100}"
    assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5000m"
    assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "6000m"
    assert alloc.envs["CUDA_DEVICE_SM_LIMIT_1"] == "0"
    chosen = {d.rsplit("-", 1)[0] for d in alloc.devices_by_resource[C.RESOURCE_GPU]}
    assert chosen == {a100, t4}
    assert {"/dev/nvidia0", "/dev/nvidia1"} <= {d["host_path"] for d in alloc.devices}


def test_disable_control_env_skips_the_preload(env):
    ctr = Scheduler.container("main", env=[{"name": "CUDA_DISABLE_CONTROL", "value": "true"}])
    schedule(env, "nopreload", [[(env.uuids[0], 1000, 0)]], [ctr])
    [alloc] = env.kubelet.wait_allocated("default", "nopreload")
    paths = {m["container_path"] for m in alloc.mounts}
    assert "/etc/ld.so.preload" not in paths and CONTAINER_LIB in paths


def _failure(env, name, contains):
    failure = env.kubelet.wait_failure("default", name)
    assert contains in failure.message, failure.message
    ann = wait_for(lambda: (a := env.sched.pod_annotations(name))
                   .get(C.ANNO_BIND_PHASE) == "failed" and a, what="bind-phase failed")
    assert C.ANNO_NODE_LOCK not in env.sched.node_annotations()
    events = env.sched.v1.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name}").items
    assert any(e.reason == "GPUAllocationFailed" and contains in e.message for e in events)
    return failure, ann


@pytest.mark.parametrize("case", ["count", "malformed", "foreign-gpu", "duplicate-gpu"])
def test_bad_annotations_fail_cleanly(env, case):
    a100, t4 = env.uuids
    raw = None
    containers = [Scheduler.container("main")]
    devices = [[(a100, 1000, 10)]]
    if case == "count":
        containers = [Scheduler.container("main", gpus=2)]
        expect = "device number not matched"
    elif case == "malformed":
        raw = "GPU-zz,NVIDIA,notanumber,1:;"
        expect = "is malformed"
    elif case == "foreign-gpu":
        devices = [[("GPU-00000000-0000-0000-0000-000000000000", 1000, 10)]]
        expect = "is not advertised by this node"
    else:
        containers = [Scheduler.container("main", gpus=2)]
        devices = [[(a100, 1000, 10), (a100, 1000, 10)]]
        expect = "twice"
    name = f"bad-{case}"
    schedule(env, name, devices, containers, raw=raw)
    before = pod_devices.encode([[pod_devices.ContainerDevice(u, m, c) for u, m, c in ctr]
                                 for ctr in devices]) if raw is None else raw
    _, ann = _failure(env, name, expect)
    assert ann[C.ANNO_DEVICES_TO_ALLOCATE] == before, "nothing consumed on failure"
    assert "delete the pod" in env.kubelet.wait_failure("default", name).message


def test_no_such_pod(env):
    # A pod asking for GPUs bound without the scheduler's annotations (another scheduler).
    env.created.append("stray")
    env.sched.create("stray", [Scheduler.container("main")])
    env.sched.bind("stray")
    failure = env.kubelet.wait_failure("default", "stray")
    assert "no pod on node node-1 is waiting for GPUs" in failure.message
    assert C.SCHEDULER_NAME in failure.message


def test_stale_lock_of_a_deleted_pod_is_released(env):
    env.sched.create("gone", [Scheduler.container("main")])
    env.sched.lock("gone")
    env.sched.delete("gone")
    wait_for(lambda: C.ANNO_NODE_LOCK not in env.sched.node_annotations(), timeout=5,
             what="the periodic check to release the lock of a deleted pod")


def _decided(env, name):
    """A pod with the scheduler's decision (1000 MiB, 10 % of the first GPU) and the node lock,
    not bound yet; returns the GPU's UUID."""
    uuid = env.uuids[0]
    env.sched.create(name, [Scheduler.container("main")])
    env.created.append(name)
    env.sched.lock(name)
    env.sched.annotate(name, [[(uuid, 1000, 10)]])
    return uuid


def test_api_error_while_recording_leaves_no_half_state(env, shared_node):
    node = shared_node[0]
    uuid = _decided(env, "apierr")
    # The next patch of this pod (hami-node consuming the entry) is refused (a 500 is now a
    # "try again" that Allocate retries itself: see the next test).
    node.apiserver.set_faults(rules=[{"code": 403, "verbs": ["patch"], "resources": ["pods"],
                                      "name": "apierr", "times": 1}])
    env.sched.bind("apierr")
    failure, ann = _failure(env, "apierr", "recording the allocation failed")
    assert ann[C.ANNO_DEVICES_TO_ALLOCATE] == f"{uuid},NVIDIA,1000,10:;"
    uid = env.sched.v1.read_namespaced_pod("apierr", "default").metadata.uid
    assert not (node.shim_dir / "containers" / f"{uid}_main").exists()
    node.apiserver.clear_faults()


def test_an_api_hiccup_during_allocate_is_absorbed(env, shared_node):
    node = shared_node[0]
    _decided(env, "hiccup")
    # Real kubelet would fail the pod for good on an Allocate error: hami-node retries inside.
    node.apiserver.set_faults(rules=[{"code": 503, "verbs": ["patch"], "resources": ["pods"],
                                      "name": "hiccup", "times": 2}])
    try:
        env.sched.bind("hiccup")
        [alloc] = env.kubelet.wait_allocated("default", "hiccup")
        assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
        ann = wait_for(lambda: (a := env.sched.pod_annotations("hiccup"))
                       .get(C.ANNO_BIND_PHASE) == "success" and a, what="bind-phase success")
        assert ann[C.ANNO_DEVICES_TO_ALLOCATE] == ";"
    finally:
        node.apiserver.clear_faults()


def test_two_pods_racing_on_one_node(env):
    a100, t4 = env.uuids
    plans = {"race-a": [[(a100, 1111, 11)]], "race-b": [[(t4, 2222, 22)]],
             "race-c": [[(a100, 3333, 33)]]}
    for name in plans:
        env.created.append(name)
        env.sched.create(name, [Scheduler.container("main")])

    def scheduler(name):
        # Each scheduling attempt waits for the node lock; hami-node releases it as soon as
        # the previous pod's Allocate is done.
        env.sched.acquire_lock(name)
        env.sched.schedule(name, plans[name], lock=False)
    threads = [threading.Thread(target=scheduler, args=(n,)) for n in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, [[(uuid, mem, _)]] in plans.items():
        [alloc] = env.kubelet.wait_allocated("default", name)
        assert (alloc.envs["NVIDIA_VISIBLE_DEVICES"],
                alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (uuid, f"{mem}m"), name
        wait_for(lambda: env.sched.pod_annotations(name).get(C.ANNO_BIND_PHASE) == "success",
                 what=f"{name} success")
    assert C.ANNO_NODE_LOCK not in env.sched.node_annotations()


def test_metrics_report_gpus_health_and_container_limits(env):
    schedule(env, "metered", [[(env.uuids[0], 1234, 10)]], [Scheduler.container("main")])
    env.kubelet.wait_allocated("default", "metered")
    text = env.proc.metrics()
    host = {"nodeid": NODE, "deviceidx": "0", "deviceuuid": env.uuids[0],
            "devicetype": "NVIDIA A100-SXM4-40GB"}
    assert [labels for labels, _ in samples(text, "HostGPUMemoryUsage")
            if labels["deviceidx"] == "0"] == [host]
    assert len(samples(text, "HostCoreUtilization")) == 2
    ctr = {"podnamespace": "default", "podname": "metered", "ctrname": "main",
           "vdeviceid": "0", "deviceuuid": env.uuids[0]}
    assert (ctr, 1234 * 2**20) in samples(text, "vGPU_device_memory_limit_in_bytes")
    health = {labels["deviceuuid"]: value for labels, value in
              samples(text, "hami_node_gpu_healthy")}
    assert health == {env.uuids[0]: 1, env.uuids[1]: 1}
    assert samples(text, "hami_node_allocations_total")
    assert samples(text, "hami_node_up") == [({}, 1.0)]
