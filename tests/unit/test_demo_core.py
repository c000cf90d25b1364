"""The demo's pure parts: the expectation language and its checks, example loading,
kube-scheduler's message, admission helpers, the report, the runtime's small rules."""
import io
import textwrap

import pytest

from hami_sim.demo import expect
from hami_sim.demo.admission import webhook_configuration
from hami_sim.demo.examples import ExampleError, load_examples, quantities_as_strings
from hami_sim.demo.expect import (MIB, Check, ContainerOutcome, Expectation, ExpectationError,
                                  PodOutcome, evaluate, parse)
from hami_sim.demo.report import Reporter, format_table, outcome_cell, pod_row, short_type
from hami_sim.demo.runtime import local_command, workload_result
from hami_sim.demo.scheduler import Attempt, RefusalNews, fit_error, node_schedulable

UUID_A, UUID_B = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-0000"


@pytest.mark.parametrize("text, want", [
    ("succeeds", Expectation("succeeds")),
    (" succeeds ;oom-at-limit; ", Expectation("succeeds", oom_at_limit=True)),
    ("succeeds; share-near-limit", Expectation("succeeds", share_tolerance=5.0)),
    ("succeeds; share-near-limit=2.5", Expectation("succeeds", share_tolerance=2.5)),
    ("succeeds; same-gpu-as=b; gpu-type=Tesla T4",
     Expectation("succeeds", same_gpu_as="b", gpu_type="Tesla T4")),
    ("pending; reason=CardInsufficientMemory",
     Expectation("pending", reason="CardInsufficientMemory")),
], ids=["plain", "spaces", "share-default", "share-value", "several", "pending"])
def test_expectations_parse(text, want):
    assert parse(text) == want


@pytest.mark.parametrize("text, says", [
    ("", "neither"),
    ("oom-at-limit", "neither"),
    ("succeeds; pending", "both"),
    ("succeeds; fast", "unknown clause 'fast'"),
    ("succeeds; same-gpu-as", "unknown clause"),
    ("succeeds; share-near-limit=lots", "give a number"),
    ("succeeds; share-near-limit=-1", "give a number"),
    ("pending; oom-at-limit", "only reason= applies"),
], ids=["empty", "no-outcome", "both", "unknown", "no-value", "nan", "negative", "pending-runs"])
def test_bad_expectations_say_what_to_fix(text, says):
    with pytest.raises(ExpectationError, match=says):
        parse(text)


def oom_pod(held=1000, total=1024, limit=1024, error="CUDA_ERROR_OUT_OF_MEMORY"):
    c = ContainerOutcome("main", 0, [UUID_A], limit * MIB, held * MIB,
                         result={"error": error, "used_mib": held, "chunk_mib": 64,
                                 "total_mib": total})
    return PodOutcome("oom", "default", parse("succeeds; oom-at-limit"), phase="Succeeded",
                      node="n1", containers=[c])


@pytest.mark.parametrize("pod, ok", [
    (oom_pod(), True),
    (oom_pod(held=1024), True),
    (oom_pod(held=960), False),                  # refused a chunk that still fitted
    (oom_pod(held=1088), False),                 # held past the limit
    (oom_pod(total=40960), False),               # saw the physical size, not the limit
    (oom_pod(error=None), False),
], ids=["one-chunk-below", "exactly", "too-early", "past", "physical-size", "no-oom"])
def test_oom_at_limit(pod, ok):
    checks = evaluate(pod, {})
    assert [c.clause for c in checks] == ["succeeds", "oom-at-limit"]
    assert checks[1].ok is ok


def share_pod(name, share, limit=30, uuid=UUID_A, node="n1"):
    c = ContainerOutcome("main", 0, [uuid], cores_limit=limit, share=share)
    return PodOutcome(name, "default", parse("succeeds; share-near-limit=5; same-gpu-as=b"),
                      phase="Succeeded", node=node, containers=[c])


def test_share_near_limit_and_same_gpu():
    a, b = share_pod("a", 33.0), share_pod("b", 24.0)
    checks = {c.clause: c.ok for c in evaluate(a, {"a": a, "b": b})}
    assert checks == {"succeeds": True, "share-near-limit=5": True, "same-gpu-as=b": True}
    assert not evaluate(b, {"a": a, "b": b})[1].ok            # 24 is 6 points under 30
    elsewhere = share_pod("b", 30.0, uuid=UUID_B)
    assert not evaluate(a, {"a": a, "b": elsewhere})[2].ok
    assert not evaluate(a, {"a": a})[2].ok                     # no such pod
    unmeasured = share_pod("a", None)
    assert not evaluate(unmeasured, {"b": b})[1].ok


def test_gpu_type_reason_and_outcomes():
    pod = PodOutcome("t4", "default", parse("succeeds; gpu-type=tesla t4"), phase="Succeeded",
                     node="n2", gpu_types={UUID_A: "NVIDIA-Tesla T4"},
                     containers=[ContainerOutcome("main", 0, [UUID_A],
                                                  result={"name": "Tesla T4"})])
    assert all(c.ok for c in evaluate(pod, {}))
    pod.containers[0].result["name"] = "NVIDIA A100-SXM4-40GB"
    assert not evaluate(pod, {})[1].ok
    pending = PodOutcome("big", "default", parse("pending; reason=CardInsufficientMemory"),
                         scheduler_message="0/2 nodes are available: ...",
                         failed_nodes={"n1": "2/2 CardInsufficientMemory",
                                       "n2": "1/2 CardTypeMismatch"})
    assert [c.ok for c in evaluate(pending, {})] == [True, False]
    bound = PodOutcome("x", "default", parse("pending"), node="n1", phase="Running")
    assert not evaluate(bound, {})[0].ok
    failed = PodOutcome("y", "default", parse("succeeds"), node="n1", phase="Failed",
                        containers=[ContainerOutcome("main", 1)])
    assert not evaluate(failed, {})[0].ok
    assert not PodOutcome("z", "default", parse("succeeds")).ok     # no checks: not ok


def write(tmp_path, name, text):
    (tmp_path / name).write_text(textwrap.dedent(text))


POD = """\
    apiVersion: v1
    kind: Pod
    metadata:
      name: {name}
      annotations:
        demo.hami.io/expect: "{expect}"
    spec:
      containers:
        - name: main
          image: busybox
          resources:
            limits:
              nvidia.com/gpu: 1
              cpu: 0.5
    """


def test_examples_load_in_file_order_with_quantities_as_strings(tmp_path):
    write(tmp_path, "02-b.yaml", POD.format(name="b", expect="succeeds; same-gpu-as=a"))
    write(tmp_path, "01-a.yaml", POD.format(name="a", expect="succeeds") + "---\n"
          + POD.format(name="c", expect="pending"))
    write(tmp_path, "notes.txt", "not an example")
    examples = load_examples(tmp_path)
    assert [e.name for e in examples] == ["a", "c", "b"]
    limits = examples[0].pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "cpu": "0.5"}
    assert examples[0].namespace == "default"


@pytest.mark.parametrize("files, says", [
    ({}, "no example manifests"),
    ({"a.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"}, "only Pods"),
    ({"a.yaml": "kind: Pod\nmetadata: {name: p}\n"}, "no demo.hami.io/expect"),
    ({"a.yaml": "kind: Pod\nmetadata: {generateName: p-}\n"}, "without metadata.name"),
    ({"a.yaml": POD.format(name="a", expect="succeeds"),
      "b.yaml": POD.format(name="a", expect="succeeds")}, "defined twice"),
    ({"a.yaml": POD.format(name="a", expect="succeeds; same-gpu-as=z")}, "no example defines"),
    ({"a.yaml": POD.format(name="a", expect="maybe")}, "unknown clause"),
    ({"a.yaml": "kind: Pod\n  bad: [indent\n"}, "cannot read it"),
], ids=["empty", "service", "no-expect", "generate-name", "twice", "unknown-pair", "bad-expect",
        "bad-yaml"])
def test_bad_examples_name_the_file_and_what_to_fix(tmp_path, files, says):
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(ExampleError, match=says):
        load_examples(tmp_path)


def test_the_repositorys_examples_load():
    examples = load_examples()
    assert len(examples) >= 5
    assert {e.expectation.outcome for e in examples} == {"succeeds", "pending"}
    for e in examples:
        [c] = e.pod["spec"]["containers"]
        assert c["image"] == "ghcr.io/hami-py/hami-py:0.1.0"
        assert c["command"][:3] == ["python3", "-m", "hami_sim.demo.workloads"]


def test_fit_error_is_kube_schedulers_message():
    assert fit_error(3, {"n1": "2/2 CardInsufficientMemory", "n2": "2/2 CardInsufficientMemory",
                         "n3": "NodeUnregistered"}) == \
        "0/3 nodes are available: 1 NodeUnregistered, 2 2/2 CardInsufficientMemory."
    assert fit_error(0, {}) == "0/0 nodes are available:"


def test_refusals_are_said_once_per_message():
    news = RefusalNews()
    first = news.line(Attempt("ns/p", message="0/2 nodes are available: 2 X."))
    assert first.endswith("(retried with a backoff)")
    assert news.line(Attempt("ns/p", message="0/2 nodes are available: 2 X.")) is None
    assert news.line(Attempt("ns/p", message="binding rejected: ...; kube-scheduler retries "
                                             "this pod")).endswith("retries this pod")
    assert news.line(Attempt("ns/p", node="n1")) is None


@pytest.mark.parametrize("node, ok", [
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True),
    ({"spec": {"unschedulable": True},
      "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, False),
    ({}, False),
], ids=["ready", "cordoned", "not-ready", "no-status"])
def test_candidate_nodes(node, ok):
    assert node_schedulable(node) is ok


def test_the_cluster_registers_deploys_webhook_by_url():
    config = webhook_configuration("https://127.0.0.1:4443/", "PEM")
    hook = config["webhooks"][0]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:4443/webhook",
                                    "caBundle": "UEVN"}
    assert hook["failurePolicy"] == "Fail" and hook["rules"][0]["resources"] == ["pods"]
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    assert quantities_as_strings(pod)["spec"]["containers"][0]["resources"]["limits"] == \
        {"nvidia.com/gpu": "1"}
    assert quantities_as_strings({"spec": {}}) == {"spec": {}}


def test_workload_result_and_local_command():
    text = 'hello\n{"hami-demo": {"mode": "oom"}}\n{"other": 1}\n'
    assert workload_result(text) == {"mode": "oom"}
    assert workload_result("no json\n{broken") == {}
    import sys
    assert local_command(["python3", "-m", "x"]) == [sys.executable, "-m", "x"]
    assert local_command(["sleep", "1"]) == ["sleep", "1"]


def test_table_and_cells():
    pod = oom_pod(held=1024)
    pod.gpu_types, pod.gpu_index = {UUID_A: "NVIDIA-Tesla T4"}, {UUID_A: 1}
    pod.checks = evaluate(pod, {})
    row = pod_row(pod)
    assert row[:4] == ("oom", "n1", "1 Tesla T4 (GPU-aaaaaaaa)", "1024 MiB/1024 MiB")
    assert row[5] == "Succeeded, CUDA_ERROR_OUT_OF_MEMORY at 1024 MiB used" and row[6] == "ok"
    pending = PodOutcome("big", "default", parse("pending"), scheduler_message="0/2 ...")
    assert outcome_cell(pending) == "Pending: 0/2 ..."
    assert short_type("NVIDIA A100-SXM4-40GB") == "A100-SXM4-40GB"
    assert format_table(("A", "BB"), [("xyz", "1")]) == "A    BB\nxyz  1"
    assert Check("c", True, "d").ok


def test_reporter_plain_lines_and_heartbeat():
    now = [100.0]
    out = io.StringIO()
    rep = Reporter(out, tty=False, clock=lambda: now[0], heartbeat=0.01)
    now[0] = 101.5
    rep.step("hello")
    with rep.waiting(lambda: "2/6 pods settled"):
        import time
        time.sleep(0.1)
    text = out.getvalue()
    assert text.startswith("[  1.5s] hello\n")
    assert "... 2/6 pods settled" in text and "\r" not in text
    tty = io.StringIO()
    spinner = Reporter(tty, tty=True, heartbeat=5)
    with spinner.waiting("starting"):
        import time
        time.sleep(0.25)
    spinner.step("done")
    assert "\r" in tty.getvalue() and "starting" in tty.getvalue()
    assert tty.getvalue().endswith("done\n")


def test_expectation_table_in_the_module_docstring_lists_every_clause():
    for clause in ("succeeds", "pending", "oom-at-limit", "share-near-limit", "same-gpu-as",
                   "gpu-type", "reason"):
        assert f"`{clause}" in expect.__doc__


def test_real_scenario_groups_the_pods_that_share_a_gpu():
    from hami_sim.demo.examples import load_examples
    from hami_sim.realcluster.scenario import example_groups
    groups = [[e.name for e in g] for g in example_groups(load_examples())]
    assert groups == [["gpumem-oom"], ["gpucores-30"], ["share-a", "share-b"], ["t4-only"],
                      ["too-big"]]
