"""hami-py installed with its Helm chart on the real cluster (its own cluster, `--install
helm`): hami-control as the chart's Deployment (two replicas, kube-scheduler beside each) and
hami-node as its DaemonSet (init container installing the shim, hostPath mounts), from the
project's image imported into containerd. The demo's examples pass through that
installation; a rolling update of hami-control completes with no GPU given twice while pods
are being placed; a pod of an old-glibc image (Debian bullseye, glibc 2.31) gets the shim
through Allocate's mounts and /etc/ld.so.preload, and its memory cap holds.

conftest.py runs this module before the others: the machine holds one real cluster at a time.
"""
from __future__ import annotations

import io
import json
import os
import time

import pytest

from hami_sim.demo.examples import load_examples
from hami_sim.demo.report import HEADERS, Reporter, checks_text, format_table, pod_row
from hami_sim.realcluster.cluster import RealCluster
from hami_sim.realcluster.images import BULLSEYE_IMAGE
from hami_sim.realcluster.installed import NAMESPACE, rollout_done
from hami_sim.realcluster.scenario import container_log, run_real_scenario

from k8shelpers import create, delete, get, pod, wait_phase

pytestmark = pytest.mark.timeout(3600)
MiB = 1 << 20


@pytest.fixture(scope="module")
def installed():
    """The real cluster with hami-py installed by `helm install` (stopped at the module's
    end)."""
    if os.geteuid() != 0:
        pytest.fail("tests/k8s runs kubelet and containerd, which need root")
    reporter = Reporter(io.StringIO(), tty=False)
    cluster = RealCluster(step=reporter.step, install="helm")
    cluster.reporter = reporter
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_the_examples_pass_through_the_helm_installation(installed):
    examples = load_examples()
    result = run_real_scenario(installed, examples, installed.reporter, timeout=180)
    table = format_table(HEADERS, [pod_row(p) for p in result.pods])
    assert len(result.pods) == 6
    assert result.ok and not result.timed_out, f"\n{table}\n{checks_text(result.pods)}"


def big_a100(name: str) -> dict:
    """A pod holding most of an A100 for a few seconds: two of them never fit on one GPU."""
    return pod(name, {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}},
               ["python3", "-m", "hami_sim.demo.workloads", "compute", "--seconds", "3",
                "--hold-mib", "256"], annotations={"nvidia.com/use-gputype": "A100"})


def running_span(p: dict) -> tuple:
    """When the pod's container started and finished (RFC 3339 strings sort in time)."""
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    return term["startedAt"], term["finishedAt"]


def gpus_of(p: dict) -> set:
    from hami_sim.demo.scenario import pod_gpus
    return {d.uuid for ctr in pod_gpus(p) for d in ctr}


def scheduled_events(c, name: str) -> list:
    """The Scheduled events kube-scheduler wrote for a pod."""
    events = json.loads(c.core_v1.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name}",
        _preload_content=False).data)["items"]
    return [e for e in events if e.get("reason") == "Scheduled"]


def test_a_rolling_update_of_hami_control_completes_and_gives_no_gpu_twice(installed):
    c = installed
    names = [f"roll-{i}" for i in range(4)]
    c.kubectl("rollout", "restart", "deployment/hami-control", "-n", NAMESPACE)
    try:
        for name in names:          # placed while replicas come and go, two A100s for four
            create(c, big_a100(name))
        deadline = time.monotonic() + 120
        while not rollout_done(c):
            assert time.monotonic() < deadline, c.kubectl("get", "deploy,pods", "-n", NAMESPACE)
            time.sleep(0.5)
        pods = {n: wait_phase(c, n, timeout=150) for n in names}
        assert not c.problems(), c.problems()
        for n, p in pods.items():
            assert p["status"]["phase"] == "Succeeded", (
                f"{n}: {json.dumps(p['status'])[:1500]}\n"
                f"{container_log(c.pod_logs, p, 'main')[-1500:]}")
        for n in names:
            assert len(scheduled_events(c, n)) == 1, f"{n} bound more than once"
        # Pods that got the same GPU ran one after the other, never together.
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if gpus_of(pods[a]) & gpus_of(pods[b]):
                    (a0, a1), (b0, b1) = running_span(pods[a]), running_span(pods[b])
                    assert a1 <= b0 or b1 <= a0, f"{a} and {b} held one A100 at once"
        new = c.kubectl("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name="
                        "hami-control", "-o", "jsonpath={.items[*].metadata.name}").split()
        assert len(new) == 2
    finally:
        delete(c, *names)


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
        text = container_log(c.pod_logs, done, "main")
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
