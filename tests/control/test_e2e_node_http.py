"""End to end with the real node agent: the webhook, hami-control's filter and bind, kubelet's
Allocate answered by a `hami-node` process on simulated GPUs, which sets bind-phase and
releases the node lock hami-control took; a MIG pod's instance made at Allocate, seen by the
container as one device of the instance's memory under its own cap, and destroyed after."""
import json
import subprocess
import sys

import pytest

from ctlhelpers import create, eventually, read_pod, schedule, start_plane
from hami_common import constants as C
from hami_node.shim import lib_path
from hami_common.mig import decode_allocations
from hami_sim.container import run_container
from hami_sim.gpu import sim_env
from hami_sim.launch import read_first_line, stop_process

GPUS = "16g/108/NVIDIA A100-SXM4-40GB,15g/40/Tesla T4"


@pytest.fixture(params=[()], ids=["shim"])
def hami_node(request, kubelet, apiserver, tmp_path):
    """hami-node for node-1 (the kubelet fixture's node) on two simulated GPUs (extra
    arguments as the fixture's param)."""
    shim = tmp_path / "vgpu"
    subprocess.run([sys.executable, "-m", "hami_node.plugin.cli", "install-shim", "--source",
                    str(lib_path()), "--shim-host-dir", str(shim)], check=True,
                   capture_output=True, timeout=60)
    env = sim_env(gpus=GPUS, state_dir=tmp_path / "gpu-state", uuid_seed="node-1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hami_node.plugin.cli", "--node-name", "node-1",
         "--device-plugin-dir", str(kubelet.plugin_dir), "--kubeconfig",
         str(apiserver.kubeconfig), "--shim-host-dir", str(shim), "--metrics-address",
         "127.0.0.1:0", "--device-split-count", "4", "--annotation-interval", "0.5",
         *request.param],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
        start_new_session=True)
    try:
        line = read_first_line(proc, 30)
        assert line.startswith("ready "), f"hami-node did not start: {line!r}"
        proc.env = env
        yield proc
    finally:
        stop_process(proc)


def test_pods_run_through_hami_node(core_v1, apiserver, kubelet, hami_node):
    control = start_plane(apiserver)
    try:
        eventually(lambda: control.plane.state.node_names() == ["node-1"], timeout=15)
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "1000"}
        for name in ("first", "second"):
            pod = create(core_v1, control, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                         "resources": {"limits": limits}}]}})
            node, result, bound = schedule(core_v1, control, pod, finish=False)
            assert node == "node-1", (result, bound)
            [alloc] = kubelet.kubelet.wait_allocated("default", name, timeout=15)
            annotations = eventually(lambda: (read_pod(core_v1, name)["metadata"][
                "annotations"] if read_pod(core_v1, name)["metadata"]["annotations"].get(
                    C.ANNO_BIND_PHASE) == C.BIND_PHASE_SUCCESS else None), timeout=10)
            uuid = annotations[C.ANNO_DEVICES_ALLOCATED].split(",")[0]
            assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
            assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
            eventually(lambda: not (core_v1.read_node("node-1").metadata.annotations or {})
                       .get(C.ANNO_NODE_LOCK), timeout=10)     # the agent released the lock
    finally:
        control.stop()


SEE = """
from cuda.bindings import driver as cu
import json
cu.cuInit(0)
_, n = cu.cuDeviceGetCount()
_, dev = cu.cuDeviceGet(0)
_, total = cu.cuDeviceTotalMem(dev)
_, name = cu.cuDeviceGetName(64, dev)
print(json.dumps({"devices": n, "total_mib": total >> 20, "name": name.split(b"\\0")[0].decode()}))
"""

INSTANCES = """
import json, pynvml
from hami_node.plugin.mig_nvml import NvmlMig
pynvml.nvmlInit()
uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
print(json.dumps([[i.profile, i.placement.start] for i in NvmlMig().instances(uuid)]))
"""


def _mig_pod(name, memory):
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {C.ANNO_VGPU_MODE: "mig"}},
            "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                     "resources": {"limits": limits}}]}}


@pytest.mark.parametrize("hami_node", [("--mig-devices", "0")], ids=["mig"], indirect=True)
def test_a_mig_pod_runs_in_its_instance_end_to_end(core_v1, apiserver, kubelet, hami_node):
    control = start_plane(apiserver)

    def instances():
        out = subprocess.run([sys.executable, "-c", INSTANCES], env=hami_node.env, text=True,
                             capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    try:
        eventually(lambda: control.plane.state.node_names() == ["node-1"] and any(
            d.profiles for d in control.plane.state.view.node("node-1").devices), timeout=15)
        # the simulated A100 has 16 GiB: its profiles' memory is scaled to it (1g.5gb: 1970 MiB)
        one = next(p for p in control.plane.state.view.node("node-1").devices[0].profiles
                   if p.name == "1g.5gb")
        pod = create(core_v1, control, _mig_pod("inst", 1500))
        node, result, bound = schedule(core_v1, control, pod, finish=False)
        assert node == "node-1", (result, bound)
        [alloc] = kubelet.kubelet.wait_allocated("default", "inst", timeout=15)
        annotations = eventually(lambda: (a := read_pod(core_v1, "inst")["metadata"][
            "annotations"]).get(C.ANNO_BIND_PHASE) == C.BIND_PHASE_SUCCESS and a, timeout=10)
        [made] = decode_allocations(annotations[C.ANNO_MIG_ALLOCATIONS])
        assert made.realized and made.profile == "1g.5gb"
        assert annotations[C.ANNO_DEVICES_ALLOCATED].split(",")[2:4] == \
            [str(one.memory_mb), f"{one.core}:;"]
        assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == made.mig_uuid
        assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1500m"
        assert instances() == [["1g.5gb", made.placement.start]]
        out = run_container(alloc, hami_node.env, [sys.executable, "-c", SEE], timeout=60)
        assert out.returncode == 0, out.stderr
        seen = json.loads(out.stdout)
        assert seen["devices"] == 1 and seen["total_mib"] == 1500      # the cap, in the instance
        # 6000 MiB needs half the GPU, which the 1g instance leaves; 12000 MiB does not fit
        big = create(core_v1, control, _mig_pod("big", 6000))
        assert schedule(core_v1, control, big, finish=False)[0] == "node-1"
        kubelet.kubelet.wait_allocated("default", "big", timeout=15)
        huge = create(core_v1, control, _mig_pod("huge", 12000))
        node, result, _ = schedule(core_v1, control, huge, finish=False)
        assert node is None and "CardMigTopologyInfeasible" in result["FailedNodes"]["node-1"]
        core_v1.delete_namespaced_pod("inst", "default", grace_period_seconds=0)
        core_v1.delete_namespaced_pod("big", "default", grace_period_seconds=0)
        eventually(lambda: instances() == [], timeout=30)
    finally:
        control.stop()
