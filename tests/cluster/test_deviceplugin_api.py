"""The committed device plugin modules are generated from the committed .proto, and the wire
names and numbers are kubelet's v1beta1."""
import pytest

from hami_common import deviceplugin
from hami_common.deviceplugin import api_pb2, generate


def test_generated_modules_are_current(tmp_path):
    for fresh in generate.generate(tmp_path):
        committed = generate.PACKAGE_DIR / fresh.name
        assert fresh.read_text() == committed.read_text(), (
            f"{committed} is stale: run python -m hami_common.deviceplugin.generate")


FIELDS = [
    ("RegisterRequest", {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}),
    ("DevicePluginOptions", {"pre_start_required": 1, "get_preferred_allocation_available": 2}),
    ("Device", {"ID": 1, "health": 2, "topology": 3}),
    ("NUMANode", {"ID": 1}),
    ("ContainerPreferredAllocationRequest", {"available_deviceIDs": 1,
                                             "must_include_deviceIDs": 2, "allocation_size": 3}),
    ("ContainerPreferredAllocationResponse", {"deviceIDs": 1}),
    ("ContainerAllocateRequest", {"devices_ids": 1}),
    ("PreStartContainerRequest", {"devices_ids": 1}),
    ("ContainerAllocateResponse", {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4,
                                   "cdi_devices": 5}),
    ("Mount", {"container_path": 1, "host_path": 2, "read_only": 3}),
    ("DeviceSpec", {"container_path": 1, "host_path": 2, "permissions": 3}),
    ("CDIDevice", {"name": 1}),
]


@pytest.mark.parametrize("message,fields", FIELDS, ids=[f[0] for f in FIELDS])
def test_wire_field_numbers(message, fields):
    desc = api_pb2.DESCRIPTOR.message_types_by_name[message]
    assert {f.name: f.number for f in desc.fields} == fields


def test_services_and_constants():
    services = {s.full_name: [m.name for m in s.methods]
                for s in api_pb2.DESCRIPTOR.services_by_name.values()}
    assert services == {
        "v1beta1.Registration": ["Register"],
        "v1beta1.DevicePlugin": ["GetDevicePluginOptions", "ListAndWatch",
                                 "GetPreferredAllocation", "Allocate", "PreStartContainer"]}
    assert deviceplugin.VERSION == "v1beta1"
    assert deviceplugin.DEFAULT_KUBELET_SOCKET == "/var/lib/kubelet/device-plugins/kubelet.sock"
