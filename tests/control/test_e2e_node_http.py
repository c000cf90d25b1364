"""End to end with the real node agent: the webhook, hami-control's filter and bind, kubelet's
Allocate answered by a `hami-node` process on simulated GPUs, which sets bind-phase and
releases the node lock hami-control took."""
import subprocess
import sys

import pytest

from ctlhelpers import create, eventually, read_pod, schedule, start_plane
from hami_common import constants as C
from hami_node.shim import lib_path
from hami_sim.gpu import sim_env
from hami_sim.launch import read_first_line, stop_process

GPUS = "16g/108/NVIDIA A100-SXM4-40GB,15g/40/Tesla T4"


@pytest.fixture
def hami_node(kubelet, apiserver, tmp_path):
    """hami-node for node-1 (the kubelet fixture's node) on two simulated GPUs."""
    shim = tmp_path / "vgpu"
    subprocess.run([sys.executable, "-m", "hami_node.plugin.cli", "install-shim", "--source",
                    str(lib_path()), "--shim-host-dir", str(shim)], check=True,
                   capture_output=True, timeout=60)
    env = sim_env(gpus=GPUS, state_dir=tmp_path / "gpu-state", uuid_seed="node-1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hami_node.plugin.cli", "--node-name", "node-1",
         "--device-plugin-dir", str(kubelet.plugin_dir), "--kubeconfig",
         str(apiserver.kubeconfig), "--shim-host-dir", str(shim), "--metrics-address",
         "127.0.0.1:0", "--device-split-count", "4", "--annotation-interval", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
        start_new_session=True)
    try:
        line = read_first_line(proc, 30)
        assert line.startswith("ready "), f"hami-node did not start: {line!r}"
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
