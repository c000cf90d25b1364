"""The cells kubectl shows for pods, computed as Kubernetes' printers do (pure functions)."""
import pytest

from hami_sim.apiserver.table_rows import pod_row

AGE = lambda stamp: "5m" if stamp else "<unknown>"  # noqa: E731 (a fixed clock)


def pod(containers=(), init=(), statuses=(), init_statuses=(), phase="Pending", **extra):
    spec = {"containers": [{"name": c} for c in containers],
            "initContainers": [dict(name=n, **opts) for n, opts in init]}
    status = {"phase": phase, "containerStatuses": list(statuses),
              "initContainerStatuses": list(init_statuses), **extra.pop("status", {})}
    return {"metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z", **extra},
            "spec": spec, "status": status}


def running(name, ready=True, restarts=0, finished=""):
    cs = {"name": name, "ready": ready, "restartCount": restarts, "state": {"running": {}}}
    if finished:
        cs["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": finished}}
    return cs


def terminated(name, code=0, reason="", signal=0):
    return {"name": name, "ready": False, "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "reason": reason, "signal": signal}}}


def waiting(name, reason):
    return {"name": name, "ready": False, "restartCount": 0,
            "state": {"waiting": {"reason": reason}}}


CASES = {
    "pending": (pod(["a"]), "0/1", "Pending", "0"),
    "init waiting": (pod(["a"], [("i1", {}), ("i2", {})],
                         init_statuses=[terminated("i1"), waiting("i2", "PodInitializing")]),
                     "0/1", "Init:1/2", "0"),
    "init crash": (pod(["a"], [("i1", {})], init_statuses=[waiting("i1", "CrashLoopBackOff")]),
                   "0/1", "Init:CrashLoopBackOff", "0"),
    "init exit code": (pod(["a"], [("i1", {})], init_statuses=[terminated("i1", 2)]),
                       "0/1", "Init:ExitCode:2", "0"),
    "init signal": (pod(["a"], [("i1", {})], init_statuses=[terminated("i1", 137, signal=9)]),
                    "0/1", "Init:Signal:9", "0"),
    "sidecar counts": (pod(["a"], [("s", {"restartPolicy": "Always"})], phase="Running",
                           init_statuses=[dict(running("s", restarts=1,
                                                       finished="2020-01-01T00:01:00Z"),
                                               started=True)],
                           statuses=[running("a", restarts=2, finished="2020-01-01T00:02:00Z")]),
                       "2/2", "Running", "3 (5m ago)"),
    "crash loop": (pod(["a", "b"], phase="Running",
                       statuses=[running("a"), waiting("b", "CrashLoopBackOff")]),
                   "1/2", "CrashLoopBackOff", "0"),
    "completed": (pod(["a"], phase="Succeeded", statuses=[terminated("a", 0, "Completed")]),
                  "0/1", "Completed", "0"),
    "error": (pod(["a"], phase="Failed", statuses=[terminated("a", 1, "Error")]),
              "0/1", "Error", "0"),
    "still running": (pod(["a", "b"], phase="Running",
                          statuses=[running("a"), terminated("b", 0, "Completed")],
                          status={"conditions": [{"type": "Ready", "status": "True"}]}),
                      "1/2", "Running", "0"),
    "not ready": (pod(["a", "b"], phase="Running",
                      statuses=[running("a"), terminated("b", 0, "Completed")]),
                  "1/2", "NotReady", "0"),
    "terminating": (pod(["a"], phase="Running", statuses=[running("a")],
                        deletionTimestamp="2020-01-01T00:05:00Z"), "1/1", "Terminating", "0"),
    "gated": (pod(["a"], status={"conditions": [{"type": "PodScheduled", "status": "False",
                                                 "reason": "SchedulingGated"}]}),
              "0/1", "SchedulingGated", "0"),
    "evicted": (pod(["a"], phase="Failed", status={"reason": "Evicted"}), "0/1", "Evicted",
                "0"),
}


@pytest.mark.parametrize("obj, ready, status, restarts", CASES.values(), ids=CASES.keys())
def test_pod_ready_status_restarts(obj, ready, status, restarts):
    assert pod_row(obj, AGE)[1:4] == [ready, status, restarts]
