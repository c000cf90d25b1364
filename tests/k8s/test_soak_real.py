"""The short soak (`make soak` runs an hour): the openb mix created and deleted at a steady rate
on a real cluster of its own while every fault kind hits it once, some overlapping, judged by
the independent auditor: no violation, every fault recovered. And the auditor is shown to
catch a bug: the test itself acts as a rogue binder through the API server (it books a GPU
already in use without the node lock), and the auditor reports the double booking."""
from __future__ import annotations

import sys
import time

import pytest

from hami_common import constants as C
from hami_common import pod_devices
from hami_common.pod_devices import ContainerDevice
from hami_sim.audit.given import usage
from hami_sim.soak.run import Soak, SoakOptions
from hami_sim.soak.workload import Shape

from k8shelpers import create, delete, pod

pytestmark = pytest.mark.timeout(3600)
SHORT = SoakOptions(duration_s=120, rate=0.2, fault_gap_s=12,
                    shape=Shape(short_s=(2, 5), long_s=(15, 35)), drain_s=150)
ROGUE = "rogue-double-booked"


def test_short_soak_with_every_fault_has_no_violation(soak_cluster):
    report = Soak(soak_cluster, SHORT, out=sys.stdout).run()
    print(report.text())
    assert report.injected == report.planned == len(SHORT.kinds) == 9, report.text()
    assert not report.unrecovered, report.text()
    assert not report.violations, report.text()
    assert not report.not_serving and not report.audit_errors, report.text()
    # The auditor's rules had something to judge: pods, and their processes by the driver.
    assert report.ran >= 10 and report.audit_passes >= 20, report.text()
    assert report.audit_processes >= 3 and report.audit_metrics >= 3, report.text()


def rogue_binder(found: dict):
    """A binder that skips the node lock: once a soak pod holds a GPU, a pod of its own is
    given that whole GPU (annotations as hami-control writes them) and bound to the node
    through the binding subresource, as any client with bind rights could."""
    def side(soak: Soak) -> None:
        c = soak.c
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snap = soak.snapshot()
            gpus, _ = usage(snap.nodes, snap.pods)
            busy = [u for u in gpus.values() if u.pods]
            if busy:
                break
            time.sleep(1)
        else:
            found["error"] = "no soak pod held a GPU within 60 s"
            return
        target = busy[0]
        d = target.device
        given = pod_devices.encode([[ContainerDevice(d.id, d.devmem, 100)]])
        body = pod(ROGUE, {"limits": {C.RESOURCE_GPU: "1"}},
                   ["python3", "-c", "import time; time.sleep(30)"],
                   labels={C.LABEL_WEBHOOK: C.LABEL_WEBHOOK_IGNORE},
                   annotations={C.ANNO_DEVICES_TO_ALLOCATE: given,
                                C.ANNO_DEVICES_ALLOCATED: given,
                                C.ANNO_VGPU_NODE: target.node,
                                C.ANNO_BIND_PHASE: C.BIND_PHASE_ALLOCATING})
        body["spec"]["schedulerName"] = "rogue-binder"
        create(c, body)
        c.core_v1.create_namespaced_binding("default", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": ROGUE},
            "target": {"apiVersion": "v1", "kind": "Node", "name": target.node}},
            _preload_content=False)
        bound = time.monotonic()
        found["gpu"] = d.id
        while time.monotonic() < bound + 60:
            hits = [v for v in soak.auditor.violations
                    if v.check == "overcommit" and f"pod/default/{ROGUE}" in v.objects]
            if hits:
                found["violation"], found["after_s"] = hits[0], time.monotonic() - bound
                break
            time.sleep(0.5)
        delete(c, ROGUE)
    return side


def test_a_bind_that_skips_the_lock_is_reported(soak_cluster):
    found: dict = {}
    options = SoakOptions(duration_s=35, rate=0.2, kinds=(), wait_cleanup=False,
                          shape=Shape(short_s=(15, 25), long_s=(15, 25)))
    soak = Soak(soak_cluster, options, out=sys.stdout, side=rogue_binder(found))
    report = soak.run()
    print(report.text())
    assert "error" not in found, found
    assert "violation" in found, f"the auditor did not report the double booking: {found}\n" \
                                 f"{report.text()}"
    v = found["violation"]
    assert f"gpu/{found['gpu']}" in v.objects and any(
        o.startswith("pod/default/soak-") for o in v.objects), v
    assert found["after_s"] < 15, found
    assert v in report.violations
