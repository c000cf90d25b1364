"""The webhook unreachable, with deploy/'s failurePolicy Ignore: what deploy/ promises is
that the cluster is not blocked (the pod is created) and a GPU pod is not silently placed
without its limits: it waits unscheduled, and the default scheduler says which GPU resource no
node offers to it."""
from __future__ import annotations

import time

import pytest

from hami_sim.realcluster import config as cfg
from hami_sim.realcluster.cluster import free_port
from hami_sim.realcluster.scenario import unschedulable_message

from k8shelpers import create, delete, get, pod

pytestmark = pytest.mark.timeout(3600)
GPU = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "512"}}


def test_webhook_unreachable_pod_created_but_left_unscheduled(real_cluster):
    c = real_cluster
    ca = c.pki.ca.read_bytes()
    c.apply([cfg.webhook_config(f"https://127.0.0.1:{free_port()}", ca)])   # nobody there
    try:
        created = create(c, pod("no-webhook", GPU))
    finally:
        c.apply([cfg.webhook_config(c.control.url, ca)])
    try:
        assert created["spec"]["schedulerName"] == "default-scheduler"
        assert not any(k.startswith("hami.io/") for k in
                       (created["metadata"].get("annotations") or {}))
        deadline = time.monotonic() + 60
        while not unschedulable_message(get(c, "no-webhook")) and time.monotonic() < deadline:
            time.sleep(0.5)
        current = get(c, "no-webhook")
        assert current["spec"].get("nodeName") is None
        assert "Insufficient nvidia.com/gpumem" in unschedulable_message(current), \
            current["status"]
        # Reachable again: the next pod goes through hami-control.
        again = create(c, pod("webhook-back", GPU))
        assert again["spec"]["schedulerName"] == "hami-scheduler"
    finally:
        delete(c, "no-webhook", "webhook-back")
