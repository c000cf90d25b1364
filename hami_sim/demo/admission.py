"""Admission for the simulated cluster. The API server double calls no webhooks, so pods go
through hami-control's mutating webhook here, as the API server would call it.

- `submit(core_v1, extender, pod)`: what `kubectl apply` of a pod does on a real cluster: the
  pod is sent to /webhook in an AdmissionReview v1, the JSON patch of the answer applied, then
  the pod created (a denial is raised as AdmissionDenied with the webhook's message).
- `AdmissionLoop` (for `hami-sim cluster up`, where users create pods themselves): watches
  unbound pods of the default scheduler; for each one the webhook mutates, deletes it and
  creates the mutated pod under the same name (the spec's schedulerName is immutable). A denied
  pod is deleted, with a Warning `FailedAdmission` Event carrying the webhook's message.
  The pod's uid changes and a watcher sees it deleted and added again; that is the honest cost
  of emulating admission from outside the API server.
"""
from __future__ import annotations

import copy
import json
from typing import Callable

from hami_sim.demo.events import EventRecorder
from hami_sim.demo.podloop import UnboundPodLoop
from hami_sim.extender_client import ExtenderError, patched_pod

DEFAULT_SCHEDULERS = ("", "default-scheduler")
ADMITTED_ANNOTATION = "demo.hami.io/admitted-by"
# What the API server fills in on create; a re-created pod must not carry the old values.
_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                  "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")


class AdmissionDenied(Exception):
    """The webhook denied the pod; the message is the webhook's."""


def quantities_as_strings(pod: dict) -> dict:
    """Resource quantities written as YAML numbers (`nvidia.com/gpu: 1`) become strings, as
    the API server stores them (the Python client's models accept only strings)."""
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = c.get("resources") or {}
        for kind in ("limits", "requests"):
            values = resources.get(kind) or {}
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    values[name] = str(value)
    return pod


def review(extender, pod: dict, namespace: str) -> tuple:
    """(allowed, patched pod or None when unchanged, denial message)."""
    response = extender.review(pod, namespace)
    if not response.get("allowed"):
        return False, None, (response.get("status") or {}).get("message") or "denied"
    return True, patched_pod(pod, response), ""


def submit(core_v1, extender, pod: dict, namespace: str = "default") -> dict:
    """Admits pod through the webhook and creates it; the created pod (dict)."""
    allowed, patched, message = review(extender, pod, namespace)
    if not allowed:
        raise AdmissionDenied(message)
    resp = core_v1.create_namespaced_pod(namespace, patched or pod, _preload_content=False)
    return json.loads(resp.data)


def recreation_body(patched: dict) -> dict:
    """The mutated pod as a new object: server-set metadata and status dropped."""
    body = copy.deepcopy(patched)
    meta = body.setdefault("metadata", {})
    for name in _SERVER_FIELDS:
        meta.pop(name, None)
    meta.setdefault("annotations", {})[ADMITTED_ANNOTATION] = "hami-control webhook (re-created)"
    body.pop("status", None)
    return quantities_as_strings(body)


class AdmissionLoop(UnboundPodLoop):
    """Routes pods users create through the webhook (delete + re-create when it mutates)."""

    name = "admission"

    def __init__(self, core_v1, extender, notify: Callable[[str], None] = lambda _m: None,
                 log: Callable[[str], None] = lambda _m: None, interval: float = 0.2):
        super().__init__(core_v1, log, interval)
        self._v1, self._extender, self._notify, self._log = core_v1, extender, notify, log
        self._events = EventRecorder(core_v1, "hami-admission", log)
        self._seen: set = set()

    def run_once(self) -> None:
        """Reviews every unbound pod of the default scheduler not seen before."""
        for uid, pod in self.pods.items():
            if self.stopping:
                return
            if uid not in self._seen and self._candidate(pod):
                self._seen.add(uid)
                self.admit(pod)

    @staticmethod
    def _candidate(pod: dict) -> bool:
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        return (spec.get("schedulerName", "") in DEFAULT_SCHEDULERS and not spec.get("nodeName")
                and not meta.get("deletionTimestamp")
                and ADMITTED_ANNOTATION not in (meta.get("annotations") or {}))

    def admit(self, pod: dict) -> None:
        """Reviews one pod and applies the verdict."""
        from kubernetes.client.rest import ApiException
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        try:
            allowed, patched, message = review(self._extender, pod, meta["namespace"])
        except (ExtenderError, OSError) as e:
            self._log(f"admission of {key}: the webhook failed ({e}); left as created, as "
                      "failurePolicy: Ignore does")
            return
        if allowed and patched is None:
            return
        try:
            self._v1.delete_namespaced_pod(meta["name"], meta["namespace"],
                                           _preload_content=False)
            if not allowed:
                self._events.record(pod, "Warning", "FailedAdmission",
                                    f"admission webhook denied the request: {message}")
                self._notify(f"{key}: denied by the webhook and deleted: {message}")
                return
            self._v1.create_namespaced_pod(meta["namespace"], recreation_body(patched),
                                           _preload_content=False)
            self._notify(f"{key}: mutated by the webhook (schedulerName "
                         f"{patched['spec'].get('schedulerName')}) and re-created")
        except ApiException as e:
            self._log(f"admission of {key}: {e.status} {e.reason} {e.body}")
        except ValueError as e:         # the client refused the body (its models' checks)
            self._log(f"admission of {key}: cannot re-create it: {e}")
