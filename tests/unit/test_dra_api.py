"""The committed DRA and registration modules are generated from the committed .proto files,
and the wire names (packages, services, fields and numbers) are kubelet's."""
import pytest

from hami_common import draplugin
from hami_common.draplugin import (dra_v1_pb2, dra_v1beta1_pb2, generate, registration_pb2)


def test_generated_modules_are_current(tmp_path):
    for fresh in generate.generate(tmp_path):
        committed = generate.PACKAGE_DIR / fresh.name
        assert fresh.read_text() == committed.read_text(), (
            f"{committed} is stale: run python -m hami_common.draplugin.generate")


DRA_FIELDS = [
    ("NodePrepareResourcesRequest", {"claims": 1}),
    ("NodePrepareResourcesResponse", {"claims": 1}),
    ("NodePrepareResourceResponse", {"devices": 1, "error": 2}),
    ("Device", {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}),
    ("NodeUnprepareResourcesRequest", {"claims": 1}),
    ("NodeUnprepareResourcesResponse", {"claims": 1}),
    ("NodeUnprepareResourceResponse", {"error": 1}),
    ("Claim", {"namespace": 1, "uid": 2, "name": 3}),
]


@pytest.mark.parametrize("module, package", [
    (dra_v1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1"),
    (dra_v1beta1_pb2, "k8s.io.kubelet.pkg.apis.dra.v1beta1")], ids=["v1", "v1beta1"])
@pytest.mark.parametrize("message, fields", DRA_FIELDS, ids=[m for m, _ in DRA_FIELDS])
def test_dra_wire_fields(module, package, message, fields):
    desc = module.DESCRIPTOR.message_types_by_name[message]
    assert desc.full_name == f"{package}.{message}"
    assert {f.name: f.number for f in desc.fields} == fields


@pytest.mark.parametrize("module, service", [(dra_v1_pb2, "v1.DRAPlugin"),
                                             (dra_v1beta1_pb2, "v1beta1.DRAPlugin")],
                         ids=["v1", "v1beta1"])
def test_dra_service_paths(module, service):
    svc = module.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert [m.name for m in svc.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    # kubelet names the services by their package's last part, as PluginInfo lists them.
    assert svc.full_name.split(".")[-2] + ".DRAPlugin" == service
    assert service in draplugin.SERVICES


REG_FIELDS = [
    ("PluginInfo", {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}),
    ("RegistrationStatus", {"plugin_registered": 1, "error": 2}),
    ("RegistrationStatusResponse", {}),
    ("InfoRequest", {}),
]


@pytest.mark.parametrize("message, fields", REG_FIELDS, ids=[m for m, _ in REG_FIELDS])
def test_registration_wire_fields(message, fields):
    desc = registration_pb2.DESCRIPTOR.message_types_by_name[message]
    assert desc.full_name == f"pluginregistration.{message}"
    assert {f.name: f.number for f in desc.fields} == fields


def test_socket_paths_follow_the_kubelet_root():
    assert draplugin.registration_socket("/var/lib/kubelet", "gpu.example.io") == \
        "/var/lib/kubelet/plugins_registry/gpu.example.io-reg.sock"
    assert draplugin.service_socket("/k", "d") == "/k/plugins/d/dra.sock"
