"""Allocate while hami-node cannot reach the API (its RBAC binding removed for a moment):
real kubelet never retries a failed Allocate, the pod fails for good with
UnexpectedAdmissionError; so hami-node waits a short outage out (up to RETRY_BUDGET_S) and the
pod runs. The kubelet double retried, which hid this."""
from __future__ import annotations

import time

import pytest

from hami_node.plugin.allocator import RETRY_BUDGET_S
from hami_sim.realcluster.config import deploy_docs

from k8shelpers import create, delete, pod, wait_phase

pytestmark = pytest.mark.timeout(3600)
GPU = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "512"}}
SAID = "cannot look up the pod being started"
LOCK_WAIT_S = 90      # well under the lock's 5-minute expiry


def node_binding() -> dict:
    """deploy/'s ClusterRoleBinding of hami-node."""
    return next(d for d in deploy_docs("hami-node.yaml") if d["kind"] == "ClusterRoleBinding")


def said_count(cluster) -> int:
    """How often hami-node has logged a failed lookup."""
    return cluster.node.agent_log.read_text(errors="replace").count(SAID)


def test_short_outage_is_waited_out_and_a_long_one_fails_the_pod(real_cluster):
    c = real_cluster
    try:
        before = said_count(c)
        c.kubectl("delete", "clusterrolebinding", "hami-node")
        try:
            create(c, pod("short-outage", GPU))
            deadline = time.monotonic() + 60
            while said_count(c) == before and time.monotonic() < deadline:
                time.sleep(0.2)
            assert said_count(c) > before, "Allocate never met the outage"
        finally:
            c.apply([node_binding()])
        done = wait_phase(c, "short-outage")
        assert done["status"]["phase"] == "Succeeded", done["status"]

        c.kubectl("delete", "clusterrolebinding", "hami-node")
        try:
            create(c, pod("long-outage", GPU))
            failed = wait_phase(c, "long-outage", ("Failed", "Succeeded"),
                                timeout=60 + RETRY_BUDGET_S)
        finally:
            c.apply([node_binding()])
        status = failed["status"]
        assert status["phase"] == "Failed" and status.get("reason") == \
            "UnexpectedAdmissionError", status
        assert SAID in status.get("message", ""), status
        assert c.node.alive()
        # The failed pod kept the node lock (hami-node could not reach the API to release it);
        # it will never be allocated, so the next pod must not wait out the lock's expiry.
        started = time.monotonic()
        create(c, pod("after-outage", GPU))
        after = wait_phase(c, "after-outage", timeout=LOCK_WAIT_S)
        assert after["status"]["phase"] == "Succeeded", after["status"]
        assert time.monotonic() - started < LOCK_WAIT_S
    finally:
        delete(c, "short-outage", "long-outage", "after-outage")
