"""hami-node's pure parts: configuration resolution, the Allocate answer, preferred devices,
virtual device IDs and the register entries."""
import pytest

from hami_common import pod_devices
from hami_common.pod_devices import ContainerDevice
from hami_node.plugin import config as cfg
from hami_node.plugin.allocate import (Limits, check_devices, consumed, decode_entries,
                                       next_positions, plan_container, preferred_devices)
from hami_node.plugin.backend import Gpu
from hami_node.plugin.devices import (DeviceTable, parse_virtual_id, register_entries,
                                      select_gpus, virtual_ids)
from hami_node.plugin.errors import AllocationError, ConfigError
from hami_node.plugin.layout import HostLayout

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
GPUS = [Gpu(A, 0, "NVIDIA A100-SXM4-40GB", 40960, numa=0, minor=0),
        Gpu(B, 1, "Tesla T4", 15360, numa=1, minor=3)]
LIMITS = Limits(split=4)


def table():
    return DeviceTable(GPUS, 4)


def pod(entries, containers=("main",), init=(), **ann):
    value = pod_devices.encode([[ContainerDevice(*d) for d in e] for e in entries])
    return {"metadata": {"namespace": "default", "name": "p", "uid": "u1",
                         "annotations": {"hami.io/vgpu-devices-to-allocate": value, **ann}},
            "spec": {"initContainers": [{"name": n} for n in init],
                     "containers": [{"name": n} for n in containers]}}


# Configuration --------------------------------------------------------------------------

def resolve(flags=None, environ=None, data=None):
    flags = dict(flags or {})
    if data is not None:
        flags["config"] = "cfg.yaml"
    return cfg.resolve(flags, environ or {"NODE_NAME": "n1"}, reader=lambda path: data or {})


def test_defaults():
    c = resolve()
    assert (c.node_name, c.resource_name, c.device_split_count, c.device_plugin_dir,
            c.shim_host_dir, c.ignored_xids) == ("n1", "nvidia.com/gpu", 10,
                                                 "/var/lib/kubelet/device-plugins",
                                                 "/usr/local/vgpu", (13, 31, 43, 45, 68, 109))


def test_layers_in_order():
    data = {"deviceSplitCount": 2, "defaultCores": 1,
            "nodeConfig": [{"name": "n1", "defaultCores": 2, "deviceSplitCount": 3}]}
    assert resolve(data=data).default_cores == 2
    assert resolve(data=data, environ={"NODE_NAME": "n1", "HAMI_NODE_DEVICE_SPLIT_COUNT": "4"}
                   ).device_split_count == 4
    assert resolve({"device_split_count": "5"}, data=data).device_split_count == 5
    assert resolve({"node_name": "n2"}, data=data).device_split_count == 2


def test_node_name_from_the_file_selects_its_override():
    data = {"nodeName": "n3", "nodeConfig": [{"name": "n3", "deviceSplitCount": 7}]}
    assert cfg.resolve({"config": "x"}, {}, reader=lambda p: data).device_split_count == 7


@pytest.mark.parametrize("flags,key", [
    ({"device_split_count": "x"}, "deviceSplitCount"),
    ({"device_core_scaling": "0"}, "deviceCoreScaling"),
    ({"default_cores": "101"}, "defaultCores"),
    ({"ignored_xids": "13,x"}, "ignoredXids"),
    ({"resource_name": "kubernetes.io/gpu"}, "resourceName"),
    ({"annotation_interval": "-1"}, "annotationInterval"),
    ({"cdi_kind": "gpu"}, "cdiKind"),
], ids=["int", "scaling", "cores", "xids", "reserved-domain", "interval", "cdi-kind"])
def test_invalid_values_name_the_key(flags, key):
    with pytest.raises(ConfigError) as info:
        resolve(flags)
    assert info.value.key == key and str(info.value).startswith(key)


def test_every_key_has_a_field_flag_and_env():
    for key in cfg.KEYS:
        assert key.flag.startswith("--") and key.env_name.startswith("HAMI_NODE_")
        assert getattr(cfg.NodeConfig(), key.field) == key.default


# Devices ----------------------------------------------------------------------------------

def test_virtual_ids_round_trip():
    ids = virtual_ids(A, 3)
    assert ids == [f"{A}-0", f"{A}-1", f"{A}-2"]
    assert [parse_virtual_id(i) for i in ids] == [(A, 0), (A, 1), (A, 2)]
    assert all(len(i) <= 63 for i in virtual_ids(A, 1000))
    with pytest.raises(ValueError):
        parse_virtual_id("nodash")


def test_select_gpus_by_uuid_and_index():
    kept, unmatched = select_gpus(GPUS, [B, "0", "9"])
    assert kept == [] and unmatched == ["9"]
    assert select_gpus(GPUS, ["1"])[0] == [GPUS[0]]


def test_register_entries_follow_scaling_and_health():
    t = table()
    t.mark(B, False, "critical XID 79", 1.0)
    entries = register_entries(t.states(), 4, 1.5, 2.0)
    assert [(e.devmem, e.devcore, e.type, e.numa, e.health) for e in entries] == [
        (61440, 200, "NVIDIA A100-SXM4-40GB", 0, True), (23040, 200, "NVIDIA-Tesla T4", 1, False)]


def test_table_version_changes_only_on_health_changes():
    t = table()
    assert not t.mark(A, True)
    assert t.mark(A, False, "x", 1.0) and t.version == 1
    assert not t.mark(A, False, "y", 2.0) and t.get(A).last_bad == 2.0


# Allocate ---------------------------------------------------------------------------------

def test_plan_for_a_two_gpu_container(tmp_path):
    layout = HostLayout(tmp_path)
    spec = {"name": "main", "resources": {"limits": {"nvidia.com/priority": "2"}}}
    answer = plan_container([f"{B}-0", f"{A}-3"], [ContainerDevice(B, 3000, 30),
                                                   ContainerDevice(A, 0, 0)],
                            spec, "u1", table(), Limits(split=4, memory_scaling=2.0,
                                                        default_cores=5,
                                                        disable_core_limit=True), layout)
    assert answer.envs == {
        "NVIDIA_VISIBLE_DEVICES": f"{B},{A}", "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": f"{40960 * 2}m", "CUDA_DEVICE_SM_LIMIT_0": "30",
        "CUDA_DEVICE_SM_LIMIT_1": "5", "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/shared/vgpu.cache",
        "CUDA_OVERSUBSCRIBE": "true", "GPU_CORE_UTILIZATION_POLICY": "disable",
        "CUDA_TASK_PRIORITY": "2"}
    assert [(m.container_path, m.host_path, m.read_only) for m in answer.mounts] == [
        ("/usr/local/vgpu/libvgpu.so", str(tmp_path / "libvgpu.so"), True),
        ("/usr/local/vgpu/shared", str(tmp_path / "containers" / "u1_main"), False),
        ("/etc/ld.so.preload", str(tmp_path / "ld.so.preload"), True)]
    assert [d.host_path for d in answer.devices] == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3",
        "/dev/nvidia0"]
    assert answer.limits == ((B, 3000, 30), (A, 81920, 5))
    assert answer.warnings == ()
    # passDeviceSpecs false: the device nodes are left to the toolkit (real containerd refuses
    # a container whose device node does not exist); mounts and environment unchanged.
    from hami_node.plugin.service import container_response
    assert len(container_response(answer).devices) == 5
    without = container_response(answer, device_specs=False)
    assert list(without.devices) == [] and dict(without.envs) == answer.envs
    assert len(without.mounts) == 3


@pytest.mark.parametrize("ids,entry,message", [
    ([f"{A}-0", f"{A}-1"], [(A, 1, 1)], "device number not matched"),
    ([f"{A}-9"], [(A, 1, 1)], "does not advertise"),
    (["GPU-x-0"], [(A, 1, 1)], "does not advertise"),
    ([f"{A}-0"], [("GPU-zzz", 1, 1)], "not advertised by this node"),
    ([f"{A}-0", f"{A}-1"], [(A, 1, 1), (A, 1, 1)], "twice"),
], ids=["count", "replica-out-of-range", "foreign-id", "foreign-gpu", "duplicate"])
def test_device_checks(ids, entry, message):
    with pytest.raises(AllocationError, match=message):
        check_devices(ids, [ContainerDevice(*d) for d in entry], table(), "main", LIMITS)


def test_unhealthy_gpu_is_refused_and_kubelet_choice_is_only_a_warning():
    t = table()
    assert check_devices([f"{B}-0"], [ContainerDevice(A, 1, 1)], t, "main", LIMITS)
    t.mark(A, False, "critical XID 48", 1.0)
    with pytest.raises(AllocationError, match="Unhealthy .critical XID 48"):
        check_devices([f"{A}-0"], [ContainerDevice(A, 1, 1)], t, "main", LIMITS)


def test_entries_positions_and_consumption():
    p = pod([[(A, 1, 1)], [], [(B, 2, 2)]], containers=("a", "b"), init=("i",))
    entries = decode_entries(p)
    assert next_positions(entries, 1) == [0] and next_positions(entries, 2) == [0, 2]
    assert consumed(entries, [0]) == f";;{B},NVIDIA,2,2:;"
    assert consumed(entries, [0, 2]) == ";;;"


def test_malformed_or_oversized_annotations():
    bad = pod([[(A, 1, 1)]])
    bad["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] = "x,y:;"
    with pytest.raises(AllocationError, match="malformed"):
        decode_entries(bad)
    with pytest.raises(AllocationError, match="lists 2 containers but the pod has 1"):
        decode_entries(pod([[(A, 1, 1)], [(B, 1, 1)]]))


def test_preferred_devices_follow_the_scheduler():
    available = [f"{A}-{i}" for i in range(4)] + [f"{B}-{i}" for i in (1, 2, 10)]
    assert preferred_devices(available, [], 1, [B]) == [f"{B}-1"]
    assert preferred_devices(available, [], 2, [B, A]) == [f"{B}-1", f"{A}-0"]
    assert preferred_devices(available, [f"{A}-2"], 2, [A, B]) == [f"{A}-2", f"{B}-1"]
    assert preferred_devices(available, [], 2, []) == [f"{A}-0", f"{A}-1"]
    assert preferred_devices([f"{A}-0"], [], 1, [B]) == [f"{A}-0"], "fallback when none free"


def test_values_the_shim_would_refuse_are_refused_at_allocate(tmp_path):
    spec = {"name": "main", "resources": {"limits": {"nvidia.com/priority": "5000"}}}
    with pytest.raises(AllocationError, match="CUDA_TASK_PRIORITY='5000'"):
        plan_container([f"{A}-0"], [ContainerDevice(A, 10, 10)], spec, "u1", table(), LIMITS,
                       HostLayout(tmp_path))


def test_uvm_device_nodes_only_when_the_host_has_them(tmp_path):
    spec = {"name": "main"}
    answer = plan_container([f"{A}-0"], [ContainerDevice(A, 10, 10)], spec, "u1", table(),
                            LIMITS, HostLayout(tmp_path),
                            present=lambda path: path == "/dev/nvidia-uvm")
    assert [d.host_path for d in answer.devices] == ["/dev/nvidiactl", "/dev/nvidia-uvm",
                                                    "/dev/nvidia0"]


@pytest.mark.parametrize("numa", [False, True], ids=["default-no-topology", "numaTopology"])
def test_numa_topology_is_advertised_only_when_asked(numa):
    from hami_node.plugin.service import device_list
    devices = device_list(table(), numa).devices
    assert devices and all(d.HasField("topology") == numa for d in devices)


def test_with_cdi_the_gpus_are_named_as_cdi_devices(tmp_path):
    from hami_node.plugin.service import container_response
    limits = Limits(split=4, cdi_kind="nvidia.com/gpu")
    answer = plan_container([f"{B}-0", f"{A}-3"], [ContainerDevice(B, 3000, 30),
                                                   ContainerDevice(A, 1000, 10)],
                            {"name": "main"}, "u1", table(), limits, HostLayout(tmp_path))
    message = container_response(answer)
    assert [d.name for d in message.cdi_devices] == [f"nvidia.com/gpu={B}", f"nvidia.com/gpu={A}"]
    assert not message.devices          # the CDI spec brings the device nodes
    assert message.envs["NVIDIA_VISIBLE_DEVICES"] == f"{B},{A}"
    assert "/etc/ld.so.preload" in [m.container_path for m in message.mounts]


@pytest.mark.parametrize("limits, want", [
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}, (3000, 30)),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 9000}, (4864, 0)),     # no more than the instance
    ({"nvidia.com/gpu": 1}, (4864, 100)),                               # the whole instance
], ids=["caps-inside", "capped-by-instance", "bare"])
def test_mig_caps_are_the_containers_own_within_its_instance(limits, want):
    from hami_common.mig import MigAllocation, MigPlacement
    from hami_node.plugin.allocate import mig_limits
    from hami_node.plugin.mig import Realized
    made = Realized(MigAllocation(0, 0, "GPU-a", "1g.5gb", MigPlacement(6, 1), "MIG-x", 9, 0),
                    4864)
    # what HAMi's scheduler and ours record for the instance: its MiB and core share
    spec = {"name": "c", "resources": {"limits": limits}}
    assert mig_limits((("GPU-a", 4864, 14), ("GPU-b", 1000, 20)), [made], spec) == \
        (("MIG-x", *want), ("GPU-b", 1000, 20))
