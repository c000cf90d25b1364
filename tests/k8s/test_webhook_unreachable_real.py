"""The webhook unreachable, with deploy/'s configuration: matchConditions send only pods that
ask for our resources, and failurePolicy Fail refuses those with the API server's error naming
the webhook, while every other pod is created as usual (the real API server compiles and
evaluates the CEL). And should a GPU pod get past the webhook anyway (an older manifest with
failurePolicy Ignore), hami-control's leader says so on the pod with a GPUWebhookBypassed
Event instead of leaving it silently Pending."""
from __future__ import annotations

import copy
import json
import time

import pytest
from kubernetes.client.rest import ApiException

from hami_sim.realcluster import config as cfg
from hami_sim.realcluster.cluster import free_port

from k8shelpers import create, delete, pod

pytestmark = pytest.mark.timeout(3600)
GPU = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "512"}}
CPU_ONLY = {"limits": {"cpu": "100m"}}


def _unreachable(c, policy=None) -> dict:
    config = cfg.webhook_config(f"https://127.0.0.1:{free_port()}", c.pki.ca.read_bytes())
    if policy:
        config = copy.deepcopy(config)
        for hook in config["webhooks"]:
            hook["failurePolicy"] = policy
    return config


def test_gpu_pods_are_refused_clearly_and_others_pass(real_cluster):
    c = real_cluster
    c.apply([_unreachable(c)])                                           # nobody there
    try:
        with pytest.raises(ApiException) as refused:
            create(c, pod("no-webhook", GPU))
        plain = create(c, pod("plain", CPU_ONLY))                        # not sent to us
    finally:
        c.apply([cfg.webhook_config(c.control.url, c.pki.ca.read_bytes())])
    try:
        assert refused.value.status == 500, refused.value.body
        message = json.loads(refused.value.body)["message"]
        assert 'failed calling webhook "pods.hami-control.hami.io"' in message, message
        assert plain["spec"]["schedulerName"] == "default-scheduler"
        again = create(c, pod("webhook-back", GPU))                      # reachable again
        assert again["spec"]["schedulerName"] == "hami-scheduler"
    finally:
        delete(c, "plain", "webhook-back")


def test_a_gpu_pod_that_got_past_the_webhook_is_told_why(real_cluster):
    c = real_cluster
    c.apply([_unreachable(c, policy="Ignore")])                          # an older manifest
    try:
        created = create(c, pod("bypassed", GPU))
    finally:
        c.apply([cfg.webhook_config(c.control.url, c.pki.ca.read_bytes())])
    try:
        assert created["spec"]["schedulerName"] == "default-scheduler"
        deadline, events = time.monotonic() + 60, []
        while not events and time.monotonic() < deadline:
            events = [e for e in c.core_v1.list_namespaced_event("default").items
                      if e.involved_object.name == "bypassed"
                      and e.reason == "GPUWebhookBypassed"]
            time.sleep(0.5)
        assert events, "no GPUWebhookBypassed event on the pod"
        assert "caBundle" in events[0].message and "hami-scheduler" in events[0].message
    finally:
        delete(c, "bypassed")
