"""hami-control's dashboard, server side: what the Record keeps (pods, refusals, agents), the
snapshot (pods on GPUs, pending reasons, fragmentation, measured use), the scrape of a node
agent's exposition, the flags, and the HTTP answers (page, JSON, 304)."""
import gzip
import json
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from hami_common.node_register import DeviceInfo
from hami_common.pod_devices import ContainerDevice
from hami_common.request import RequestDefaults
from hami_control.config import DashboardConfig, from_args
from hami_control.dashboard import Dashboard, snapshot
from hami_control.dashboard.record import Record
from hami_control.dashboard.scrape import UrlBook, parse
from hami_control.errors import ConfigError
from hami_control.placement.view import Reservation
from hami_control.state import make_state
from hami_node.plugin.metrics import AgentMetrics


def _pod(name, mem="4096", node="", phase="Pending", labels=None, ip=""):
    return {"metadata": {"name": name, "namespace": "team", "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
                "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": mem}}}]},
            "status": {"phase": phase, "podIP": ip}}


def _state(used_mib: int):
    """One node with two 16 GiB GPUs; a pod holding used_mib and 50 % cores of the first."""
    state = make_state()
    gpus = [DeviceInfo(id=f"GPU-{i}", index=i, count=10, devmem=16384, devcore=100,
                       type="NVIDIA-T4") for i in range(2)]
    with state.lock:
        state.view.upsert_node("n1", gpus)
        state.view.reserve(Reservation("team/holder", "n1", ((ContainerDevice(
            "GPU-0", used_mib, 50),),)))
    return state


def test_a_refusal_is_kept_until_the_pod_binds_and_told_once():
    record = Record()
    record.on_pod(_pod("big", "20000"), False)
    body = {"Pod": _pod("big", "20000"), "NodeNames": ["n1"]}
    answer = {"NodeNames": [], "FailedNodes": {"n1": "2/2 CardInsufficientMemory"}, "Error": ""}
    record.on_filter(body, answer)
    record.on_filter(body, answer)
    pods, refusals, _, events = record.copy()
    assert refusals["team/big"][1] == "n1: 2/2 CardInsufficientMemory"
    assert [e["kind"] for e in events] == ["refused"]
    record.on_pod(_pod("big", "20000", node="n1", phase="Running"), False)
    pods, refusals, _, events = record.copy()
    assert "team/big" not in refusals and events[-1]["text"] == "team/big bound to n1"


def test_the_node_agents_pod_gives_its_ip():
    record = Record()
    agent = _pod("hami-node-x", node="n1", phase="Running", ip="10.0.0.7",
                 labels={"app.kubernetes.io/name": "hami-node"})
    record.on_pod(agent, False)
    assert record.agent_ip("n1") == "10.0.0.7"
    book = UrlBook("http://{agent_ip}:9394/metrics", record.agent_ip)
    assert book.url("n1") == "http://10.0.0.7:9394/metrics" and book.url("n2") is None
    record.on_pod(agent, True)
    assert record.agent_ip("n1") is None


def test_snapshot_pods_on_gpus_pending_reasons_and_fragmentation():
    state = _state(12288)            # 4 GiB and 50 % cores left on GPU-0
    record = Record()
    record.on_pod(_pod("holder", node="n1", phase="Running"), False)
    record.on_pod(_pod("small", "2048"), False)            # fits GPU-0's rest
    snap = snapshot.build(state, record, {})
    gpu0 = snap["nodes"][0]["gpus"][0]
    assert gpu0["pods"] == [["team/holder", 12288, 50]] and gpu0["usedmem"] == 12288
    assert snap["overview"]["partial"] == 1 and snap["overview"].get("fragmented", 0) == 0
    assert snap["pending"] == [{"key": "team/small", "reason": "waiting for the scheduler",
                                "since": ""}]
    record.on_pod(_pod("small", "2048"), True)
    record.on_pod(_pod("big", "8192"), False)              # fits no partly used GPU
    snap = snapshot.build(state, record, {})
    assert (snap["overview"]["fragmented"], snap["overview"]["fragmentedmem"]) == (1, 4096)
    assert snap["overview"]["free"] == 1


def test_an_agents_exposition_gives_use_health_and_xids():
    metrics = AgentMetrics(CollectorRegistry())

    class Xid:
        uuid, xid = "GPU-0", 79
    metrics.observe_xid(Xid, critical=True)
    text = generate_latest(metrics.registry).decode() + (
        'vGPU_device_memory_usage_in_bytes{ctrname="main",deviceuuid="GPU-0",podname="holder",'
        'podnamespace="team",vdeviceid="0"} 5.0e+08\n'
        'Device_utilization_desc_of_container{ctrname="main",deviceuuid="GPU-0",'
        'podname="holder",podnamespace="team",vdeviceid="0"} 49.5\n'
        'hami_node_gpu_healthy{deviceidx="0",deviceuuid="GPU-0",nodeid="n1"} 0\n')
    scraped = parse(text)
    assert scraped["containers"][("team", "holder", "main", "GPU-0")] == \
        {"mem": 5.0e8, "share": 49.5}
    assert scraped["gpus"]["GPU-0"] == {"xids": [79], "healthy": False}
    snap = snapshot.build(_state(1024), Record(), {"n1": scraped})
    gpu0 = snap["nodes"][0]["gpus"][0]
    assert (gpu0["healthy"], gpu0["xids"]) == (False, [79])
    assert snap["pods"][0]["use"] == [["main", "GPU-0", 5.0e8, 49.5]]


def test_the_node_metrics_file_is_read_again_when_it_changes(tmp_path):
    path = tmp_path / "urls.json"
    path.write_text(json.dumps({"n1": "http://a/metrics"}))
    book = UrlBook(f"@{path}", lambda node: None)
    assert book.url("n1") == "http://a/metrics"
    path.write_text(json.dumps({"n1": "http://b/metrics", "n2": "http://c/metrics"}))
    assert (book.url("n1"), book.url("n2")) == ("http://b/metrics", "http://c/metrics")


@pytest.mark.parametrize("argv,flag", [
    (["--dashboard-node-metrics", "http://{node}:9394/metrics"], "--dashboard-node-metrics"),
    (["--dashboard-listen", "127.0.0.1"], "--dashboard-listen"),
    (["--dashboard-listen", "127.0.0.1:1", "--dashboard-node-metrics", "ftp://x"],
     "--dashboard-node-metrics"),
    (["--dashboard-listen", "127.0.0.1:1", "--dashboard-node-metrics", "@/nonexistent"],
     "--dashboard-node-metrics"),
    (["--dashboard-listen", "0.0.0.0:1", "--dashboard-scrape-period", "0"],
     "--dashboard-scrape-period")])
def test_bad_dashboard_flags_name_the_flag(argv, flag):
    with pytest.raises(ConfigError) as e:
        from_args(["--no-leader-elect", *argv])
    assert e.value.key == flag


def test_off_by_default_and_on_with_its_listener():
    assert from_args([]).dashboard is None
    cfg = from_args(["--dashboard-listen", "0.0.0.0:9445"]).dashboard
    assert (cfg.host, cfg.port, cfg.node_metrics) == ("0.0.0.0", 9445, "")


def test_the_page_and_the_snapshot_over_http_with_etags():
    dash = Dashboard(DashboardConfig(port=0), _state(2048), RequestDefaults()).start()
    try:
        with urllib.request.urlopen(dash.url + "/") as resp:
            assert b"static/app.js" in resp.read()
        with urllib.request.urlopen(dash.url + "/static/app.js") as resp:
            assert b"api/snapshot" in resp.read()
        with urllib.request.urlopen(dash.url + "/api/snapshot") as resp:
            etag, body = resp.headers["ETag"], json.loads(resp.read())
        assert body["overview"]["usedmem"] == 2048
        zipped = urllib.request.Request(dash.url + "/api/snapshot",
                                        headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(zipped) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert json.loads(gzip.decompress(resp.read())) == body
        request = urllib.request.Request(dash.url + "/api/snapshot",
                                         headers={"If-None-Match": etag})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request)
        assert e.value.code == 304
        with pytest.raises(urllib.error.HTTPError) as e:    # read-only
            urllib.request.urlopen(urllib.request.Request(dash.url + "/api/snapshot",
                                                          data=b"{}", method="POST"))
        assert e.value.code == 405
    finally:
        dash.stop()


def test_a_taken_port_names_the_dashboard_flag():
    first = Dashboard(DashboardConfig(port=0), make_state(), RequestDefaults()).start()
    try:
        port = int(first.url.rsplit(":", 1)[1])
        with pytest.raises(ConfigError) as e:
            Dashboard(DashboardConfig(port=port), make_state(), RequestDefaults()).start()
        assert e.value.key == "--dashboard-listen"
    finally:
        first.stop()


def test_snapshot_shows_holds_their_victims_and_why():
    state = _state(16384)                            # GPU-0 full of a priority-0 pod
    with state.lock:
        state.view.reserve(Reservation("team/other", "n1", ((ContainerDevice(
            "GPU-1", 16384, 50),),)))
    for name in ("holder", "other"):
        state.note_pod(f"team/{name}", {"metadata": {"name": name, "namespace": "team",
                                                     "uid": name}, "spec": {"priority": 0}},
                       False)
    from hami_common.request import parse_pod
    request = parse_pod(_pod("urgent", "8192"))
    before = snapshot.fingerprint(state, Record(), type("S", (), {"rounds": 0})())
    plan, _ = state.preempt(request, 1000, ["n1"])
    assert plan is not None
    snap = snapshot.build(state, Record(), {})
    (hold,) = snap["preemption"]["holds"]
    assert hold["preemptor"] == "team/urgent" and hold["waiting_for"] == hold["victims"]
    assert hold["why"].startswith("evicting team/") and snap["preemption"]["recent"]
    assert snapshot.fingerprint(state, Record(), type("S", (), {"rounds": 0})()) != before


def test_snapshot_shows_a_mig_gpus_instances():
    from hami_common.mig import MigAllocation, MigPlacement
    from _placement_fixtures import mig_gpu
    state = make_state()
    with state.lock:
        state.view.upsert_node("n1", [mig_gpu("GPU-m")])
        for pod, start, mig in (("team/a", 6, "MIG-a"), ("team/b", 0, "")):
            state.view.reserve(Reservation(pod, "n1", ((ContainerDevice("GPU-m", 4864, 14),),),
                                           mig=(MigAllocation(0, 0, "GPU-m", "1g.5gb",
                                                              MigPlacement(start, 1),
                                                              mig, 3 if mig else None,
                                                              0 if mig else None),)))
    gpu = snapshot.build(state, Record(), {})["nodes"][0]["gpus"][0]
    assert gpu["mode"] == "mig" and gpu["usedmem"] == 2 * 4864
    assert gpu["instances"] == [["team/b", "1g.5gb", 0, 1, ""], ["team/a", "1g.5gb", 6, 1,
                                                                  "MIG-a"]]
    assert "instances" not in snapshot.build(_state(1024), Record(), {})["nodes"][0]["gpus"][0]
