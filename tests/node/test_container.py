"""hami_sim.container: a recorded Allocate answer run as a local process, the way a container
runtime would start the container."""
import inspect
import json
import sys

import pytest

from hami_sim.container import (ContainerError, container_command, container_env, host_path,
                                run_container)
from hami_sim.gpu import lib_dir, sim_env
from hami_sim.kubelet.records import ContainerAllocation

PRINT_ENV = ("import json, os; keys = ['LD_PRELOAD', 'CUDA_DEVICE_MEMORY_SHARED_CACHE', "
             "'HAMI_SIM_VISIBLE_DEVICES', 'APP', 'CUDA_DEVICE_MEMORY_LIMIT_0']; "
             "maps = open('/proc/self/maps').read(); "
             "print(json.dumps({'env': {k: os.environ.get(k) for k in keys}, "
             "'preloaded': os.environ.get('LD_PRELOAD', '-') in maps}))")


def allocation(tmp_path, preload_lib="/usr/local/vgpu/libvgpu.so", **extra):
    host = tmp_path / "vgpu"
    (host / "shared").mkdir(parents=True, exist_ok=True)
    (host / "ld.so.preload").write_text(preload_lib + "\n")
    record = ContainerAllocation(
        namespace="default", pod="p", pod_uid="uid-1", container="main", init=False,
        envs={"NVIDIA_VISIBLE_DEVICES": "GPU-aaaa", "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
              "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/shared/vgpu.cache",
              "APP": "from-plugin"},
        mounts=[{"container_path": "/usr/local/vgpu/libvgpu.so",
                 "host_path": str(lib_dir() / "libnvidia-ml.so.1"), "read_only": True},
                {"container_path": "/usr/local/vgpu/shared", "host_path": str(host / "shared"),
                 "read_only": False},
                {"container_path": "/etc/ld.so.preload", "host_path": str(host / "ld.so.preload"),
                 "read_only": True}],
        command=["python3", "-c"], args=["print('from spec')"], spec_env={"APP": "from-spec"})
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_environment_of_the_container(tmp_path):
    alloc = allocation(tmp_path)
    env = container_env(alloc, {"PATH": "/bin", "HAMI_SIM_VISIBLE_DEVICES": "0,1"})
    assert env["PATH"] == "/bin"
    assert env["LD_PRELOAD"] == str(lib_dir() / "libnvidia-ml.so.1")
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == str(tmp_path / "vgpu/shared/vgpu.cache")
    assert env["HAMI_SIM_VISIBLE_DEVICES"] == "GPU-aaaa"
    assert env["APP"] == "from-spec", "the pod spec's env wins over the plugin's, as in kubelet"
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert container_command(alloc) == ["python3", "-c", "print('from spec')"]


@pytest.mark.parametrize("value,expect", [(None, "none"), ("void", "none"), ("", "none"),
                                          ("all", "all"), ("GPU-a,GPU-b", "GPU-a,GPU-b")],
                         ids=["unset", "void", "empty", "all", "list"])
def test_gpu_visibility_mapping(tmp_path, value, expect):
    alloc = allocation(tmp_path)
    alloc.envs = {k: v for k, v in alloc.envs.items() if k != "NVIDIA_VISIBLE_DEVICES"}
    if value is not None:
        alloc.envs["NVIDIA_VISIBLE_DEVICES"] = value
    assert container_env(alloc, {})["HAMI_SIM_VISIBLE_DEVICES"] == expect


def test_deepest_mount_wins():
    mounts = [{"container_path": "/a", "host_path": "/h1"},
              {"container_path": "/a/b", "host_path": "/h2"}]
    assert host_path("/a/b/c", mounts) == "/h2/c"
    assert host_path("/a/x", mounts) == "/h1/x"
    assert host_path("/ab", mounts) is None


def test_runs_with_the_preload_and_a_dumped_answer(tmp_path):
    alloc = allocation(tmp_path)
    dump = tmp_path / "main.json"
    dump.write_text(json.dumps(alloc.to_dict()))
    done = run_container(str(dump), {"PATH": "/usr/bin:/bin"},
                         command=[sys.executable, "-c", PRINT_ENV], timeout=30)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["preloaded"], "the library listed in ld.so.preload is mapped in the process"
    assert out["env"]["APP"] == "from-spec"


def test_unusable_answers_are_refused(tmp_path):
    with pytest.raises(ContainerError, match="which no mount provides"):
        container_env(allocation(tmp_path, preload_lib="/opt/other.so"), {})
    with pytest.raises(ContainerError, match="has no command"):
        container_command(allocation(tmp_path, command=[], args=[]))
    with pytest.raises(ContainerError, match="cannot read the allocation"):
        container_env(str(tmp_path / "absent.json"), {})


@pytest.mark.skipif("visible" not in inspect.signature(sim_env).parameters,
                    reason="the simulator has no HAMI_SIM_VISIBLE_DEVICES yet")
def test_the_container_sees_only_its_gpus(tmp_path):
    env = sim_env(gpus="8g,8g,8g", state_dir=tmp_path / "state", uuid_seed="ctr")
    list_uuids = ("import pynvml as n; n.nvmlInit(); print(','.join(n.nvmlDeviceGetUUID("
                  "n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())))")
    every = run_container(allocation(tmp_path), env, command=[sys.executable, "-c", list_uuids],
                          extra_env={"NVIDIA_VISIBLE_DEVICES": "all", "LD_PRELOAD": ""},
                          timeout=30).stdout.strip().split(",")
    assert len(every) == 3
    alloc = allocation(tmp_path)
    alloc.envs["NVIDIA_VISIBLE_DEVICES"] = every[2]
    alloc.mounts = [m for m in alloc.mounts if m["container_path"] != "/etc/ld.so.preload"]
    done = run_container(alloc, env, command=[sys.executable, "-c", list_uuids], timeout=30)
    assert done.stdout.strip() == every[2], done.stderr
