"""Bad input at every edge of the real cluster, each answered with a clear refusal and nothing
half-written: malformed and hostile pods through the real API server (refused by it or by our
webhook with what to fix, or left Pending with kube-scheduler's reason from our extender),
junk on hami-control's HTTPS port (the webhook and the extender), and junk on hami-node's
device plugin socket, where kubelet calls Allocate. Afterwards a good GPU pod is placed and
runs, by the same hami-control and hami-node processes. The counts tried and refused per edge
are printed (README, "What we survive")."""
from __future__ import annotations

import json
import time

import grpc
import pytest
from kubernetes.client.rest import ApiException

from hami_common import constants as C
from hami_common.deviceplugin import api_pb2, api_pb2_grpc
from hami_node.plugin.daemon import endpoint_name
from hami_node.plugin.layout import HostLayout

import junk
from k8shelpers import create, delete, get, pod, until, wait_phase

pytestmark = pytest.mark.timeout(600)
GPU = {C.RESOURCE_GPU: "1", C.RESOURCE_MEM: "1024"}
FORGED = "only hami-scheduler (hami-control) and hami-node write these"
PENDING_S = 60          # kube-scheduler's first try of a pod; generous for a loaded machine


@pytest.fixture(scope="module")
def tally():
    """edge -> [tried, refused]; the module's last test prints and checks it."""
    return {}


def _count(tally, edge: str, refused: bool) -> None:
    tried_refused = tally.setdefault(edge, [0, 0])
    tried_refused[0] += 1
    tried_refused[1] += bool(refused)


def _limits(**values) -> dict:
    return {"limits": {f"nvidia.com/{k.replace('_', '-')}": str(v) for k, v in values.items()}}


def _denied_cases(gpu_uuid: str) -> list:
    """(id, pod body, what the refusal must say)."""
    given = f"{gpu_uuid},NVIDIA,40960,100:;"
    privileged = pod("bad-privileged", _limits(gpu=1))
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    named = pod("bad-names-node", _limits(gpu=1))
    named["spec"]["nodeName"] = "node-a"
    cpu_forged = pod("bad-forged-cpu-pod", {"limits": {"cpu": "100m"}},
                     annotations={C.ANNO_DEVICES_TO_ALLOCATE: given, C.ANNO_VGPU_NODE: "node-a"})
    cpu_forged["spec"]["schedulerName"] = C.SCHEDULER_NAME
    return [
        ("gpumem-negative", pod("bad-mem-neg", _limits(gpu=1, gpumem=-5)), "must not be negative"),
        ("gpumem-abc", pod("bad-mem-abc", _limits(gpu=1, gpumem="abc")), "quantities must match"),
        ("gpumem-milli", pod("bad-mem-milli", _limits(gpu=1, gpumem="500m")), "whole number"),
        ("gpucores-150", pod("bad-cores", _limits(gpu=1, gpucores=150)), "between 0 and 100"),
        ("percent-0", pod("bad-pct-0", _limits(gpu=1, gpumem_percentage=0)), "between 1 and 100"),
        ("percent-101", pod("bad-pct-101", _limits(gpu=1, gpumem_percentage=101)),
         "between 1 and 100"),
        ("zero-gpus-with-mem", pod("bad-zero", _limits(gpu=0, gpumem=1024)), "asks for 0 GPUs"),
        ("mem-and-percent", pod("bad-both", _limits(gpu=1, gpumem=1024, gpumem_percentage=10)),
         "only one of"),
        ("privileged", privileged, "is privileged"),
        ("names-a-node", named, "spec.nodeName"),
        ("policy-tetris", pod("bad-policy", {"limits": GPU}, annotations={
            C.ANNO_GPU_SCHEDULER_POLICY: "tetris"}), "use one of binpack"),
        ("numa-maybe", pod("bad-numa", {"limits": GPU}, annotations={
            C.ANNO_NUMA_BIND: "maybe"}), 'use "true" or "false"'),
        ("forged-allocation", pod("bad-forged-alloc", {"limits": GPU}, annotations={
            C.ANNO_DEVICES_ALLOCATED: given, C.ANNO_VGPU_NODE: "node-a"}), FORGED),
        ("forged-bind-phase", pod("bad-forged-phase", {"limits": GPU}, annotations={
            C.ANNO_BIND_PHASE: C.BIND_PHASE_ALLOCATING, C.ANNO_BIND_TIME: "1"}), FORGED),
        ("forged-node-lock", pod("bad-forged-lock", {"limits": GPU}, annotations={
            C.ANNO_NODE_LOCK: "2026-01-01T00:00:00Z,default,victim"}), FORGED),
        ("forged-on-cpu-pod", cpu_forged, FORGED),
    ]


PENDING = [   # (id, pod name, resources, annotations, what kube-scheduler's reason must say)
    ("gpumem-1e30", "bad-mem-huge", {"limits": {C.RESOURCE_GPU: "1", C.RESOURCE_MEM: "1e30"}},
     {}, "CardInsufficientMemory"),
    ("gpu-1000", "bad-gpu-1000", {"limits": {C.RESOURCE_GPU: "1000"}}, {},
     "NodeInsufficientDevice"),
    ("gputype-10KB", "bad-type-10k", {"limits": GPU}, {C.ANNO_USE_GPUTYPE: "x" * 10240},
     "CardTypeMismatch"),
    ("gputype-junk-entries", "bad-type-junk", {"limits": GPU},
     {C.ANNO_USE_GPUTYPE: ",, ,\u2603,\u00e9\u00e8,"}, "CardTypeMismatch"),
    ("gpuuuid-nonexistent", "bad-uuid", {"limits": GPU},
     {C.ANNO_USE_GPUUUID: "GPU-00000000-dead-beef-0000-000000000000"}, "CardUuidMismatch"),
]


def _pids(c) -> tuple:
    return c.procs["hami-control"].pid, c.node.agent.pid


def _unschedulable(c, name: str) -> str:
    """kube-scheduler's message on the pod once it gave up on it ('' before)."""
    for cond in (get(c, name).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return cond.get("message") or "(no message)"
    return ""


def test_hostile_pods_are_refused_with_what_to_fix(real_cluster, tally):
    c = real_cluster
    before = _pids(c)
    gpu_uuid = c.gpus()["node-a"][0].id
    for case, body, says in _denied_cases(gpu_uuid):
        try:
            create(c, body)
        except ApiException as e:
            message = json.loads(e.body).get("message", "")
            assert e.status in (400, 403, 422) and says in message, (case, e.status, message)
            _count(tally, "pods refused at creation", True)
            continue
        delete(c, body["metadata"]["name"])
        _count(tally, "pods refused at creation", False)
        pytest.fail(f"{case}: pod created, not refused")
    assert _pids(c) == before and not c.problems()


def test_impossible_pods_stay_pending_with_the_reason_and_nothing_written(real_cluster, tally):
    c = real_cluster
    names = [name for _, name, *_ in PENDING]
    try:
        waiting = []
        for case, name, resources, annotations, says in PENDING:
            try:
                create(c, pod(name, resources, annotations=annotations))
                waiting.append((case, name, says))
            except ApiException as e:   # the API server's own validation may come first
                message = json.loads(e.body).get("message", "")
                _count(tally, "pods refused at creation", e.status == 422 and "spec." in message)
                assert e.status == 422 and "spec." in message, (case, e.status, message)
        for case, name, says in waiting:
            message = until(lambda: _unschedulable(c, name), PENDING_S,
                            f"{case}: kube-scheduler's Unschedulable condition on {name}")
            _count(tally, "pods left Pending with a reason", says in message)
            assert says in message, (case, message)
            tally.setdefault("reasons", {})[case] = message
        node = c.core_v1.read_node("node-a")
        lock = (node.metadata.annotations or {}).get(C.ANNO_NODE_LOCK, "")
        assert not any(lock.endswith(f",default,{name}") for name in names), \
            f"a Pending pod holds the node lock: {lock}"
        containers = HostLayout(c.node.shim_dir).containers
        made = [p.name for p in containers.iterdir()] if containers.exists() else []
        for _, name, _ in waiting:
            current = get(c, name)
            written = [k for k in C.SCHEDULER_POD_ANNOTATIONS
                       if k in (current["metadata"].get("annotations") or {})]
            assert not written, f"{name} is Pending but carries {written}"
            assert current["status"]["phase"] == "Pending" and not current["spec"].get("nodeName")
            uid = current["metadata"]["uid"]
            assert not [m for m in made if m.startswith(uid)], f"{name} has an accounting folder"
    finally:
        delete(c, *names)


def _http_junk() -> list:
    """(id, path, body, Content-Type, statuses accepted, what the message must say)."""
    bad_review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": "a pod"}}
    return [
        ("filter-not-json", "/filter", b"hello", junk.JSON, (400,), "not valid JSON"),
        ("bind-truncated", "/bind", b'{"PodName": "x", ', junk.JSON, (400,), "not valid JSON"),
        ("prioritize-wrong-types", "/prioritize", b'{"Pod": 5, "NodeNames": "abc"}',
         junk.JSON, (400,), "ExtenderArgs.Pod must be"),
        ("filter-wrong-types", "/filter", b'{"Pod": {"metadata": {"name": "p"}}, '
         b'"NodeNames": 7}', junk.JSON, (400,), "NodeNames must be a list"),
        ("bind-not-an-object", "/bind", b"[1, 2]", junk.JSON, (400,), "ExtenderBindingArgs"),
        ("webhook-object-not-a-pod", "/webhook", json.dumps(bad_review).encode(), junk.JSON,
         (400,), "the pod must be a JSON object"),
        ("webhook-binary", "/webhook", b"\xff\xfe\x00\x01garbage", None, (400,),
         "not valid JSON"),
        ("filter-2MiB", "/filter", b'{"x": "' + b"a" * (2 << 20) + b'"}', junk.JSON, (413,),
         "at most 1048576"),
        ("filter-as-form", "/filter", b"Pod=x&NodeNames=y",
         "application/x-www-form-urlencoded", (415,), "send JSON"),
        ("webhook-as-text", "/webhook", json.dumps(bad_review).encode(), "text/plain", (415,),
         "send JSON"),
    ]


def test_junk_on_the_webhook_and_extender_port(real_cluster, tally):
    c = real_cluster
    before = _pids(c)
    port = int(c.control.url.rsplit(":", 1)[1])
    ctx = junk.tls_context(str(c.pki.ca))
    # Stalled clients, opened first: each holds a worker only until its deadline.
    stalls = {"TLS handshake stalled": junk.connect(port, None),
              "request stalled after its headers": junk.connect(port, ctx)}
    stalls["TLS handshake stalled"].sendall(b"\x16\x03\x01\x02\x00\x01")
    stalls["request stalled after its headers"].sendall(
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    stalled_at = time.monotonic()
    for case, path, body, ctype, statuses, says in _http_junk():
        answer = junk.post(port, ctx, path, body, ctype)
        ok = answer.status in statuses and says in answer.message()
        _count(tally, "HTTP junk on the webhook/extender port", ok)
        assert ok, (case, answer)
    raw = [("raw bytes to the TLS port", None, b"\x00\x01\x02garbage\r\n\r\n" * 50),
           ("plain HTTP to the TLS port", None, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
           ("malformed request line", ctx, b"BLAH\r\n\r\n"),
           ("bad Content-Length", ctx, b"POST /bind HTTP/1.1\r\nContent-Length: abc\r\n\r\n{}")]
    for case, context, data in raw:
        answer = junk.raw_request(port, context, data)
        # closed without an answer (not TLS), or a 4xx with cheroot's or our message
        ok = answer.status == 0 and not answer.body or 400 <= answer.status < 500 and answer.body
        _count(tally, "HTTP junk on the webhook/extender port", ok)
        assert ok, (case, answer)
    good = junk.post(port, ctx, "/bind", json.dumps({
        "PodName": "nobody", "PodNamespace": "default", "PodUID": "u", "Node": "node-a"}).encode())
    assert good.status == 200 and "does not exist" in json.loads(good.body)["Error"], good
    for case, sock in stalls.items():
        took = junk.closed_within(sock, 30 - (time.monotonic() - stalled_at))
        _count(tally, "HTTP junk on the webhook/extender port", took is not None)
        assert took is not None, f"{case}: still open after 30 s"
        sock.close()
    assert _pids(c) == before and not c.problems()


def _socket(c) -> str:
    return str(c.node.plugin_dir / endpoint_name(C.RESOURCE_GPU))


def _grpc_junk() -> list:
    """(id, method, request) kubelet never sends."""
    many = [f"GPU-junk-{i}" for i in range(5000)]
    return [
        ("allocate-nothing", "Allocate", api_pb2.AllocateRequest()),
        ("allocate-empty-container", "Allocate", api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest()])),
        ("allocate-nonsense-ids", "Allocate", api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=["nonsense", "\u2603" * 1000])])),
        ("allocate-5000-ids", "Allocate", api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=many)])),
        ("preferred-negative-size", "GetPreferredAllocation", api_pb2.PreferredAllocationRequest(
            container_requests=[api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=["a"], allocation_size=-1)])),
        ("preferred-must-not-available", "GetPreferredAllocation",
         api_pb2.PreferredAllocationRequest(container_requests=[
             api_pb2.ContainerPreferredAllocationRequest(
                 available_deviceIDs=many[:3], must_include_deviceIDs=["zzz"],
                 allocation_size=1)])),
    ]


def test_junk_on_the_device_plugin_socket(real_cluster, tally):
    c = real_cluster
    before = _pids(c)
    path = _socket(c)
    for data in (b"\x00" * 64, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM"
                 b"\r\n\r\n" + b"\xff" * 4096):
        closed = junk.unix_raw(path, data)
        _count(tally, "junk on the device plugin socket", closed)
        assert closed, f"{data[:30]!r}...: the connection stayed open"
    with grpc.insecure_channel(f"unix://{path}") as channel:
        stub = api_pb2_grpc.DevicePluginStub(channel)
        for case, method, request in _grpc_junk():
            with pytest.raises(grpc.RpcError) as refused:
                getattr(stub, method)(request, timeout=30)
            err = refused.value
            ok = err.code() in (grpc.StatusCode.INVALID_ARGUMENT,
                                grpc.StatusCode.FAILED_PRECONDITION) and len(err.details()) > 20
            _count(tally, "junk on the device plugin socket", ok)
            assert ok, (case, err.code(), err.details())
        undecodable = channel.unary_unary("/v1beta1.DevicePlugin/Allocate",
                                          request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as refused:
            undecodable(b"\xff\xff\xff\xff\x0f", timeout=30)
        _count(tally, "junk on the device plugin socket", bool(refused.value.details()))
        unknown = channel.unary_unary("/v1beta1.DevicePlugin/Nope")
        with pytest.raises(grpc.RpcError) as refused:
            unknown(b"", timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        _count(tally, "junk on the device plugin socket", True)
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=30)
        assert options.get_preferred_allocation_available
    assert _pids(c) == before and not c.problems()


def test_a_good_gpu_pod_runs_afterwards_and_counts(real_cluster, tally, capsys):
    """kubelet's Allocate for a real pod still works, on the same hami-control and hami-node."""
    c = real_cluster
    before = _pids(c)
    create(c, pod("good-after-junk", {"limits": GPU}))
    try:
        done = wait_phase(c, "good-after-junk", timeout=120)
        assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])[:1500]
        annotations = done["metadata"]["annotations"]
        assert annotations[C.ANNO_BIND_PHASE] == C.BIND_PHASE_SUCCESS
    finally:
        delete(c, "good-after-junk")
    assert _pids(c) == before and not c.problems()
    with capsys.disabled():
        reasons = tally.pop("reasons", {})
        print("\nbad input, tried / refused clearly:")
        for edge, (tried, refused) in tally.items():
            print(f"  {edge}: {tried} / {refused}")
        for case, message in reasons.items():
            print(f"  Pending {case}: {message[:160]}")
    assert tally and all(tried == refused for tried, refused in tally.values()), tally
