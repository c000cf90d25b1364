"""The DRA driver's pure core: the node's ResourceSlice, a claim's allocation read into
devices with limits, and the CDI spec that brings the shim."""
import pytest

from hami_common.constants import DRA_CDI_KIND, DRA_DRIVER
from hami_node.dra.claims import (DEVICE_LIST_DIR, ClaimDevice, PrepareError, Shaping,
                                  cdi_ids, cdi_spec, claim_devices)
from hami_node.dra.slices import (SliceOptions, build_slice, consumable_kept, device_name,
                                  slice_name)
from hami_node.plugin.backend import Gpu
from hami_node.plugin.devices import DeviceTable
from hami_node.plugin.layout import HostLayout
from hami_node.shim import ShimSettings

A = "GPU-AAAAAAAA-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
MIB, GIB = 1 << 20, 1 << 30
OPTIONS = SliceOptions(driver=DRA_DRIVER, node="n1", node_uid="uid-n1", driver_version="550.54.15",
                       cuda_version="12.4")


def table() -> DeviceTable:
    return DeviceTable([Gpu(A, 0, "NVIDIA A100-SXM4-40GB", 40960, numa=1),
                        Gpu(B, 1, "Tesla T4", 15360)], split=10)


# The slice ------------------------------------------------------------------------------

def test_the_slice_shares_each_gpu_with_memory_and_cores_as_capacity():
    doc = build_slice(table().states(), OPTIONS, generation=3)
    assert doc["metadata"]["name"] == slice_name(OPTIONS) == f"n1-{DRA_DRIVER}"
    assert doc["metadata"]["ownerReferences"][0]["uid"] == "uid-n1"
    spec = doc["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]) == (
        DRA_DRIVER, "n1", {"name": "n1", "generation": 3, "resourceSliceCount": 1})
    first = spec["devices"][0]
    assert first["name"] == device_name(A) == A.lower()
    assert first["allowMultipleAllocations"] is True
    assert first["attributes"]["uuid"] == {"string": A}
    assert first["attributes"]["index"] == {"int": 0}
    assert first["attributes"]["numaNode"] == {"int": 1}
    assert first["attributes"]["type"] == {"string": "NVIDIA A100-SXM4-40GB"}
    assert first["attributes"]["driverVersion"] == {"version": "550.54.15"}
    assert first["attributes"]["cudaVersion"] == {"version": "12.4.0"}
    assert first["capacity"]["memory"] == {
        "value": str(40960 * MIB),
        "requestPolicy": {"default": str(40960 * MIB),
                          "validRange": {"min": str(MIB), "step": str(MIB)}}}
    assert first["capacity"]["cores"] == {
        "value": "100",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}}
    assert spec["devices"][1]["attributes"]["type"] == {"string": "NVIDIA-Tesla T4"}


def test_without_consumable_capacity_devices_are_whole_and_unhealthy_gpus_are_left_out():
    t = table()
    t.mark(B, False, "XID 79")
    options = SliceOptions(driver=DRA_DRIVER, node="n1", consumable=False, memory_scaling=1.5)
    doc = build_slice(t.states(), options, generation=1)
    assert [d["name"] for d in doc["spec"]["devices"]] == [A.lower()]
    only = doc["spec"]["devices"][0]
    assert "allowMultipleAllocations" not in only
    assert only["capacity"]["memory"] == {"value": str(61440 * MIB)}
    assert "ownerReferences" not in doc["metadata"]


def test_a_dropped_consumable_field_is_noticed():
    sent = build_slice(table().states(), OPTIONS, 1)
    stored = build_slice(table().states(), SliceOptions(driver=DRA_DRIVER, node="n1",
                                                        consumable=False), 1)
    assert consumable_kept(sent, sent)
    assert not consumable_kept(sent, stored)
    assert consumable_kept(stored, stored)


# Claims ---------------------------------------------------------------------------------

def claim(results, uid="c-1", allocated=True) -> dict:
    doc = {"metadata": {"namespace": "ns", "name": "gpu", "uid": uid}, "status": {}}
    if allocated:
        doc["status"]["allocation"] = {"devices": {"results": results}}
    return doc


def result(device, request="gpu", pool="n1", driver=DRA_DRIVER, **extra) -> dict:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def test_consumed_capacity_and_share_ids_become_the_devices_limits():
    doc = claim([result(A.lower(), shareID="s-1",
                        consumedCapacity={"memory": "3000Mi", "cores": "30"}),
                 result(B.lower(), request="pick/t4", shareID="s-2",
                        consumedCapacity={"memory": "1Gi", "cores": "0"}),
                 result("other", pool="n2"), result("x", driver="other.example.com")])
    devices = claim_devices(doc, table(), OPTIONS)
    assert devices == [ClaimDevice("gpu", A.lower(), A, 3000 * MIB, 30, "s-1"),
                       ClaimDevice("pick", B.lower(), B, GIB, 0, "s-2")]


def test_a_whole_device_allocation_gets_the_whole_gpu_and_no_compute_limit():
    devices = claim_devices(claim([result(B.lower())]), table(), OPTIONS)
    assert devices == [ClaimDevice("gpu", B.lower(), B, 15360 * MIB, 0, "")]


@pytest.mark.parametrize("doc, words", [
    (claim([], allocated=False), "is not allocated"),
    (claim([result("gpu-nope")]), "no such GPU on node n1"),
    (claim([result("x", pool="n2")]), "has no device of driver"),
    (claim([result(A.lower(), consumedCapacity={"memory": "lots"})]), "is not a quantity"),
], ids=["unallocated", "unknown-device", "other-node", "bad-quantity"])
def test_claims_that_cannot_be_prepared_say_why(doc, words):
    with pytest.raises(PrepareError, match=words):
        claim_devices(doc, table(), OPTIONS)


def test_an_unhealthy_gpu_is_refused():
    t = table()
    t.mark(A, False, "critical XID 79")
    with pytest.raises(PrepareError, match="Unhealthy .critical XID 79"):
        claim_devices(claim([result(A.lower())]), t, OPTIONS)


# CDI ------------------------------------------------------------------------------------

DEVICES = [ClaimDevice("gpu", A.lower(), A, 3000 * MIB, 30, "s-1"),
           ClaimDevice("gpu", B.lower(), B, GIB, 0, "s-2")]


def test_each_device_brings_the_shim_with_its_own_limit_variable(tmp_path):
    layout = HostLayout(tmp_path)
    spec = cdi_spec("c-1", DEVICES, layout, Shaping())
    assert (spec["kind"], [d["name"] for d in spec["devices"]]) == (DRA_CDI_KIND,
                                                                     ["c-1-0", "c-1-1"])
    envs = [dict(e.split("=", 1) for e in d["containerEdits"]["env"]) for d in spec["devices"]]
    assert envs[0]["HAMI_VGPU_DEVICE_c_1_0"] == f"{A},3000m,30"
    assert envs[1]["HAMI_VGPU_DEVICE_c_1_1"] == f"{B},1024m,0"
    merged = {**envs[0], **envs[1]}          # what CDI makes of both in one container
    settings = ShimSettings.from_env(merged)
    assert settings.uuid_limit(A) == (3000 * MIB, 30)
    assert settings.uuid_limit(B) == (GIB, 0)
    assert merged["NVIDIA_VISIBLE_DEVICES"] == DEVICE_LIST_DIR
    mounts = [{m["containerPath"]: m["hostPath"] for m in d["containerEdits"]["mounts"]}
              for d in spec["devices"]]
    assert mounts[0]["/usr/local/vgpu/libvgpu.so"] == str(layout.lib)
    assert mounts[0]["/etc/ld.so.preload"] == str(layout.preload)
    assert mounts[0]["/usr/local/vgpu/shared"] == str(layout.claim_dir("c-1"))
    assert mounts[0][f"{DEVICE_LIST_DIR}/{A}"] == "/dev/null"
    assert mounts[1][f"{DEVICE_LIST_DIR}/{B}"] == "/dev/null"
    assert merged["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/shared/vgpu.cache"
    assert cdi_ids("c-1", DEVICES, Shaping()) == [[f"{DRA_CDI_KIND}=c-1-0"],
                                                  [f"{DRA_CDI_KIND}=c-1-1"]]


def test_with_the_nodes_nvidia_cdi_spec_the_gpu_comes_from_it(tmp_path):
    shaping = Shaping(cdi_kind="nvidia.com/gpu", disable_core_limit=True)
    spec = cdi_spec("c-1", DEVICES[:1], HostLayout(tmp_path), shaping)
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["GPU_CORE_UTILIZATION_POLICY"] == "disable"
    assert cdi_ids("c-1", DEVICES[:1], shaping) == [[f"{DRA_CDI_KIND}=c-1-0",
                                                     f"nvidia.com/gpu={A}"]]
