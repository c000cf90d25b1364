"""The kubelet double against a minimal device plugin over real Unix sockets: registration,
device lists into node status, Allocate per container (with GetPreferredAllocation and
PreStartContainer), init-container reuse, failures recorded and retried, and restarts."""
import json
import os
import time

import grpc
import pytest

from hami_common.deviceplugin import VERSION, api_pb2, api_pb2_grpc, unix_target
from hami_sim.kubelet import load_allocation
from hami_sim.kubelet.sampleplugin import SamplePlugin
from hami_sim.launch import start_kubelet
from hami_sim.testing import pod_manifest, wait_for

RES = "example.com/dev"


@pytest.fixture
def plugin_factory(plugin_dir):
    started = []

    def make(**kw):
        plugin = SamplePlugin(plugin_dir, RES, **kw).start()
        started.append(plugin)
        return plugin
    yield make
    for plugin in started:
        plugin.stop()


def gpu_pod(name, *counts, init=(), node="node-1"):
    containers = [{"name": f"c{i}", "image": "busybox:1.36",
                   "resources": {"limits": {RES: str(n)}} if n else {}}
                  for i, n in enumerate(counts)]
    body = pod_manifest(name, containers=containers)
    body["spec"]["nodeName"] = node
    if init:
        body["spec"]["initContainers"] = [{"name": f"init{i}", "image": "busybox:1.36",
                                           "resources": {"limits": {RES: str(n)}}}
                                          for i, n in enumerate(init)]
    return body


def test_registration_and_node_status(kubelet, plugin_factory, core_v1):
    plugin = plugin_factory(count=3)
    info = kubelet.kubelet.wait_registered(RES, devices=3)
    assert info["endpoint"] == "sample.sock" and set(info["devices"]) == {"dev-0", "dev-1",
                                                                          "dev-2"}
    def node_counts():
        status = core_v1.read_node("node-1").status
        return status.capacity.get(RES), status.allocatable.get(RES)
    wait_for(lambda: node_counts() == ("3", "3"), what="node capacity")
    plugin.set_health("dev-1", False)
    wait_for(lambda: node_counts() == ("3", "2"), what="allocatable to drop")
    plugin.set_health("dev-1", True)
    wait_for(lambda: node_counts() == ("3", "3"), what="allocatable to recover")


def test_bad_registration_is_refused(kubelet, plugin_dir):
    with grpc.insecure_channel(unix_target(os.path.join(plugin_dir, "kubelet.sock"))) as ch:
        stub = api_pb2_grpc.RegistrationStub(ch)
        for req in (api_pb2.RegisterRequest(version="v1alpha", endpoint="x.sock",
                                            resource_name=RES),
                    api_pb2.RegisterRequest(version=VERSION, endpoint="x.sock",
                                            resource_name="no-domain"),
                    api_pb2.RegisterRequest(version=VERSION, endpoint="../x.sock",
                                            resource_name=RES)):
            with pytest.raises(grpc.RpcError) as exc:
                stub.Register(req, timeout=5)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_allocate_per_container_with_preferred_and_prestart(kubelet, plugin_factory, core_v1):
    plugin = plugin_factory(count=4, preferred=True, pre_start=True, numa=1)
    kubelet.kubelet.wait_registered(RES, devices=4)
    core_v1.create_namespaced_pod("default", gpu_pod("two", 1, 0, 2))
    recs = {r.container: r for r in kubelet.kubelet.wait_allocated("default", "two")}
    assert set(recs) == {"c0", "c2"}, "containers without devices get no Allocate"
    # The sample plugin prefers the highest IDs, so its preference is visibly honoured.
    assert recs["c0"].devices_by_resource == {RES: ["dev-3"]}
    assert sorted(recs["c2"].devices_by_resource[RES]) == ["dev-1", "dev-2"]
    assert recs["c2"].envs["SAMPLE_DEVICES"] == ",".join(recs["c2"].devices_by_resource[RES])
    assert recs["c2"].mounts[0]["read_only"] is True
    assert [d["container_path"] for d in recs["c0"].devices] == ["/dev/dev-3"]
    assert recs["c0"].annotations == {"example.com/devices": "dev-3"}
    assert plugin.calls.allocate == [["dev-3"], recs["c2"].devices_by_resource[RES]]
    assert plugin.calls.pre_start == plugin.calls.allocate
    assert [size for _, _, size in plugin.calls.preferred] == [1, 2]
    wait_for(lambda: core_v1.read_namespaced_pod("two", "default").status.phase == "Running",
             what="pod Running")


def test_allocations_are_dumped_for_the_demo(kubelet, plugin_factory, core_v1):
    plugin_factory(count=2)
    kubelet.kubelet.wait_registered(RES, devices=2)
    core_v1.create_namespaced_pod("default", gpu_pod("dumped", 1))
    kubelet.kubelet.wait_allocated("default", "dumped")
    [path] = kubelet.allocation_files()
    assert path.relative_to(kubelet.record_dir).parts == ("default", "dumped", "c0.json")
    rec = load_allocation(path)
    assert rec.envs["SAMPLE_DEVICES"] == rec.devices_by_resource[RES][0]
    assert rec.image == "busybox:1.36"


def test_init_container_devices_are_reused(kubelet, plugin_factory, core_v1):
    plugin_factory(count=2)
    kubelet.kubelet.wait_registered(RES, devices=2)
    core_v1.create_namespaced_pod("default", gpu_pod("reuse", 2, init=(2,)))
    recs = {r.container: r for r in kubelet.kubelet.wait_allocated("default", "reuse")}
    assert recs["init0"].init and not recs["c0"].init
    assert sorted(recs["c0"].devices_by_resource[RES]) == ["dev-0", "dev-1"]


def test_shortage_is_recorded_retried_with_backoff_and_resolved(kubelet, plugin_factory,
                                                                core_v1):
    plugin = plugin_factory(count=2)
    k = kubelet.kubelet
    k.wait_registered(RES, devices=2)
    core_v1.create_namespaced_pod("default", gpu_pod("first", 2))
    k.wait_allocated("default", "first")
    core_v1.create_namespaced_pod("default", gpu_pod("second", 1))
    failure = k.wait_failure("default", "second")
    assert "Requested: 1, Available: 0" in failure.message and failure.container == "c0"
    assert json.loads((kubelet.record_dir / "default" / "second" / "failure.json")
                      .read_text())["resource"] == RES
    time.sleep(1.5)
    attempts = k.failures()[0].attempts
    # Backoff 0.2, 0.4, 0.8 s...: a handful of attempts in 1.5 s, not one per 0.1 s sync.
    assert 2 <= attempts <= 5
    assert len(plugin.calls.allocate) == 1, "a shortage never reaches the plugin"
    core_v1.delete_namespaced_pod("first", "default")
    recs = k.wait_allocated("default", "second", timeout=5)
    assert len(recs[0].devices_by_resource[RES]) == 1
    assert not (kubelet.record_dir / "default" / "second" / "failure.json").exists()


def test_plugin_error_is_recorded_with_its_message(kubelet, plugin_factory, core_v1):
    plugin = plugin_factory(count=2)
    plugin.allocate_error = "pod has no hami.io/vgpu-devices-to-allocate annotation"
    kubelet.kubelet.wait_registered(RES, devices=2)
    core_v1.create_namespaced_pod("default", gpu_pod("refused", 1))
    failure = kubelet.kubelet.wait_failure("default", "refused")
    assert plugin.allocate_error in failure.message and "FAILED_PRECONDITION" in failure.message
    events = wait_for(lambda: core_v1.list_namespaced_event(
        "default", field_selector="involvedObject.name=refused").items, what="an event")
    assert events[0].reason == "FailedAllocation" and plugin.allocate_error in events[0].message
    plugin.allocate_error = None
    kubelet.kubelet.wait_allocated("default", "refused", timeout=5)


def test_restart_removes_sockets_and_plugin_re_registers(kubelet, plugin_factory, core_v1,
                                                         plugin_dir):
    plugin = plugin_factory(count=2)
    k = kubelet.kubelet
    k.wait_registered(RES, devices=2)
    core_v1.create_namespaced_pod("default", gpu_pod("before", 1))
    k.wait_allocated("default", "before")
    (plugin_dir / "stale.sock").write_text("")
    registrations = k.registrations
    kubelet.restart()
    assert not (plugin_dir / "stale.sock").exists()
    start = time.monotonic()
    wait_for(lambda: k.registrations > registrations, what="re-registration")
    assert time.monotonic() - start < 2.0
    k.wait_registered(RES, devices=2)
    core_v1.create_namespaced_pod("default", gpu_pod("after", 1))
    after = k.wait_allocated("default", "after")[0].devices_by_resource[RES]
    before = k.allocations("default", "before")[0].devices_by_resource[RES]
    assert after != before, "allocations survive a restart, as kubelet's checkpoint keeps them"
    assert plugin.calls.registrations == 2


def test_kubelet_as_a_process_restarted_by_sighup(apiserver, plugin_factory, plugin_dir,
                                                  tmp_path, core_v1):
    running = start_kubelet("node-p", plugin_dir, apiserver, process=True,
                            record_dir=tmp_path / "rec", sync_interval=0.1)
    try:
        plugin = plugin_factory(count=1)
        wait_for(lambda: core_v1.read_node("node-p").status.allocatable.get(RES) == "1",
                 timeout=10, what="node status from the kubelet process")
        core_v1.create_namespaced_pod("default", gpu_pod("proc", 1, node="node-p"))
        wait_for(running.allocation_files, timeout=10, what="an allocation dump")
        running.restart()
        wait_for(lambda: plugin.calls.registrations == 2, timeout=10, what="re-registration")
    finally:
        running.stop()
    assert running.process.returncode == 0
