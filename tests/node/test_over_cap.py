"""A process that reaches the driver without the shim is caught from outside: hami-node maps
the driver's per-process memory (NVML, host PIDs) to the pod's container by the cgroup the
process runs in (a real cgroup, made here the way kubelet lays them out with cgroupfs), finds
it over its cap and says so with an Event, a metric and a log line."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hami_common import constants as C
from hami_sim.testing import wait_for
from nodehelpers import Scheduler, samples

CGROUP = Path("/sys/fs/cgroup/pids")
HOG = textwrap.dedent('''
    import sys
    from cuda.bindings import driver as cu
    cu.cuInit(0)
    err, dev = cu.cuDeviceGet(0)
    err, ctx = cu.cuCtxCreate(None, 0, dev)
    err, ptr = cu.cuMemAlloc(512 << 20)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    print("holding", flush=True)
    sys.stdin.readline()
''')


@pytest.mark.skipif(os.geteuid() != 0 or not CGROUP.is_dir(),
                    reason="needs root and the cgroup v1 pids hierarchy to place a process")
def test_a_container_process_without_the_shim_is_caught_over_its_cap(node_cluster):
    node, kubelet, sched = node_cluster
    proc = node.start("--over-cap-check-seconds", "0.3")
    uuid = node.uuids()[0]
    sched.create("rogue", [Scheduler.container("main", gpus=0)])
    sched.annotate("rogue", [[(uuid, 256, 0)]])       # what the scheduler gave it: 256 MiB
    sched.bind("rogue")
    wait_for(lambda: sched.v1.read_namespaced_pod("rogue", "default").status.container_statuses,
             what="the container's status")
    pod = sched.v1.read_namespaced_pod("rogue", "default")
    cid = pod.status.container_statuses[0].container_id.rpartition("://")[2]
    cgroup = CGROUP / "kubepods" / "besteffort" / f"pod{pod.metadata.uid}" / cid
    cgroup.mkdir(parents=True)
    hog = subprocess.Popen([sys.executable, "-c", HOG], env=node.env, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        (cgroup / "cgroup.procs").write_text(str(hog.pid))
        assert hog.stdout.readline().strip() == "holding"
        events = wait_for(lambda: [e for e in sched.v1.list_namespaced_event("default").items
                                   if e.involved_object.name == "rogue"
                                   and e.reason == "GPUMemoryOverCap"], timeout=15,
                          what="the GPUMemoryOverCap event")
        assert "over its cap of 256 MiB" in events[0].message and str(hog.pid) in events[0].message
        over = samples(proc.metrics(), "hami_container_memory_over_cap_bytes")
        assert over and over[0][1] >= 256 << 20
        assert "default/rogue" in proc.log()
    finally:
        hog.kill()
        hog.wait()
        for path in (cgroup, cgroup.parent, cgroup.parent.parent, cgroup.parent.parent.parent):
            try:
                path.rmdir()
            except OSError:
                pass
