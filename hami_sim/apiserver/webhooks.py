"""Mutating admission webhooks, called at CREATE as the real API server calls them.

The MutatingWebhookConfigurations stored in the double are read at each create: a webhook
whose rules match the resource and operation, and whose namespaceSelector and objectSelector
match, gets an AdmissionReview (the first of its admissionReviewVersions the double speaks) at
its `clientConfig.url`, checked against its caBundle; its JSON patch is applied to the object
before it is stored. A denial is the real server's error (the webhook's code, 400 when it gives
none, and `admission webhook "<name>" denied the request: <message>`); a webhook that cannot be
called fails the create with 500 under failurePolicy Fail (the v1 default) and is passed over
under Ignore.

What the double leaves out, and why: a webhook given by Service (the double routes no Services;
such a webhook is passed over), matchConditions (CEL; every object the rules and selectors
match is sent: hami-control's webhook answers the pods its conditions would skip unchanged),
reinvocation, and validating webhooks (none is used here).
"""
from __future__ import annotations

import base64
import json
import logging
import ssl
import urllib.request
import uuid
from typing import Callable

from .errors import ApiError
from .patch import json_patch
from .resources import Resource, lookup
from .selectors import selector_matches

log = logging.getLogger(__name__)
CONFIGURATIONS = lookup("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")
REVIEW_VERSIONS = ("v1", "v1beta1")


def _rule_matches(rule: dict, res: Resource, operation: str) -> bool:
    def has(field: str, value: str) -> bool:
        items = rule.get(field) or []
        return "*" in items or value in items
    return (has("operations", operation) and has("apiGroups", res.group)
            and has("apiVersions", res.version) and has("resources", res.name))


def _post(url: str, body: bytes, ca_bundle: str, timeout: float) -> dict:
    """POSTs an AdmissionReview; the decoded answer (raises OSError/ValueError on failure)."""
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context(
            cadata=base64.b64decode(ca_bundle).decode() if ca_bundle else None)
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
        return json.loads(resp.read())


def admission_review(obj: dict, kind: dict, resource: dict, namespace: str,
                     operation: str = "CREATE", version: str = "v1") -> dict:
    """The AdmissionReview request the API server sends a webhook about obj."""
    return {"apiVersion": f"admission.k8s.io/{version}", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "operation": operation, "kind": kind,
                        "resource": resource, "namespace": namespace,
                        "name": (obj.get("metadata") or {}).get("name", ""), "object": obj,
                        "oldObject": None, "dryRun": False,
                        "userInfo": {"username": "system:admin"}}}


class MutatingWebhooks:
    """admit(res, namespace, obj) -> (obj as the matching webhooks leave it, whether any of
    them patched it)."""

    def __init__(self, configurations: Callable[[], list], namespace_labels: Callable[[str], dict],
                 post: Callable[[str, bytes, str, float], dict] = _post):
        self.configurations, self.namespace_labels, self.post = \
            configurations, namespace_labels, post

    def admit(self, res: Resource, namespace: str | None, obj: dict,
              operation: str = "CREATE") -> tuple[dict, bool]:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        patched = False
        for config in sorted(self.configurations(), key=lambda c: c["metadata"]["name"]):
            for hook in config.get("webhooks") or []:
                if not any(_rule_matches(r, res, operation) for r in hook.get("rules") or []):
                    continue
                if not selector_matches(hook.get("objectSelector"), labels):
                    continue
                if res.namespaced and not selector_matches(
                        hook.get("namespaceSelector"), self.namespace_labels(namespace or "")):
                    continue
                obj, by_this = self._call(hook, res, namespace, obj, operation)
                patched = patched or by_this
        return obj, patched

    def _call(self, hook: dict, res: Resource, namespace, obj: dict,
              operation: str) -> tuple[dict, bool]:
        name = hook.get("name", "")
        url = (hook.get("clientConfig") or {}).get("url")
        if not url:
            log.info("webhook %s is given by Service, which the double cannot route: passed "
                     "over", name)
            return obj, False
        version = next((v for v in hook.get("admissionReviewVersions") or ["v1"]
                        if v in REVIEW_VERSIONS), None)
        if version is None:
            return self._failed(hook, obj, f"none of admissionReviewVersions "
                                           f"{hook.get('admissionReviewVersions')} is spoken")
        review = admission_review(
            obj, {"group": res.group, "version": res.version, "kind": res.kind},
            {"group": res.group, "version": res.version, "resource": res.name},
            namespace or "", operation, version)
        try:
            answer = self.post(url, json.dumps(review).encode(),
                               (hook.get("clientConfig") or {}).get("caBundle") or "",
                               float(hook.get("timeoutSeconds") or 10))
            response = answer["response"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            return self._failed(hook, obj, f'Post "{url}": {e}')
        if not response.get("allowed"):
            status = response.get("status") or {}
            raise ApiError(int(status.get("code") or 400), status.get("reason") or "BadRequest",
                           f'admission webhook "{name}" denied the request: '
                           f'{status.get("message") or "without explanation"}')
        if not response.get("patch"):
            return obj, False
        try:
            ops = json.loads(base64.b64decode(response["patch"]))
        except ValueError as e:
            return self._failed(hook, obj, f"its patch is not base64 JSON: {e}")
        return json_patch(obj, ops), True

    @staticmethod
    def _failed(hook: dict, obj: dict, why: str) -> tuple[dict, bool]:
        name = hook.get("name", "")
        if hook.get("failurePolicy", "Fail") == "Ignore":
            log.warning("webhook %s failed (%s); failurePolicy Ignore: admitted as is", name, why)
            return obj, False
        raise ApiError(500, "InternalError", f'Internal error occurred: failed calling webhook '
                                             f'"{name}": failed to call webhook: {why}')
