"""MIG through the real cluster: the node's second A100 served as MIG instances by hami-node's
configuration (HAMI_NODE_MIG_DEVICES, as a DaemonSet's environment sets it), the first
still shared by the shim. A pod with `nvidia.com/vgpu-mode: mig` goes through the real
webhook, kube-scheduler with our extender, kubelet's device manager and containerd: its
instance (the profile its gpumem needs, at a placement) stands in the simulated GPU when its
container starts, which sees `MIG-<uuid>` and the instance's SMs; the instance is destroyed
after the pod; a request no layout can hold stays Pending with our reason; a shim pod runs on
the other A100 meanwhile; instances left when hami-node is SIGKILLed are reclaimed when it
comes back. The module puts the GPU back as it found it (MIG mode off, hami-node without the
setting) for the session's other tests."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from hami_common import constants as C
from hami_common.mig import decode_allocations
from hami_sim.realcluster.node import spawn_agent
from hami_sim.realcluster.scenario import container_log, unschedulable_message

from k8shelpers import create, delete, get, pod, until, wait_phase

pytestmark = pytest.mark.timeout(3600)
MIG_INDEX = 1                   # the node's second A100
MIG_ENV = "HAMI_NODE_MIG_DEVICES"
A100 = {"nvidia.com/use-gputype": "A100"}
MIG = {C.ANNO_VGPU_MODE: "mig"}
PODS = ("mig-a", "mig-big", "shim-a", "mig-b")

# What the container sees (one JSON line), then it holds its context and 256 MiB for `hold`
# seconds.
SEE = """
import json, os, sys, time
from cuda.bindings import driver as cu
def ok(ret):
    assert ret[0] == cu.CUresult.CUDA_SUCCESS, ret[0]
    return ret[1] if len(ret) == 2 else ret[1:]
ok(cu.cuInit(0))
dev = ok(cu.cuDeviceGet(0))
ctx = ok(cu.cuCtxCreate(None, 0, dev))
ok(cu.cuMemAlloc(256 << 20))
sms = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
print(json.dumps({"visible": os.environ.get("NVIDIA_VISIBLE_DEVICES", ""),
                  "count": ok(cu.cuDeviceGetCount()),
                  "name": ok(cu.cuDeviceGetName(64, dev)).split(b"\\0")[0].decode(),
                  "total_mib": ok(cu.cuDeviceTotalMem(dev)) >> 20,
                  "sms": ok(cu.cuDeviceGetAttribute(sms, dev))}), flush=True)
time.sleep(float(sys.argv[1]))
"""

# The node's MIG GPU as NVML on the host answers: its instances, or after `reset` (its
# instances destroyed, MIG mode off) its mode.
NVML = """
import json, sys, pynvml
from hami_node.plugin.mig_nvml import NvmlMig
uuid, what = sys.argv[1], sys.argv[2]
pynvml.nvmlInit()
gpu = pynvml.nvmlDeviceGetHandleByUUID(uuid)
if what == "reset":
    try:
        if pynvml.nvmlDeviceGetMigMode(gpu)[0] == 1:
            for i in NvmlMig().instances(uuid):
                NvmlMig().destroy(uuid, i.gpu_instance_id)
            pynvml.nvmlDeviceSetMigMode(gpu, 0)
    except Exception as e:       # a process still in an instance: asked again
        print(e, file=sys.stderr)
    print(json.dumps(pynvml.nvmlDeviceGetMigMode(gpu)))
elif pynvml.nvmlDeviceGetMigMode(gpu)[0] != 1:
    print("[]")
else:
    print(json.dumps([[i.profile, i.placement.start, i.mig_uuid, i.memory_mb]
                      for i in NvmlMig().instances(uuid)]))
"""


def nvml(c, uuid: str, what: str = "list"):
    """NVML's answer about the MIG GPU, asked on the host (the node's simulated driver)."""
    done = subprocess.run([sys.executable, "-c", NVML, uuid, what], env=c.node.env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def gpu_pod(name: str, gpumem: int, hold: float, **meta) -> dict:
    """A pod asking one GPU with gpumem MiB, running SEE."""
    return pod(name, {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(gpumem)}},
               ["python3", "-c", SEE, str(hold)], **meta)


def seen(c, name: str) -> dict:
    """SEE's line in the pod's log, once there (the pod running or done)."""
    def line():
        text = container_log(c.core_v1, get(c, name), "main")
        return next((json.loads(t) for t in text.splitlines() if t.startswith("{")), None)
    return until(line, 60, f"{name}'s output")


def stop_agent(c, sig=signal.SIGTERM) -> None:
    """hami-node stopped with sig (its process group), if it runs."""
    if c.node.alive():
        os.killpg(c.node.agent.pid, sig)
        c.node.agent.wait(timeout=30)


def start_agent(c, mig_devices: str = "") -> None:
    """hami-node started (again) with HAMI_NODE_MIG_DEVICES=mig_devices in its environment,
    or without it; the other variables as the cluster set them."""
    c.node.env = {k: v for k, v in c.node.env.items() if k != MIG_ENV}
    if mig_devices:
        c.node.env[MIG_ENV] = mig_devices
    spawn_agent(c, c.root / "hami-node.kubeconfig")


def published(c, index: int):
    """The node's GPU of that index as hami-node registered it."""
    return next(d for d in c.gpus()[c.spec.name] if d.index == index)


@pytest.fixture(scope="module")
def mig(real_cluster):
    """The cluster with its second A100 served as MIG: (cluster, the GPU's UUID, its
    profiles by name); the GPU put back as it was afterwards."""
    c = real_cluster
    uuid = published(c, MIG_INDEX).id
    stop_agent(c)
    start_agent(c, str(MIG_INDEX))
    try:
        # (pending while a process of an earlier module's pod still holds the GPU)
        gpu = until(lambda: (d := published(c, MIG_INDEX)).mig_profiles and d, 120,
                    "the MIG GPU's profiles in the node's register annotation")
        assert gpu.mode == "mig" and published(c, 0).mode == C.DEVICE_MODE_HAMI_CORE
        yield c, uuid, {p.name: p for p in gpu.mig_profiles}
    finally:
        delete(c, *PODS)
        until(lambda: not [p for p in c.core_v1.list_namespaced_pod("default").items
                           if p.metadata.name in PODS], 60, "the module's pods gone")
        stop_agent(c)
        until(lambda: nvml(c, uuid, "reset") == [0, 0], 30, "instances destroyed, MIG off")
        start_agent(c)
        until(lambda: published(c, MIG_INDEX).mode == C.DEVICE_MODE_HAMI_CORE, 60,
              "the GPU published for the shim again")


def reservation(c, name: str):
    """The pod's one MIG reservation, as hami-node recorded it."""
    [made] = decode_allocations(get(c, name)["metadata"]["annotations"][C.ANNO_MIG_ALLOCATIONS])
    return made


def test_mig_pod_runs_in_its_instance_beside_a_shim_pod_and_gives_it_back(mig):
    c, uuid, profiles = mig
    one, whole = profiles["1g.5gb"], profiles["7g.40gb"]
    create(c, gpu_pod("mig-a", 3000, 300, annotations=MIG))
    create(c, gpu_pod("shim-a", 2000, 300, annotations=A100))
    for name in ("mig-a", "shim-a"):
        wait_phase(c, name, ("Running",), timeout=90)
    made = reservation(c, "mig-a")
    assert made.realized and (made.gpu_uuid, made.profile) == (uuid, "1g.5gb")
    # the instance stands in the GPU; the container found it when it started
    assert nvml(c, uuid) == [["1g.5gb", made.placement.start, made.mig_uuid, one.memory_mb]]
    inside = seen(c, "mig-a")
    assert inside["visible"] == made.mig_uuid and inside["count"] == 1, inside
    assert inside["name"].endswith("MIG 1g.5gb") and inside["sms"] == 14, inside
    assert inside["total_mib"] == 3000, inside          # its gpumem, within the 4864 MiB
    # mixed modes on one node: the shim pod on the other A100, both running at once
    shim = seen(c, "shim-a")
    assert shim["visible"] == published(c, 0).id and shim["sms"] == 108, shim
    assert shim["total_mib"] == 2000, shim
    assert all(get(c, n)["status"]["phase"] == "Running" for n in ("mig-a", "shim-a"))

    # the whole GPU's profile while the 1g instance stands: no layout holds it
    create(c, gpu_pod("mig-big", whole.memory_mb, 0, annotations=MIG))
    message = until(lambda: unschedulable_message(get(c, "mig-big")), 60,
                    "mig-big refused by kube-scheduler")
    assert "CardMigTopologyInfeasible" in message, message
    events = c.kubectl("get", "events", "--field-selector",
                       "involvedObject.name=mig-big,reason=FailedScheduling", "-o", "json")
    assert any("CardMigTopologyInfeasible" in e["message"]
               for e in json.loads(events)["items"]), events

    # mig-a deleted (--force): its instance destroyed, and the pending pod placed in its room;
    # placed at once, its Allocate may find mig-a's instance still there, its process exiting
    delete(c, "mig-a")
    until(lambda: made.mig_uuid not in json.dumps(nvml(c, uuid)), 30, "mig-a's instance gone")
    done = wait_phase(c, "mig-big", timeout=90)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    big = seen(c, "mig-big")
    assert big["name"].endswith("MIG 7g.40gb") and big["sms"] == 98, big
    assert big["total_mib"] == whole.memory_mb, big       # the instance's memory, all of it
    until(lambda: nvml(c, uuid) == [], 30, "mig-big's instance gone after it ended")
    assert get(c, "shim-a")["status"]["phase"] == "Running"
    delete(c, "shim-a", "mig-big")


def test_instances_left_by_a_killed_hami_node_are_reclaimed_when_it_restarts(mig):
    c, uuid, _ = mig
    create(c, gpu_pod("mig-b", 1000, 300, annotations=MIG))
    wait_phase(c, "mig-b", ("Running",), timeout=90)
    made = reservation(c, "mig-b")
    assert [i[2] for i in nvml(c, uuid)] == [made.mig_uuid]
    stop_agent(c, signal.SIGKILL)
    # the pod goes while no hami-node runs: nothing destroys its instance
    delete(c, "mig-b")
    until(lambda: not [p for p in c.core_v1.list_namespaced_pod("default").items
                       if p.metadata.name == "mig-b"], 60, "mig-b gone")
    assert [i[2] for i in nvml(c, uuid)] == [made.mig_uuid]
    start_agent(c, str(MIG_INDEX))
    until(lambda: nvml(c, uuid) == [], 30, "the orphan destroyed by the restarted hami-node")
