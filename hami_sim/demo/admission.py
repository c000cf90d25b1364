"""Admission in the simulated cluster: the API server double calls hami-control's mutating
webhook at pod creation, as a real API server does (hami_sim/apiserver/webhooks.py), once
`register_webhook` has stored deploy/'s MutatingWebhookConfiguration pointing at the running
hami-control (SimCluster does at start). Pods users create with kubectl go the same way.

- `register_webhook(core_api_client, url, ca_pem)`: deploy/hami-control-webhook.yaml with
  `clientConfig.url` and the CA instead of the Service (the double routes no Services);
- `submit(core_v1, pod, namespace)`: creates the pod; a denial by the webhook is raised as
  AdmissionDenied with the API server's message.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

WEBHOOK_MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "hami-control-webhook.yaml"
_DENIED = "denied the request"


class AdmissionDenied(Exception):
    """The webhook denied the pod; the message is the API server's."""


def webhook_configuration(url: str, ca_pem: str) -> dict:
    """deploy/'s MutatingWebhookConfiguration, calling url with ca_pem as its caBundle."""
    config = yaml.safe_load(WEBHOOK_MANIFEST.read_text())
    for hook in config["webhooks"]:
        path = (hook.get("clientConfig") or {}).get("service", {}).get("path", "/webhook")
        hook["clientConfig"] = {"url": url.rstrip("/") + path,
                                "caBundle": base64.b64encode(ca_pem.encode()).decode()}
    return config


def register_webhook(api_client, url: str, ca_pem: str) -> None:
    """Stores the webhook configuration in the API server (replacing an earlier one)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    api = client.AdmissionregistrationV1Api(api_client)
    config = webhook_configuration(url, ca_pem)
    try:
        api.delete_mutating_webhook_configuration(config["metadata"]["name"])
    except ApiException as e:
        if e.status != 404:
            raise
    api.create_mutating_webhook_configuration(config, _preload_content=False)


def submit(core_v1, pod: dict, namespace: str = "default") -> dict:
    """Creates pod (the API server calls the webhook); the created pod (dict)."""
    from kubernetes.client.rest import ApiException
    try:
        resp = core_v1.create_namespaced_pod(namespace, pod, _preload_content=False)
    except ApiException as e:
        message = ""
        try:
            message = json.loads(e.body or "{}").get("message") or ""
        except ValueError:
            pass
        if _DENIED in message:
            raise AdmissionDenied(message) from e
        raise
    return json.loads(resp.data)
