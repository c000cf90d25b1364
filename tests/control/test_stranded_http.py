"""A pod that asks for GPU slices but never went through the webhook (default scheduler) gets
one Warning Event that names the cause and the fix; pods that chose another scheduler or opted
out are left alone."""
import time

from ctlhelpers import gpu_pod
from hami_control.cluster.stranded import REASON
from hami_sim.testing import wait_for

GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1024}


def _warnings(core_v1, name):
    return [e for e in core_v1.list_namespaced_event("default").items
            if e.involved_object.name == name and e.reason == REASON]


def _create(core_v1, name, scheduler=None, labels=None):
    pod = gpu_pod(name, GPU)
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    if labels:
        pod["metadata"]["labels"] = labels
    core_v1.create_namespaced_pod("default", pod)      # straight in: no webhook


def test_a_pod_the_webhook_never_saw_is_told_once(control, core_v1):
    _create(core_v1, "bypassed")
    (event,) = wait_for(lambda: _warnings(core_v1, "bypassed"), timeout=10,
                        what="the GPUWebhookBypassed event")
    assert event.type == "Warning" and "schedulerName is default-scheduler" in event.message
    assert "caBundle" in event.message and "hami-scheduler" in event.message
    core_v1.patch_namespaced_pod("bypassed", "default", {"metadata": {"labels": {"x": "y"}}})
    _create(core_v1, "other-scheduler", scheduler="my-scheduler")
    _create(core_v1, "opted-out", labels={"hami.io/webhook": "ignore"})
    _create(core_v1, "marker")                        # its event shows the others were seen
    wait_for(lambda: _warnings(core_v1, "marker"), timeout=10, what="the marker's event")
    time.sleep(0.3)
    assert len(_warnings(core_v1, "bypassed")) == 1   # once, not per update
    assert not _warnings(core_v1, "other-scheduler") and not _warnings(core_v1, "opted-out")
