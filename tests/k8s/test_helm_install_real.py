"""hami-py installed with its Helm chart on the real cluster (its own cluster, `--install
helm`): hami-control as the chart's Deployment (two replicas, kube-scheduler beside each) and
hami-node as its DaemonSet (init container installing the shim, hostPath mounts), from the
project's image imported into containerd. The demo's examples pass through that
installation; a rolling update of hami-control completes with no GPU given twice while pods
are being placed; a pod of an old-glibc image (Debian bullseye, glibc 2.31) gets the shim
through Allocate's mounts and /etc/ld.so.preload, and its memory cap holds; a short soak (its
pods created while the faults last) goes through a rolling update of hami-control and a helm
upgrade rolled back with no violation.

conftest.py runs this module before the others: the machine holds one real cluster at a time.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from hami_sim.demo.examples import load_examples
from hami_sim.demo.report import HEADERS, checks_text, format_table, pod_row
from hami_sim.demo.scenario import pod_gpus
from hami_sim.realcluster.images import BULLSEYE_IMAGE
from hami_sim.realcluster.cli import hints
from hami_sim.realcluster.installed import NAMESPACE, rollout_done
from hami_sim.realcluster.scenario import (container_log, run_real_scenario,
                                           unschedulable_message)
from hami_sim.soak.faults import INSTALLED_ONLY
from hami_sim.soak.run import Soak, SoakOptions
from hami_sim.soak.workload import Shape

from k8shelpers import (INFO, REPO, check_gpu_pods_seen, create, delete, forwarded_page, get, pod,
                        printed_commands, run_all, wait_phase)

pytestmark = pytest.mark.timeout(3600)
MiB = 1 << 20


def test_the_examples_pass_through_the_helm_installation(installed):
    examples = load_examples()
    result = run_real_scenario(installed, examples, installed.reporter, timeout=180)
    table = format_table(HEADERS, [pod_row(p) for p in result.pods])
    assert len(result.pods) == 6
    assert result.ok and not result.timed_out, f"\n{table}\n{checks_text(result.pods)}"


def big_a100(name: str, command) -> dict:
    """A pod asking for most of an A100: two of them never fit on one GPU."""
    return pod(name, {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}},
               command, annotations={"nvidia.com/use-gputype": "A100"})


def gpus_of(p: dict) -> set:
    return {d.uuid for ctr in pod_gpus(p) for d in ctr}


def scheduled_events(c, name: str) -> list:
    """The Scheduled events kube-scheduler wrote for a pod."""
    events = json.loads(c.core_v1.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name}",
        _preload_content=False).data)["items"]
    return [e for e in events if e.get("reason") == "Scheduled"]


def wait_until(what: str, check, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} after {timeout:.0f} s"
        time.sleep(0.5)


def test_a_rolling_update_of_hami_control_completes_and_gives_no_gpu_twice(installed):
    """Both A100s held by pods the old replicas placed; a rolling update replaces every
    replica (a pod placed meanwhile runs); the new leader still sees both A100s taken: two more
    such pods wait, with the extender's reason, until the first two are gone."""
    c = installed
    holders, later = ["hold-0", "hold-1"], ["after-0", "after-1"]
    for name in holders:
        create(c, big_a100(name, ["sleep", "600"]))
    try:
        for name in holders:
            wait_phase(c, name, ("Running",), timeout=90)
        c.kubectl("rollout", "restart", "deployment/hami-control", "-n", NAMESPACE)
        create(c, pod("during", {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "512"}}))
        wait_until("hami-control's rolling update not done", lambda: rollout_done(c))
        assert wait_phase(c, "during", timeout=90)["status"]["phase"] == "Succeeded"
        assert not c.problems(), c.problems()
        for name in later:
            create(c, big_a100(name, INFO))
        for name in later:
            wait_until(f"{name} not refused by the extender",
                       lambda: "CardInsufficientMemory" in unschedulable_message(get(c, name)))
        assert gpus_of(get(c, holders[0])) | gpus_of(get(c, holders[1])) and \
            not gpus_of(get(c, holders[0])) & gpus_of(get(c, holders[1]))
        delete(c, *holders)
        for name in later:
            done = wait_phase(c, name, timeout=120)
            assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])[:1500]
        for name in holders + later + ["during"]:
            assert len(scheduled_events(c, name)) == 1, f"{name} bound more than once"
        replicas = c.kubectl("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name="
                             "hami-control", "-o", "jsonpath={.items[*].metadata.name}").split()
        assert len(replicas) == 2
    finally:
        delete(c, *holders, *later, "during")


# In the bullseye image (no project code there): the glibc the process runs on, whether the
# shim was preloaded, and the driver's answers under the cap (ctypes, as a framework reaches
# it): what is free once the context took its share, half of that allocated, then all of it.
PROBE = """
import ctypes, json, platform
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx, a, b = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64()
free, total = ctypes.c_size_t(), ctypes.c_size_t()
setup = [cu.cuInit(0), cu.cuDeviceGet(ctypes.byref(dev), 0),
         cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev),
         cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))]
half = cu.cuMemAlloc_v2(ctypes.byref(a), ctypes.c_size_t(free.value // 2))
whole = cu.cuMemAlloc_v2(ctypes.byref(b), ctypes.c_size_t(free.value))
print(json.dumps({"libc": platform.libc_ver(), "setup": setup, "free": free.value,
                  "total": total.value, "half": half, "whole": whole,
                  "preload": open("/etc/ld.so.preload").read().split(),
                  "shim": "libvgpu.so" in open("/proc/self/maps").read()}))
"""


def test_an_old_glibc_image_gets_the_shim_and_its_cap_holds(installed):
    c = installed
    body = pod("old-glibc", {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}},
               ["python3", "-c", PROBE])
    body["spec"]["containers"][0]["image"] = BULLSEYE_IMAGE
    create(c, body)
    try:
        done = wait_phase(c, "old-glibc", timeout=90)
        text = container_log(c.core_v1, done, "main")
        assert done["status"]["phase"] == "Succeeded", text
        out = json.loads(text.strip().splitlines()[-1])
        assert out["libc"] == ["glibc", "2.31"]
        assert out["shim"] and out["preload"] and out["preload"][0].endswith("libvgpu.so")
        # The device is as big as the cap; half of what is left fits, then all of it does
        # not: out of memory (2) at the cap.
        assert (out["setup"], out["total"]) == ([0, 0, 0, 0], 1024 * MiB)
        assert 0 < out["free"] < out["total"]
        assert (out["half"], out["whole"]) == (0, 2)
    finally:
        delete(c, "old-glibc")


def test_every_command_the_hints_print_runs_as_printed(installed):
    """What `cluster up --real --install helm` prints: the GPU pods' output and hami-smi
    inside one, the agents' logs, the dashboard through `kubectl port-forward`."""
    said = run_all(printed_commands(hints(installed, installed.kubeconfig)))
    check_gpu_pods_seen(said)
    assert "GPU 0: GPU-" in said[f"-n {NAMESPACE} logs ds/hami-node"]
    assert "serving" in said[f"-n {NAMESPACE} logs deploy/hami-control -c hami-control"]
    (forward,) = [k for k in said if " port-forward " in f" {k}"]
    assert [n["name"] for n in json.loads(said[forward])["nodes"]] == ["node-a"]


def test_the_readmes_dashboard_commands_run_as_printed(installed):
    """The README's `kubectl port-forward`s to the chart's dashboard (any replica, then the
    leader), with kubectl on PATH and the cluster as the current kubeconfig."""
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"^ *(kubectl -n \S+ port-forward .*)$", readme, re.M)
    assert len(commands) == 2, commands
    env = {**os.environ, "KUBECONFIG": str(installed.kubeconfig),
           "PATH": f"{Path(installed.bins['kubectl']).parent}:{os.environ['PATH']}"}
    for command in commands:
        snapshot = json.loads(forwarded_page(command, env))
        assert [len(n["gpus"]) for n in snapshot["nodes"]] == [len(installed.spec.gpus)]


# The two kinds only the installed mode has, at 15 s and 65 s into 85 s of pods (one fault on
# hami-control at a time: the second waits for the first to recover).
SHORT_SOAK = SoakOptions(duration_s=85, rate=0.2, fault_gap_s=50, kinds=INSTALLED_ONLY,
                         shape=Shape(short_s=(2, 5), long_s=(15, 30)), wait_cleanup=False,
                         drain_s=90)


def test_a_short_soak_through_a_rolling_update_and_a_helm_rollback_has_no_violation(installed):
    report = Soak(installed, SHORT_SOAK, out=sys.stdout).run()
    print(report.text())
    assert report.injected == report.planned == 2, report.text()
    assert sorted(report.faults) == sorted(INSTALLED_ONLY), report.text()
    assert not report.unrecovered and not report.violations, report.text()
    assert not report.not_serving and not report.audit_errors, report.text()
    # The auditor judged pods, their processes by the driver and hami-node's metrics (read
    # from its DaemonSet pod).
    assert report.ran >= 8 and report.audit_processes >= 2, report.text()
    assert report.audit_metrics >= 2, report.text()
