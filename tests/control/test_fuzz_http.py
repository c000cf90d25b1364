"""Property-based fuzz of /webhook, /filter and /bind: whatever is posted, hami-control answers
with a status below 500 and keeps serving."""
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctlhelpers import add_gpu_node, eventually

# FUZZ_EXAMPLES=1500 for a longer search than CI's.
SETTINGS = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
quantities = st.one_of(st.integers(-5, 200).map(str), st.sampled_from(
    ["1.5", "1e3", "3Gi", "500m", "abc", "", "-1", "100", "0"]), st.integers(-5, 200),
    st.floats(-1, 200, allow_nan=False), st.none(), st.lists(st.integers(), max_size=2))
resource_keys = st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores",
                                 "nvidia.com/gpumem-percentage", "nvidia.com/priority", "cpu",
                                 "memory"])
annotation_keys = st.sampled_from(["nvidia.com/use-gputype", "nvidia.com/nouse-gpuuuid",
                                   "nvidia.com/numa-bind", "hami.io/gpu-scheduler-policy",
                                   "hami.io/node-scheduler-policy", "hami.io/vgpu-node", "x"])
containers = st.lists(st.fixed_dictionaries({"name": st.text(max_size=6)}, optional={
    "resources": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "limits": st.one_of(json_values, st.dictionaries(resource_keys, quantities)),
        "requests": st.dictionaries(resource_keys, quantities)})),
    "securityContext": st.one_of(json_values, st.fixed_dictionaries(
        {"privileged": st.one_of(st.booleans(), scalars)})),
    "restartPolicy": st.one_of(st.just("Always"), scalars)}), max_size=3)
pods = st.fixed_dictionaries({}, optional={
    "metadata": st.one_of(json_values, st.fixed_dictionaries(
        {"name": st.one_of(st.text(min_size=1, max_size=8), scalars)}, optional={
            "namespace": st.one_of(st.just("default"), scalars),
            "annotations": st.one_of(json_values, st.dictionaries(annotation_keys, scalars)),
            "labels": st.one_of(json_values, st.dictionaries(st.just("hami.io/webhook"),
                                                             scalars))})),
    "spec": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "containers": st.one_of(containers, json_values), "initContainers": containers,
        "nodeName": scalars, "schedulerName": st.one_of(st.just("hami-scheduler"), scalars)}))})
# Mostly well-formed pods with fuzzed GPU values, so that the placement path is exercised too.
policy_values = st.sampled_from(["binpack", "spread", "fragaware", "tetris", "", "T4", "true",
                                 "GPU-n1-0", "false,maybe"])
gpu_containers = st.lists(st.fixed_dictionaries({
    "name": st.text(min_size=1, max_size=4), "resources": st.fixed_dictionaries({
        "limits": st.dictionaries(resource_keys, st.one_of(
            st.integers(-2, 120).map(str), st.sampled_from(["1", "1", "2", "30", "3000", "1.5",
                                                            "1Gi", "100"])), max_size=3)})}),
    min_size=1, max_size=3)
gpu_pods = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({
        "name": st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True),
        "namespace": st.just("default"),
        "annotations": st.one_of(st.just({}), st.dictionaries(annotation_keys, policy_values,
                                                               max_size=3))}),
    "spec": st.fixed_dictionaries({"containers": gpu_containers},
                                  optional={"initContainers": gpu_containers})})
pods = st.one_of(gpu_pods, gpu_pods, pods)
reviews = st.fixed_dictionaries({
    "apiVersion": st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "v1"]),
    "kind": st.sampled_from(["AdmissionReview", "Pod"]),
    "request": st.one_of(json_values, st.fixed_dictionaries({
        "uid": st.one_of(st.text(min_size=1, max_size=8), scalars),
        "kind": st.one_of(st.just({"group": "", "version": "v1", "kind": "Pod"}), json_values),
        "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", None]),
        "namespace": st.one_of(st.just("default"), scalars), "object": pods}))})
filter_args = st.fixed_dictionaries({"Pod": st.one_of(pods, json_values)}, optional={
    "NodeNames": st.one_of(st.lists(st.sampled_from(["n1", "ghost", ""]), max_size=3),
                           json_values),
    "Nodes": st.one_of(json_values, st.fixed_dictionaries({"items": st.lists(
        st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
            {"name": st.one_of(st.just("n1"), scalars)})}), max_size=2)}))})
filter_args = st.one_of(st.fixed_dictionaries({
    "Pod": gpu_pods, "NodeNames": st.lists(st.sampled_from(["n1", "ghost"]), max_size=2)}),
    filter_args)
bind_args = st.fixed_dictionaries({}, optional={
    "PodName": st.one_of(st.text(max_size=8), scalars), "PodNamespace": st.one_of(
        st.just("default"), scalars), "PodUID": scalars, "Node": st.one_of(st.just("n1"),
                                                                          scalars)})


def _post(control, path, body) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, raw = control.client.request("POST", path, data, {"Content-Type":
                                                              "application/json"})
    assert status < 500, (path, body, raw[:500])
    json.loads(raw)             # always a JSON answer
    return status


@SETTINGS
@given(body=st.one_of(reviews, json_values))
def test_webhook_fuzz(control, body):
    _post(control, "/webhook", body)


@SETTINGS
@given(body=st.one_of(filter_args, json_values))
def test_filter_fuzz(control, core_v1, body):
    if not control.plane.state.node_names():
        add_gpu_node(core_v1, "n1")
        eventually(lambda: control.plane.state.node_names())
    _post(control, "/filter", body)


@SETTINGS
@given(body=st.one_of(bind_args, json_values, st.binary(max_size=64)))
def test_bind_fuzz(control, body):
    _post(control, "/bind", body)
    assert control.client.request("GET", "/healthz")[0] == 200


