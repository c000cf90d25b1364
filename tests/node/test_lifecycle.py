"""hami-node's life cycle as a real process: registration and the device list, the node
annotation, kubelet restarts, its own restarts (also between the scheduler's decision and
Allocate), GPU health from XIDs, systemd notifications."""
import os
import socket
import subprocess
import sys
import time

from hami_common import constants as C
from hami_common.quantity import parse_quantity
from hami_common.deviceplugin import HEALTHY, UNHEALTHY
from hami_sim.launch import short_tempdir

from nodehelpers import GPUS, SPLIT, Scheduler, samples, wait_for


def _inject_xid(node, index, xid):
    subprocess.run([sys.executable, "-m", "hami_sim.cli", "inject-xid", str(index), str(xid)],
                   env=node.env, check=True, capture_output=True, timeout=30)


def _health(kubelet, uuid):
    devices = kubelet.resources()[C.RESOURCE_GPU]["devices"]
    return {h for vid, h in devices.items() if vid.startswith(uuid + "-")}


def test_registration_device_list_and_annotation(node_cluster):
    node, kubelet, sched = node_cluster
    notify = short_tempdir("hami-t-") / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.settimeout(10)
    try:
        proc = node.start("--device-memory-scaling", "1.5", "--device-core-scaling", "2",
                          env={"NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": "400000"})
        info = kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=2 * SPLIT, timeout=10)
        messages = [listener.recv(4096).decode() for _ in range(3)]
    finally:
        listener.close()
    assert messages[0].startswith("READY=1")
    assert "WATCHDOG=1" in messages[1:]
    uuids = node.uuids()
    assert sorted(info["devices"]) == sorted(f"{u}-{n}" for u in uuids for n in range(SPLIT))
    assert set(info["devices"].values()) == {HEALTHY}
    assert info["get_preferred_allocation_available"] and not info["pre_start_required"]
    assert proc.socket.endswith("hami-nvidia.com-gpu.sock")
    devices = wait_for(sched.registered, what="the register annotation")
    assert [(d.id, d.index, d.count, d.devmem, d.devcore, d.type, d.health) for d in devices] == [
        (uuids[0], 0, SPLIT, int(16384 * 1.5), 200, "NVIDIA A100-SXM4-40GB", True),
        (uuids[1], 1, SPLIT, int(15360 * 1.5), 200, "NVIDIA-Tesla T4", True)]
    status = sched.v1.read_node(node.name).status
    assert status.capacity[C.RESOURCE_GPU] == str(2 * SPLIT)
    # what kubectl shows of GPU memory and cores: the register annotation's sums
    want = {C.RESOURCE_MEM: int(16384 * 1.5) + int(15360 * 1.5), C.RESOURCE_CORES: 400}
    for section in ("capacity", "allocatable"):
        def shown():
            values = getattr(sched.v1.read_node(node.name).status, section) or {}
            return {k: int(parse_quantity(values[k])) for k in want if k in values}
        assert wait_for(lambda: len(shown()) == len(want) and shown(),
                        what=f"node status {section}") == want, section


def test_annotation_is_patched_only_when_it_changes(node_cluster):
    node, kubelet, sched = node_cluster
    proc = node.start()
    wait_for(sched.registered, what="the register annotation")

    def patches():
        return samples(proc.metrics(), "hami_node_annotation_patches_total")[0][1]
    time.sleep(1.6)   # three more refresh periods of 0.5 s
    assert patches() == 2.0       # the register annotation, the GPU memory and cores capacity
    # The handshake is the scheduler's alone (HAMi's one-write scheme; the agent answered it
    # before, costing a Node update per request): the agent leaves it as it is.
    request = "Requesting_2026-01-01 00:00:00"
    sched.v1.patch_node(node.name, {"metadata": {"annotations": {C.ANNO_NODE_HANDSHAKE: request}}})
    time.sleep(1.2)   # two more refresh periods
    assert sched.node_annotations()[C.ANNO_NODE_HANDSHAKE] == request
    assert patches() == 2.0


def test_kubelet_restart_is_followed_within_two_seconds(node_cluster):
    node, kubelet, sched = node_cluster
    node.start()
    kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=2 * SPLIT, timeout=10)
    before = kubelet.kubelet.registrations
    for _ in range(2):
        started = time.monotonic()
        kubelet.restart()
        wait_for(lambda: kubelet.kubelet.registrations > before, timeout=2.0,
                 what="re-registration after the kubelet restart", interval=0.01)
        assert time.monotonic() - started < 2.0
        kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=2 * SPLIT, timeout=2)
        before = kubelet.kubelet.registrations


def test_agent_restarted_between_filter_and_allocate(node_cluster):
    node, kubelet, sched = node_cluster
    first = node.start()
    kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=2 * SPLIT, timeout=10)
    uuid = node.uuids()[1]
    sched.create("survivor", [Scheduler.container("main")])
    sched.lock("survivor")
    sched.annotate("survivor", [[(uuid, 2048, 25)]])   # the scheduler decided...
    first.kill()                                        # ...the agent crashes...
    sched.bind("survivor")                              # ...the pod is bound meanwhile.
    kubelet.kubelet.wait_failure("default", "survivor")  # no plugin: kubelet keeps retrying
    node.start()                                        # the agent comes back
    [alloc] = kubelet.kubelet.wait_allocated("default", "survivor", timeout=10)
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"
    wait_for(lambda: sched.pod_annotations("survivor").get(C.ANNO_BIND_PHASE) == "success",
             what="bind-phase success")
    assert C.ANNO_NODE_LOCK not in sched.node_annotations()


def test_xid_makes_a_gpu_unhealthy_then_healthy_again(node_cluster):
    node, kubelet, sched = node_cluster
    proc = node.start("--ignored-xids", "13,43")
    kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=2 * SPLIT, timeout=10)
    wait_for(sched.registered, what="the register annotation")
    bad, good = node.uuids()
    _inject_xid(node, 0, 43)    # in the ignored list
    _inject_xid(node, 0, 79)    # GPU fallen off the bus: critical
    injected = time.monotonic()
    # The event wakes hami-node at once (typically well under 1 s); the bound allows a loaded
    # 2-core machine and still tells an event from the 30 s annotation refresh.
    wait_for(lambda: _health(kubelet.kubelet, bad) == {UNHEALTHY}, timeout=5.0, interval=0.01,
             what="GPU 0's virtual devices to turn Unhealthy within 5 s")
    assert time.monotonic() - injected < 5.0
    assert _health(kubelet.kubelet, good) == {HEALTHY}
    wait_for(lambda: [d.health for d in sched.registered()] == [False, True],
             what="health false in the annotation")
    status = sched.v1.read_node(node.name).status
    assert status.allocatable[C.RESOURCE_GPU] == str(SPLIT)
    # Quiet for 1.5 s (--health-recovery-seconds) and NVML answers: Healthy again.
    wait_for(lambda: _health(kubelet.kubelet, bad) == {HEALTHY}, timeout=10,
             what="GPU 0 to recover")
    assert time.monotonic() - injected >= 1.5
    wait_for(lambda: [d.health for d in sched.registered()] == [True, True],
             what="health true in the annotation")
    log = proc.log()
    assert "XID 43 ignored" in log and "critical XID 79" in log
    assert 'xid="79"' in proc.metrics()


def test_excluded_devices_are_not_advertised(node_cluster):
    node, kubelet, sched = node_cluster
    uuids = node.uuids()
    proc = node.start("--exclude-devices", f"{uuids[1]},7")
    info = kubelet.kubelet.wait_registered(C.RESOURCE_GPU, devices=SPLIT, timeout=10)
    assert all(d.startswith(uuids[0]) for d in info["devices"])
    assert [d.id for d in wait_for(sched.registered, what="annotation")] == [uuids[0]]
    assert "excludeDevices entry '7' matches no GPU" in proc.log()


def test_sigterm_stops_cleanly_and_removes_the_socket(node_cluster):
    node, kubelet, sched = node_cluster
    proc = node.start()
    assert os.path.exists(proc.socket)
    assert proc.stop() == 0
    assert not os.path.exists(proc.socket)
    assert len(GPUS.split(",")) == 2
