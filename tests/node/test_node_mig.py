"""MIG through hami-node on the simulated GPU: one GPU served as MIG beside a shim GPU, its
profiles published in HAMi's register format, the scheduler's reserved instance made at
Allocate and handed to the container as MIG-<uuid> (the shim's gpumem cap holding inside it),
the instance destroyed once the pod is gone, an orphan left by a killed agent reclaimed (at
start, and at Allocate when it stands in a reservation's way), and a layout that cannot be made
refused with the reason."""
import json
import os
import signal
import subprocess
import sys
import time

from hami_common import constants as C
from hami_common.mig import MigAllocation, MigPlacement, decode_allocations, encode_allocations
from hami_sim.container import start_container

from nodehelpers import Scheduler, samples, wait_for
from test_end_to_end import MIB, PROGRAM

INSTANCES = '''
import json, sys, pynvml
from hami_node.plugin.mig_nvml import NvmlMig
from hami_common.mig import MigPlacement
pynvml.nvmlInit()
uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
mig = NvmlMig()
if len(sys.argv) > 1:
    mig.enable(uuid)
    mig.create(uuid, sys.argv[1], MigPlacement(int(sys.argv[2]), int(sys.argv[3])))
print(json.dumps([[i.profile, i.placement.start, i.mig_uuid] for i in mig.instances(uuid)]))
'''


def instances(node, *create) -> list:
    """[profile, start, MIG UUID] of GPU 0's instances (after making one when asked)."""
    out = subprocess.run([sys.executable, "-c", INSTANCES, *map(str, create)], env=node.env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def schedule_mig(sched, name, uuid, profile, placement, memory, command, instance=(20096, 43)):
    """What a scheduler (HAMi's or ours) writes for a MIG pod: the instance's MiB and core
    share in the devices annotation, the reservation beside it; the container asks `memory`."""
    ctr = Scheduler.container("main", extra_limits={C.RESOURCE_MEM: str(memory)},
                              command=command)
    sched.create(name, [ctr])
    sched.lock(name)
    sched.annotate(name, [[(uuid, *instance)]])
    alloc = MigAllocation(0, 0, uuid, profile, placement)
    sched.v1.patch_namespaced_pod(name, "default", {"metadata": {"annotations": {
        C.ANNO_MIG_ALLOCATIONS: encode_allocations([alloc])}}})
    sched.bind(name)


def test_a_mig_pod_gets_its_instance_and_gives_it_back(node_cluster):
    node, kubelet, sched = node_cluster
    proc = node.start("--mig-devices", "0")
    uuids = node.uuids()
    registered = wait_for(lambda: (r := sched.registered()) and r[0].mig_profiles and r,
                          timeout=10, what="the MIG GPU's profiles in the register annotation")
    assert [d.mode for d in registered] == ["mig", "hami-core"]       # mixed on one node
    names = [p.name for p in registered[0].mig_profiles]
    assert names[:5] == ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    three = registered[0].mig_profiles[2]
    assert three.placements == (MigPlacement(0, 4), MigPlacement(4, 4))

    schedule_mig(sched, "mig-pod", uuids[0], "3g.20gb", MigPlacement(4, 4), 1000,
                 [sys.executable, "-c", PROGRAM])
    [alloc] = kubelet.kubelet.wait_allocated("default", "mig-pod")
    [made] = decode_allocations(sched.pod_annotations("mig-pod")[C.ANNO_MIG_ALLOCATIONS])
    assert made.realized and made.placement == MigPlacement(4, 4)
    assert instances(node) == [["3g.20gb", 4, made.mig_uuid]]
    scrape = proc.metrics()
    assert [v for _, v in samples(scrape, "hami_node_gpu_mig_instances")] == [1.0]
    [(labels, _)] = samples(scrape, "hami_node_gpu_mig_instance_info")
    assert (labels["profile"], labels["placement_start"], labels["mig_uuid"]) == \
        ("3g.20gb", "4", made.mig_uuid)
    # the MIG GPU's memory is still reported (NVML has no utilization for it)
    assert len(samples(scrape, "HostGPUMemoryUsage")) == 2
    container = start_container(alloc, node.env, stdin=-1, stdout=-1, stderr=-1, text=True)
    try:
        line = container.stdout.readline()
        assert line, container.stderr.read()
        # one device, the instance; the shim's 1000 MiB cap holds inside it
        assert json.loads(line) == {"devices": 1, "total": 1000 * MIB, "held": 768,
                                    "error": "CUDA_ERROR_OUT_OF_MEMORY"}
    finally:
        os.killpg(container.pid, signal.SIGKILL)
        container.wait(timeout=10)
        for stream in (container.stdin, container.stdout, container.stderr):
            stream.close()
    sched.delete("mig-pod")
    wait_for(lambda: instances(node) == [], timeout=20, what="the instance destroyed")
    proc.stop()


def test_orphans_are_reclaimed_and_an_impossible_layout_refused(node_cluster):
    node, kubelet, sched = node_cluster
    # an instance no pod records: what a hami-node killed mid-Allocate leaves behind
    orphan = instances(node, "1g.5gb", 6, 1)
    assert [i[:2] for i in orphan] == [["1g.5gb", 6]]
    # no reclaiming round in this test (60 s apart): what happens is hami-node's start and
    # its Allocate
    node.start("--mig-devices", "0", "--annotation-interval", "60")
    wait_for(lambda: instances(node) == [], timeout=20, what="the orphan destroyed")
    uuid = node.uuids()[0]
    # an instance no pod holds in the way of a reservation (another profile, same slices):
    # reclaimed at Allocate
    instances(node, "4g.20gb", 0, 4)
    schedule_mig(sched, "placed", uuid, "3g.20gb", MigPlacement(0, 4), 1000,
                 [sys.executable, "-c", "pass"])
    kubelet.kubelet.wait_allocated("default", "placed")
    [made] = decode_allocations(sched.pod_annotations("placed")[C.ANNO_MIG_ALLOCATIONS])
    assert instances(node) == [["3g.20gb", 0, made.mig_uuid]]
    # slices 0-3 held by that pod's instance: a reservation there cannot be made
    schedule_mig(sched, "blocked", uuid, "4g.20gb", MigPlacement(0, 4), 1000,
                 [sys.executable, "-c", "pass"])
    events = wait_for(lambda: [e.message for e in sched.v1.list_namespaced_event("default").items
                               if "MIG layout cannot be made" in (e.message or "")] or None,
                      timeout=20, what="the refusal")
    assert "cannot create a 4g.20gb instance at slices 0-3" in events[0]
    assert "Insufficient resources" in events[0]
    assert instances(node) == [["3g.20gb", 0, made.mig_uuid]]
    assert sched.pod_annotations("blocked")[C.ANNO_BIND_PHASE] == C.BIND_PHASE_FAILED


HOLD = """
from cuda.bindings import driver as cu
cu.cuInit(0)
_, ctx = cu.cuCtxCreate(None, 0, cu.cuDeviceGet(0)[1])
print("holding", flush=True)
input()
"""


def test_a_deleted_pods_instance_in_the_way_is_reclaimed_at_allocate(node_cluster):
    """The real kubelet never retries a failed Allocate: a pod placed where the instance of
    a pod just deleted (--force: its process still exiting) stands, before the reclaiming
    round (every annotationInterval) comes, gets its instance at its first Allocate."""
    node, kubelet, sched = node_cluster
    node.start("--mig-devices", "0", "--annotation-interval", "60")
    uuid = node.uuids()[0]
    wait_for(lambda: (r := sched.registered()) and r[0].mig_profiles, timeout=10,
             what="the MIG GPU's profiles")
    schedule_mig(sched, "first", uuid, "1g.5gb", MigPlacement(6, 1), 1000,
                 [sys.executable, "-c", HOLD], instance=(1970, 14))
    [alloc] = kubelet.kubelet.wait_allocated("default", "first")
    assert [i[:2] for i in instances(node)] == [["1g.5gb", 6]]
    first = start_container(alloc, node.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert first.stdout.readline() == "holding\n"
        sched.delete("first")
        schedule_mig(sched, "second", uuid, "7g.40gb", MigPlacement(0, 8), 1000,
                     [sys.executable, "-c", "pass"], instance=(16000, 100))
        time.sleep(1.5)                 # Allocate waits for the process meanwhile
        first.stdin.close()             # its container killed: the process exits
        kubelet.kubelet.wait_allocated("default", "second", timeout=15)
    finally:
        first.kill()
        first.wait(timeout=10)
        first.stdout.close()
    assert not [f for f in kubelet.kubelet.failures() if f.pod == "second"]
    [made] = decode_allocations(sched.pod_annotations("second")[C.ANNO_MIG_ALLOCATIONS])
    assert instances(node) == [["7g.40gb", 0, made.mig_uuid]]


def test_a_gpu_held_by_a_process_is_published_as_mig_once_idle(node_cluster):
    """MIG mode stays pending while a process holds the GPU: meanwhile the GPU is published in
    mode "mig" without profiles (no shim slice placed on a GPU about to change under it, no
    instance either), then with its profiles once the process is gone; a GPU `all` names
    that cannot do MIG is served by the shim."""
    node, kubelet, sched = node_cluster
    holder = subprocess.Popen([sys.executable, "-c", HOLD], env=node.env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == "holding\n"
        proc = node.start("--mig-devices", "all")          # the T4 cannot do MIG
        registered = wait_for(lambda: sched.registered(), timeout=10, what="the register")
        assert [(d.mode, d.mig_profiles) for d in registered] == [("mig", ()),
                                                                   ("hami-core", ())]
        assert "MIG mode is pending: a process holds the GPU" in proc.log()
        assert "cannot do MIG; serving it with the shim" in proc.log()
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
        holder.stdout.close()
    wait_for(lambda: sched.registered()[0].mig_profiles, timeout=10,
             what="the profiles published once the GPU is idle")
