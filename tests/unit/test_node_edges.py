"""hami-node's edges with small fakes: the health rules, the Allocate transaction and lock
rules against an in-memory cluster, systemd notifications, and that every implementation
satisfies its Protocol."""
import socket
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hami_common import constants as C
from hami_common import node_lock, pod_devices
from hami_common.pod_devices import ContainerDevice
from hami_node.plugin.allocate import Limits
from hami_node.plugin.allocator import Allocator
from hami_node.plugin.backend import DeviceBackend, Gpu, GpuUsage, XidEvent, XidWatch
from hami_node.plugin.cluster import ClusterApi, KubeCluster
from hami_node.plugin.devices import DeviceTable
from hami_node.plugin.errors import AllocationError, BackendError, ClusterError
from hami_node.plugin.health import HealthMonitor
from hami_node.plugin.layout import HostLayout, prepare_container
from hami_node.plugin.metrics import ContainerUse, DeviceUse, NodeCollector
from hami_node.plugin.nvml import NvmlBackend, NvmlXidWatch
from hami_node.plugin.sdnotify import Notifier

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
GPUS = [Gpu(A, 0, "A100", 40960), Gpu(B, 1, "T4", 15360, minor=1)]
NODE = "n1"


# Health ---------------------------------------------------------------------------------

class FakeBackend:
    """Probes answer unless the UUID is in `dead`."""

    def __init__(self):
        self.dead = set()

    def discover(self):
        return list(GPUS)

    def probe(self, uuid):
        return "NVML does not answer" if uuid in self.dead else None

    def watch_xids(self, uuids):
        raise NotImplementedError

    def usage(self):
        return [GpuUsage(g.uuid, g.index, g.name, 5 << 20, 10 << 20, 42) for g in GPUS]

    def process_utilization(self, uuid):
        return {11: 20, 12: 13, 99: 50} if uuid == B else {}

    def process_memory(self, uuid):
        return {11: 3 << 20} if uuid == B else {}

    def versions(self):
        return "550.54.15", "12.4"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def monitor(ignored=(13, 43), recovery=5.0):
    backend, clock, table = FakeBackend(), Clock(), DeviceTable(GPUS, 2)
    seen = []
    mon = HealthMonitor(backend, table, ignored, recovery, clock=clock, log=lambda m: None,
                        on_xid=lambda e, critical: seen.append((e.xid, critical)))
    return mon, backend, clock, table, seen


def test_critical_xid_then_recovery_after_quiet_time():
    mon, backend, clock, table, seen = monitor()
    mon.handle_event(XidEvent(A, 79))
    assert not table.get(A).healthy and table.get(A).reason == "critical XID 79"
    assert table.get(B).healthy
    clock.now += 4.9
    mon.check()
    assert not table.get(A).healthy, "not quiet long enough"
    mon.handle_event(XidEvent(A, 48))       # a new error restarts the quiet time
    clock.now += 4.9
    mon.check()
    assert not table.get(A).healthy
    clock.now += 0.2
    mon.check()
    assert table.get(A).healthy
    assert seen == [(79, True), (48, True)]


def test_ignored_xids_are_configurable_and_unattributed_events_hit_every_gpu():
    mon, _, _, table, seen = monitor(ignored=(79,))
    mon.handle_event(XidEvent(A, 79))
    assert table.get(A).healthy and seen == [(79, False)]
    mon.handle_event(XidEvent("", 31))
    assert not table.get(A).healthy and not table.get(B).healthy


def test_unknown_health_is_unhealthy_and_recovery_needs_nvml():
    mon, backend, clock, table, _ = monitor(recovery=1.0)
    backend.dead.add(B)
    mon.check()
    assert not table.get(B).healthy and "NVML" in table.get(B).reason
    clock.now += 10
    mon.check()
    assert not table.get(B).healthy, "still not answering: stays unhealthy"
    backend.dead.clear()
    clock.now += 0.5
    mon.check()
    assert not table.get(B).healthy, "answering, but not yet quiet for 1 s since the last probe"
    clock.now += 0.6
    mon.check()
    assert table.get(B).healthy


class BrokenWatch:
    unsupported = frozenset()

    def wait(self, timeout_s):
        raise BackendError("waiting for NVML events failed: GPU is lost")

    def close(self):
        pass


@pytest.mark.parametrize("failure", ["no-event-set", "wait-fails"])
def test_monitor_thread_degrades_without_events(failure):
    backend, table, logs = FakeBackend(), DeviceTable(GPUS, 2), []
    if failure == "no-event-set":
        backend.watch_xids = lambda uuids: (_ for _ in ()).throw(BackendError("not supported"))
        backend.dead.add(B)
    else:
        backend.watch_xids = lambda uuids: BrokenWatch()
    ticks = iter(range(0, 10**6, 10))
    mon = HealthMonitor(backend, table, (), 1e9, clock=lambda: next(ticks),
                        log=logs.append).start()
    try:
        expect = {B} if failure == "no-event-set" else {A, B}
        deadline = time.monotonic() + 5
        while {s.gpu.uuid for s in table.states() if not s.healthy} != expect:
            assert time.monotonic() < deadline, logs
            time.sleep(0.01)
    finally:
        mon.stop()
    assert not mon.alive()
    if failure == "no-event-set":
        assert sum("cannot watch XID events" in line for line in logs) == 1


# Allocate transaction -------------------------------------------------------------------

class FakeCluster:
    """Pods and one node in memory, with resourceVersions and injectable failures."""

    def __init__(self):
        self.node = {"kind": "Node", "metadata": {"name": NODE, "annotations": {},
                                                  "resourceVersion": "1"}}
        self.pods = {}
        self.rv = 1
        self.fail_patch = []     # statuses the next pod patches answer
        self.fail_reads = []     # statuses the next node reads answer
        self.events, self.evicted = [], []

    def _bump(self, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _patch(self, obj, annotations, rv):
        if rv and rv != obj["metadata"]["resourceVersion"]:
            raise ClusterError("conflict", 409)
        ann = obj["metadata"].setdefault("annotations", {})
        for k, v in annotations.items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = v
        self._bump(obj)
        return obj

    def get_node(self, name):
        if self.fail_reads:
            raise ClusterError("injected", self.fail_reads.pop(0))
        return self.node

    def patch_node_annotations(self, name, annotations, resource_version=None):
        return self._patch(self.node, annotations, resource_version)

    def patch_node_status(self, name, status):
        for section, values in status.items():
            self.node.setdefault("status", {}).setdefault(section, {}).update(values)
        self._bump(self.node)
        return self.node

    def get_pod(self, namespace, name):
        return self.pods.get((namespace, name))

    def list_node_pods(self, node):
        return [p for p in self.pods.values() if p["spec"].get("nodeName") == node]

    def patch_pod_annotations(self, namespace, name, annotations, resource_version=None):
        if self.fail_patch:
            raise ClusterError("injected", self.fail_patch.pop(0))
        return self._patch(self.pods[(namespace, name)], annotations, resource_version)

    def create_event(self, obj, reason, message, warning=True):
        self.events.append((reason, message))

    def evict_pod(self, namespace, name):
        self.evicted.append((namespace, name))

    def add_pod(self, name, devices, bind_time=0, phase=C.BIND_PHASE_ALLOCATING):
        value = pod_devices.encode([[ContainerDevice(*d) for d in ctr] for ctr in devices])
        self.pods[("default", name)] = {
            "kind": "Pod",
            "metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {C.ANNO_DEVICES_TO_ALLOCATE: value,
                                         C.ANNO_BIND_PHASE: phase, C.ANNO_VGPU_NODE: NODE,
                                         C.ANNO_BIND_TIME: str(bind_time)}},
            "spec": {"nodeName": NODE, "containers": [{"name": f"c{i}"}
                                                      for i in range(len(devices))]},
            "status": {"phase": "Pending"}}

    def lock(self, name, age_s=0.0):
        when = datetime.now(timezone.utc) - timedelta(seconds=age_s)
        self.node["metadata"]["annotations"][C.ANNO_NODE_LOCK] = node_lock.encode(
            node_lock.NodeLock(when, "default", name))

    def ann(self, name):
        return self.pods[("default", name)]["metadata"]["annotations"]


@pytest.fixture
def alloc_env():
    root = Path(tempfile.mkdtemp())
    layout = HostLayout(root)
    layout.containers.mkdir()
    layout.lib.write_bytes(b"\x7fELF")
    layout.preload.write_text("/usr/local/vgpu/libvgpu.so\n")
    cluster = FakeCluster()
    allocator = Allocator(cluster, DeviceTable(GPUS, 2), NODE, Limits(split=2), layout,
                          log=lambda m: None, retry_budget_s=1.0, sleep=lambda s: None)
    return cluster, allocator, layout


def test_lock_owner_first_then_oldest_bind_time(alloc_env):
    cluster, allocator, _ = alloc_env
    cluster.add_pod("old", [[(A, 1, 1)]], bind_time=10)
    cluster.add_pod("new", [[(B, 2, 2)]], bind_time=20)
    assert allocator.find_pod([1])["metadata"]["name"] == "old"
    cluster.lock("new")
    assert allocator.find_pod([1])["metadata"]["name"] == "new"
    # A candidate whose next entry fits kubelet's count is preferred.
    cluster.add_pod("pair", [[(A, 1, 1), (B, 1, 1)]], bind_time=30)
    assert allocator.find_pod([2])["metadata"]["name"] == "pair"


def test_a_request_no_waiting_pod_matches_takes_nobody_elses_entries(alloc_env):
    cluster, allocator, _ = alloc_env
    cluster.add_pod("ours", [[(A, 1, 1)]])
    before = dict(cluster.ann("ours"))
    # kubelet starts a pod the default scheduler bound (nvidia.com/gpu: 2, no decision).
    cluster.pods[("default", "stranded")] = {
        "metadata": {"namespace": "default", "name": "stranded", "annotations": {}},
        "spec": {"nodeName": NODE, "containers": [
            {"name": "main", "resources": {"limits": {C.RESOURCE_GPU: "2"}}}]},
        "status": {"phase": "Pending"}}
    with pytest.raises(AllocationError, match=r"\(default/ours\).*default/stranded asks"):
        allocator.allocate([[f"{A}-0", f"{B}-0"]])
    assert cluster.ann("ours") == before and not cluster.events


def test_success_consumes_marks_and_releases(alloc_env):
    cluster, allocator, layout = alloc_env
    cluster.add_pod("p", [[(A, 100, 10)], [(B, 200, 20)]])
    cluster.lock("p")
    [first] = allocator.allocate([[f"{A}-0"]])
    assert first.container == "c0" and cluster.ann("p")[C.ANNO_BIND_PHASE] == "allocating"
    assert C.ANNO_NODE_LOCK in cluster.node["metadata"]["annotations"], "pod not complete yet"
    [second] = allocator.allocate([[f"{B}-1"]])
    assert second.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "200m"
    assert cluster.ann("p")[C.ANNO_BIND_PHASE] == "success"
    assert cluster.ann("p")[C.ANNO_DEVICES_TO_ALLOCATE] == ";;"
    assert C.ANNO_NODE_LOCK not in cluster.node["metadata"]["annotations"]
    assert layout.container_meta("uid-p", "c1").exists()


def test_conflict_retries_then_succeeds(alloc_env):
    cluster, allocator, _ = alloc_env
    cluster.add_pod("p", [[(A, 100, 10)]])
    cluster.fail_patch = [409, 409]
    allocator.allocate([[f"{A}-0"]])
    assert cluster.ann("p")[C.ANNO_BIND_PHASE] == "success"


def test_failure_leaves_no_half_state(alloc_env):
    cluster, allocator, layout = alloc_env
    cluster.add_pod("p", [[(A, 100, 10)]])
    cluster.lock("p")
    cluster.fail_patch = [403]      # a refusal, not a "try again" (those are retried)
    with pytest.raises(AllocationError, match="recording the allocation failed"):
        allocator.allocate([[f"{A}-0"]])
    assert cluster.ann("p")[C.ANNO_BIND_PHASE] == "failed"
    assert cluster.ann("p")[C.ANNO_DEVICES_TO_ALLOCATE] == f"{A},NVIDIA,100,10:;"
    assert not layout.container_dir("uid-p", "c0").exists()
    assert not layout.container_meta("uid-p", "c0").exists()
    assert C.ANNO_NODE_LOCK not in cluster.node["metadata"]["annotations"]
    assert cluster.events[0][0] == "GPUAllocationFailed"


def test_missing_shim_fails_with_the_fix(alloc_env):
    cluster, allocator, layout = alloc_env
    layout.lib.unlink()
    cluster.add_pod("p", [[(A, 100, 10)]])
    with pytest.raises(AllocationError, match="hami-node install-shim"):
        allocator.allocate([[f"{A}-0"]])
    assert cluster.ann("p")[C.ANNO_BIND_PHASE] == "failed"


@pytest.mark.parametrize("owner,phase,pod_phase,age,released", [
    ("gone", None, None, 0, True),
    ("p", C.BIND_PHASE_SUCCESS, "Pending", 60, True),
    ("p", C.BIND_PHASE_FAILED, "Pending", 1, False),      # too young: the scheduler may bind
    ("p", C.BIND_PHASE_ALLOCATING, "Pending", 60, False),  # still waiting for kubelet
    # kubelet failed it at admission while we could not reach the API to release the lock
    ("p", C.BIND_PHASE_ALLOCATING, "Failed", 1, True),
], ids=["owner-deleted", "owner-done", "young-lock", "owner-waiting", "owner-failed"])
def test_stale_lock_rules(alloc_env, owner, phase, pod_phase, age, released):
    cluster, allocator, _ = alloc_env
    if phase:
        cluster.add_pod("p", [[(A, 1, 1)]], phase=phase)
        cluster.pods[("default", "p")]["status"]["phase"] = pod_phase
    cluster.lock(owner, age_s=age)
    assert allocator.release_stale_lock() is released
    assert (C.ANNO_NODE_LOCK not in cluster.node["metadata"]["annotations"]) is released


def test_preferred_steers_without_side_effects(alloc_env):
    cluster, allocator, _ = alloc_env
    cluster.add_pod("p", [[(B, 1, 1)]])
    before = dict(cluster.ann("p"))
    assert allocator.preferred([([f"{A}-0", f"{A}-1", f"{B}-1"], [], 1)]) == [[f"{B}-1"]]
    assert cluster.ann("p") == before


# Metrics ----------------------------------------------------------------------------------

def test_collector_renders_hami_metric_names(tmp_path):
    layout = HostLayout(tmp_path)
    prepare_container(layout, "u1", "main", {
        "namespace": "ns", "pod": "p", "uid": "u1", "container": "main",
        "devices": [{"uuid": B, "memory_mib": 100, "cores": 10},
                    {"uuid": A, "memory_mib": 200, "cores": 0}]})
    use = ContainerUse({B: DeviceUse(used=7 << 20, limit=100 << 20, pids=(11, 12),
                                     context=1 << 20, module=2, data=3)}, last_kernel=95.0)
    collector = NodeCollector(NODE, FakeBackend(), DeviceTable(GPUS, 2), layout,
                              reader=lambda path: use if path.parent.name == "u1_main" else None,
                              clock=lambda: 100.0)
    got = {(f.name, tuple(sorted(s.labels.items())), s.value) for f in collector.collect()
           for s in f.samples}
    ctr = (("ctrname", "main"), ("deviceuuid", B), ("podname", "p"), ("podnamespace", "ns"),
           ("vdeviceid", "0"))
    assert ("vGPU_device_memory_usage_in_bytes", ctr, 7 << 20) in got
    assert ("vGPU_device_memory_limit_in_bytes", ctr, 100 << 20) in got
    assert ("Device_utilization_desc_of_container", ctr, 33) in got, "11's 20% + 12's 13%"
    assert ("Device_last_kernel_of_container", ctr, 5.0) in got
    desc = [s for s in got if s[0] == "Device_memory_desc_of_container"]
    assert [dict(d[1])["context"] for d in desc] == [str(1 << 20)]
    second = (("ctrname", "main"), ("deviceuuid", A), ("podname", "p"), ("podnamespace", "ns"),
              ("vdeviceid", "1"))
    assert ("vGPU_device_memory_limit_in_bytes", second, 200 << 20) in got, \
        "the Allocate limit when the file has no record yet"
    host = (("deviceidx", "1"), ("devicetype", "NVIDIA-T4"), ("deviceuuid", B), ("nodeid", NODE))
    assert ("HostGPUMemoryUsage", host, 5 << 20) in got
    assert ("HostCoreUtilization", host, 42) in got


def test_container_utilization_prefers_the_limiters_own_measurement(tmp_path):
    """A limited container reports the share its shim measured: no pid mapping, no NVML."""
    layout = HostLayout(tmp_path)
    prepare_container(layout, "u1", "main", {
        "namespace": "ns", "pod": "p", "uid": "u1", "container": "main",
        "devices": [{"uuid": B, "memory_mib": 100, "cores": 30}]})
    use = ContainerUse({B: DeviceUse(used=1 << 20, limit=100 << 20, pids=(11, 12),
                                     sm_share=29.5)}, last_kernel=0.0)
    collector = NodeCollector(NODE, FakeBackend(), DeviceTable(GPUS, 2), layout,
                              reader=lambda path: use, clock=lambda: 100.0)
    util = [s.value for f in collector.collect() for s in f.samples
            if f.name == "Device_utilization_desc_of_container"]
    assert util == [29.5]


# systemd notify --------------------------------------------------------------------------

def test_notifier_sends_datagrams_and_honours_watchdog_pid(tmp_path):
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
        assert n.watchdog_s == 2.0
        assert n.ready("serving") and n.watchdog()
        assert sock.recv(100) == b"READY=1\nSTATUS=serving"
        assert sock.recv(100) == b"WATCHDOG=1"
    other = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "5", "WATCHDOG_PID": "1"})
    assert other.watchdog_s == 0.0
    assert not Notifier({}).ready() and not Notifier({}).enabled


# Protocol conformance ---------------------------------------------------------------------

def test_implementations_satisfy_their_protocols():
    assert isinstance(NvmlBackend(nvml=object()), DeviceBackend)
    assert isinstance(FakeBackend(), DeviceBackend)
    watch = NvmlXidWatch.__new__(NvmlXidWatch)
    watch.unsupported = frozenset()
    assert isinstance(watch, XidWatch)
    assert isinstance(KubeCluster.__new__(KubeCluster), ClusterApi)
    assert isinstance(FakeCluster(), ClusterApi)


def test_a_short_api_hiccup_is_retried_inside_allocate(alloc_env):
    cluster, allocator, _ = alloc_env
    cluster.add_pod("p", [[(A, 100, 10)]])
    cluster.fail_reads, cluster.fail_patch = [503, 403], [500]   # any failed read is retried
    allocator.allocate([[f"{A}-0"]])
    assert cluster.ann("p")[C.ANNO_BIND_PHASE] == "success" and not cluster.events


@pytest.mark.parametrize("where", ["lookup", "commit"])
def test_an_api_outage_past_the_budget_fails_the_pod_with_a_true_message(alloc_env, where):
    cluster, allocator, _ = alloc_env
    cluster.add_pod("p", [[(A, 100, 10)]])
    slept = []
    allocator.sleep = lambda s: (slept.append(s), time.sleep(s / 20))
    outage = [503] * 1000
    if where == "lookup":
        cluster.fail_reads = outage
    else:
        cluster.fail_patch = outage
    started = time.monotonic()
    with pytest.raises(AllocationError) as info:
        allocator.allocate([[f"{A}-0"]])
    message = str(info.value)
    assert "UnexpectedAdmissionError" in message and "will retry" not in message
    assert slept and slept[:3] == [0.2, 0.4, 0.8] and time.monotonic() - started < 5
    # Nothing half-written (marking the pod failed fails too while the API is down); a known
    # pod gets the Warning Event, which goes through the events API.
    assert cluster.ann("p")[C.ANNO_BIND_PHASE] == "allocating"
    assert cluster.ann("p")[C.ANNO_DEVICES_TO_ALLOCATE] == f"{A},NVIDIA,100,10:;"
    assert [e[0] for e in cluster.events] == (["GPUAllocationFailed"] if where == "commit"
                                              else [])
def test_publisher_restores_zeroed_gpu_capacity_at_once_when_poked():
    """kubelet that lost its device checkpoint zeroes every extended resource's capacity; the
    re-registration pokes the publisher, which puts gpumem/gpucores back within a second
    although its interval is long."""
    from hami_node.plugin.publisher import NodePublisher
    cluster = FakeCluster()
    publisher = NodePublisher(cluster, DeviceTable(GPUS, 2), NODE, 1.0, 1.0, 300.0,
                              log=lambda _m: None).start()
    try:
        want = {C.RESOURCE_MEM: str(40960 + 15360), C.RESOURCE_CORES: "200"}
        wait_until = time.monotonic() + 5
        while cluster.node.get("status", {}).get("allocatable") != want:
            assert time.monotonic() < wait_until, cluster.node
            time.sleep(0.02)
        cluster.patch_node_status(NODE, {"capacity": dict.fromkeys(want, "0"),
                                         "allocatable": dict.fromkeys(want, "0")})
        publisher.poke()
        time.sleep(1.0)
        assert cluster.node["status"]["capacity"] == want
        assert cluster.node["status"]["allocatable"] == want
    finally:
        publisher.stop()
