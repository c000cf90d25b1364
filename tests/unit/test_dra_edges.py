"""The DRA driver's edges with small fakes: prepared state on disk across restarts, the
prepare/unprepare transaction, the ResourceSlice publisher, and the gRPC sockets kubelet uses
(both service versions and registration), served for real on Unix sockets."""
import copy
import json
import shutil
import tempfile
from pathlib import Path

import grpc
import pytest

from hami_common import draplugin
from hami_common.constants import DRA_DRIVER
from hami_common.deviceplugin import unix_target
from hami_common.draplugin import (dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2,
                                   dra_v1beta1_pb2_grpc, registration_pb2,
                                   registration_pb2_grpc)
from hami_node.dra.api import DraApi, KubeDra
from hami_node.dra.claims import Shaping
from hami_node.dra.driver import ClaimRef, DraDriver
from hami_node.dra.publisher import SlicePublisher
from hami_node.dra.service import DraPluginServer
from hami_node.dra.slices import SliceOptions, slice_name
from hami_node.dra.state import PreparedState, StateError, spec_path
from hami_node.plugin.backend import Gpu
from hami_node.plugin.devices import DeviceTable
from hami_node.plugin.errors import ClusterError
from hami_node.plugin.layout import HostLayout

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
OPTIONS = SliceOptions(driver=DRA_DRIVER, node="n1")


class FakeDra:
    """The API server's claims and slices in memory; `drops_consumable` plays the gate off."""

    def __init__(self, drops_consumable=False):
        self.claims, self.slices, self.calls = {}, {}, []
        self.drops_consumable, self.rv = drops_consumable, 0

    def get_claim(self, namespace, name):
        self.calls.append(("get_claim", name))
        return copy.deepcopy(self.claims.get((namespace, name)))

    def get_slice(self, name):
        return copy.deepcopy(self.slices.get(name))

    def _store(self, body):
        body = copy.deepcopy(body)
        if self.drops_consumable:
            for d in body["spec"]["devices"]:
                d.pop("allowMultipleAllocations", None)
                for cap in d.get("capacity", {}).values():
                    cap.pop("requestPolicy", None)
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.slices[body["metadata"]["name"]] = body
        self.calls.append(("write", body["metadata"]["name"]))
        return copy.deepcopy(body)

    def create_slice(self, body):
        if body["metadata"]["name"] in self.slices:
            raise ClusterError("exists", 409)
        return self._store(body)

    def replace_slice(self, body):
        current = self.slices.get(body["metadata"]["name"])
        if current is None or current["metadata"]["resourceVersion"] != \
                body["metadata"].get("resourceVersion"):
            raise ClusterError("conflict", 409)
        return self._store(body)

    def delete_slice(self, name):
        self.slices.pop(name, None)

    def node_slices(self, node, driver):
        return [copy.deepcopy(s) for s in self.slices.values()
                if s["spec"]["nodeName"] == node and s["spec"]["driver"] == driver]


def test_the_fake_and_the_real_api_satisfy_the_protocol():
    assert isinstance(FakeDra(), DraApi)
    assert isinstance(KubeDra(None), DraApi)


def table() -> DeviceTable:
    return DeviceTable([Gpu(A, 0, "A100", 40960), Gpu(B, 1, "T4", 15360)], split=10)


def allocated(uid="u-1", name="gpu", memory="2Gi", cores="25") -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRA_DRIVER, "pool": "n1", "device": A.lower(),
                 "shareID": "s-" + uid, "consumedCapacity": {"memory": memory,
                                                             "cores": cores}}]}}}}


@pytest.fixture
def setup(tmp_path):
    api = FakeDra()
    api.claims[("ns", "gpu")] = allocated()

    def make():
        state = PreparedState(tmp_path / "plugin" / "checkpoint.json", tmp_path / "cdi",
                              HostLayout(tmp_path / "shim"))
        return DraDriver(api, table(), OPTIONS, Shaping(), state, log=lambda _m: None)
    return api, make, tmp_path


# Prepare and unprepare --------------------------------------------------------------------

def test_prepare_writes_the_spec_folder_and_checkpoint_and_is_idempotent(setup):
    api, make, tmp = setup
    driver = make()
    ref = ClaimRef("ns", "gpu", "u-1")
    first = driver.prepare([ref])["u-1"]
    assert first.error == "" and [d.memory for d in first.devices] == [2 << 30]
    spec = json.loads(spec_path(tmp / "cdi", "u-1").read_text())
    assert spec["devices"][0]["name"] == "u-1-0"
    assert (tmp / "shim" / "claims" / "u-1").is_dir()
    meta = json.loads((tmp / "shim" / "claims" / "u-1.json").read_text())
    assert (meta["namespace"], meta["name"]) == ("ns", "gpu")
    # kubelet asks again, and so does a restarted hami-node: the checkpoint answers alone.
    api.calls.clear()
    assert make().prepare([ref])["u-1"] == first
    assert driver.prepare([ref])["u-1"] == first
    assert api.calls == []


def test_unprepare_removes_everything_and_an_unknown_claim_is_fine(setup):
    api, make, tmp = setup
    driver = make()
    driver.prepare([ClaimRef("ns", "gpu", "u-1")])
    assert driver.unprepare([ClaimRef("ns", "gpu", "u-1"), ClaimRef("ns", "x", "u-9")]) == \
        {"u-1": "", "u-9": ""}
    assert not spec_path(tmp / "cdi", "u-1").exists()
    assert not (tmp / "shim" / "claims" / "u-1").exists()
    assert json.loads((tmp / "plugin" / "checkpoint.json").read_text())["claims"] == {}
    assert make().state.claims() == {}


@pytest.mark.parametrize("stored, words", [
    (None, "does not exist"),
    (allocated(uid="u-2"), "has UID u-2, kubelet asked for u-1"),
    ({"metadata": {"namespace": "ns", "name": "gpu", "uid": "u-1"}, "status": {}},
     "is not allocated"),
], ids=["gone", "recreated", "unallocated"])
def test_a_claim_that_cannot_be_prepared_is_answered_with_an_error(setup, stored, words):
    api, make, tmp = setup
    api.claims[("ns", "gpu")] = stored
    done = make().prepare([ClaimRef("ns", "gpu", "u-1")])["u-1"]
    assert words in done.error and not done.devices
    assert not spec_path(tmp / "cdi", "u-1").exists()


def test_a_uid_that_could_name_another_file_is_refused(setup):
    api, make, tmp = setup
    driver = make()
    assert "not a Kubernetes UID" in driver.prepare([ClaimRef("ns", "gpu", "../x")])["../x"].error
    assert "not a Kubernetes UID" in driver.unprepare([ClaimRef("ns", "gpu", "a/b")])["a/b"]


def test_a_checkpoint_of_another_version_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "checkpoint.json").write_text(json.dumps({"version": 9, "claims": {}}))
    with pytest.raises(StateError, match="move it aside"):
        PreparedState(tmp_path / "checkpoint.json", tmp_path / "cdi", HostLayout(tmp_path))


def test_files_of_a_prepare_that_died_half_way_are_collected_after_the_grace(setup):
    api, make, tmp = setup
    driver = make()
    driver.prepare([ClaimRef("ns", "gpu", "u-1")])
    (tmp / "shim" / "claims" / "u-dead").mkdir()
    spec_path(tmp / "cdi", "u-dead").write_text("{}")
    now = spec_path(tmp / "cdi", "u-dead").stat().st_mtime
    assert driver.state.collect_orphans(lambda: now + 10, 60) == 0
    assert driver.state.collect_orphans(lambda: now + 100, 60) == 1
    assert not spec_path(tmp / "cdi", "u-dead").exists()
    assert spec_path(tmp / "cdi", "u-1").exists()          # checkpointed: kept


# The slice publisher --------------------------------------------------------------------

def publisher(api, tmp_path, t=None, options=OPTIONS):
    state = PreparedState(tmp_path / "cp.json", tmp_path / "cdi", HostLayout(tmp_path))
    return SlicePublisher(api, t or table(), options, 30, state, log=lambda _m: None)


def test_the_slice_is_written_once_then_only_when_something_changed(tmp_path):
    api, t = FakeDra(), table()
    pub = publisher(api, tmp_path, t)
    assert pub.reconcile() and not pub.reconcile()
    name = slice_name(OPTIONS)
    assert api.slices[name]["spec"]["pool"]["generation"] == 1
    t.mark(B, False, "XID 79")
    assert pub.reconcile()
    stored = api.slices[name]
    assert stored["spec"]["pool"]["generation"] == 2
    assert [d["name"] for d in stored["spec"]["devices"]] == [A.lower()]
    del api.slices[name]                       # kubelet wiped the node's slices
    api.slices["n1-stale"] = copy.deepcopy(stored)
    api.slices["n1-stale"]["metadata"]["name"] = "n1-stale"
    assert pub.reconcile()
    assert sorted(api.slices) == [name]
    assert api.slices[name]["spec"]["pool"]["generation"] == 3


def test_a_slice_stripped_by_the_api_server_falls_back_to_whole_devices(tmp_path):
    api = FakeDra(drops_consumable=True)
    lines = []
    pub = publisher(api, tmp_path)
    pub.log = lines.append
    pub.reconcile()
    assert not pub.options.consumable
    assert any("DRAConsumableCapacity feature gate is off" in line for line in lines)
    assert not pub.reconcile()


# gRPC, for real on Unix sockets -----------------------------------------------------------

def test_kubelet_finds_us_and_both_service_versions_prepare(setup):
    api, make, _ = setup
    root = Path(tempfile.mkdtemp(prefix="k", dir="/tmp"))   # a socket path has 107 bytes
    registered = []
    server = DraPluginServer(str(root), DRA_DRIVER, make(), log=lambda _m: None,
                             on_register=lambda: registered.append(1)).start()
    try:
        reg = draplugin.registration_socket(str(root), DRA_DRIVER)
        with grpc.insecure_channel(unix_target(reg)) as ch:
            stub = registration_pb2_grpc.RegistrationStub(ch)
            info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=5)
            stub.NotifyRegistrationStatus(
                registration_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
        assert (info.type, info.name, list(info.supported_versions)) == (
            "DRAPlugin", DRA_DRIVER, ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
        assert info.endpoint == draplugin.service_socket(str(root), DRA_DRIVER)
        assert registered == [1]
        with grpc.insecure_channel(unix_target(info.endpoint)) as ch:
            for pb, grpc_mod in ((dra_v1_pb2, dra_v1_pb2_grpc),
                                 (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)):
                stub = grpc_mod.DRAPluginStub(ch)
                claims = [pb.Claim(namespace="ns", name="gpu", uid="u-1"),
                          pb.Claim(namespace="ns", name="nope", uid="u-7")]
                out = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=claims),
                                                timeout=5)
                dev = out.claims["u-1"].devices[0]
                assert (list(dev.request_names), dev.pool_name, dev.device_name) == (
                    ["gpu"], "n1", A.lower())
                assert list(dev.cdi_device_ids) == ["hami-py.github.io/gpu=u-1-0"]
                assert "does not exist" in out.claims["u-7"].error
                gone = stub.NodeUnprepareResources(
                    pb.NodeUnprepareResourcesRequest(claims=claims[:1]), timeout=5)
                assert gone.claims["u-1"].error == ""
    finally:
        server.stop()
    leftover = list((root / "plugins_registry").iterdir())
    shutil.rmtree(root)
    assert leftover == []


# Metrics ----------------------------------------------------------------------------------

class NoGpus:
    """A backend whose GPUs report nothing (the metrics' container part is under test)."""

    def usage(self):
        return []


def test_a_prepared_claim_is_in_the_container_metrics_with_its_limit(setup):
    from hami_node.plugin.metrics import ContainerUse, DeviceUse, NodeCollector
    api, make, tmp = setup
    driver = make()
    driver.prepare([ClaimRef("ns", "gpu", "u-1")])
    seen = []

    def reader(path):
        seen.append(path)
        return ContainerUse({A: DeviceUse(used=300 << 20)})
    collector = NodeCollector("n1", NoGpus(), table(), driver.state.layout, reader)
    families = {f.name: f for f in collector.collect()}
    [limit] = families["vGPU_device_memory_limit_in_bytes"].samples
    [usage] = families["vGPU_device_memory_usage_in_bytes"].samples
    assert limit.labels == {"podnamespace": "ns", "podname": "gpu", "ctrname": "",
                            "vdeviceid": "0", "deviceuuid": A}
    assert (limit.value, usage.value) == (2 << 30, 300 << 20)
    assert seen == [tmp / "shim" / "claims" / "u-1" / "vgpu.cache"]
