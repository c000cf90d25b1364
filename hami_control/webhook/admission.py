"""The mutating admission webhook: pods asking for GPU slices go to hami-scheduler.

Rules, in order (HAMi's, with its defaults):
1. anything but a Pod CREATE, a pod or namespace labelled `hami.io/webhook: ignore`, a pod that
   names another scheduler, or a pod asking for no `nvidia.com/*` resource: allowed untouched;
2. denied, with what to change: a pod created carrying what only hami-control and hami-node
   write (C.SCHEDULER_POD_ANNOTATIONS: a forged decision or allocation phase; deploy/'s
   matchConditions send such pods here even without nvidia.com/* resources), unless it names
   another scheduler; a pod that already names a node (spec.nodeName), a privileged
   container asking for GPU slices, values out of range (negative, over 100 %, not whole
   numbers, memory and percentage together), an unknown scheduling policy annotation;
3. otherwise allowed with a JSON patch: `schedulerName`, `runtimeClassName` when one is
   configured (--runtime-class) and the pod names none, and `nvidia.com/gpu` (the default
   count) on containers that give memory or cores without a count;
4. or, for a pod opted in to DRA (`hami.io/dra: "true"` on it or its namespace), a patch that
   turns its nvidia.com/* resources into ResourceClaims (webhook/dra.py) and gives it our
   scheduler (whose prioritize extender scores the nodes for its claims), and in a namespace
   with a GPU quota adds the quota's scheduling gate (claims/gate.py lifts it).
A ResourceClaim CREATE of a claim made from our templates gets kube-scheduler's finalizer
(webhook/claims.py). Answered in the AdmissionReview version it was asked in
(admission.k8s.io/v1 or v1beta1).
"""
import base64
import json
from typing import Callable, Mapping, Optional

from hami_common import constants as C
from hami_common.errors import RequestError
from hami_common.podshape import pod_problem
from hami_common.request import RequestDefaults, parse_pod
from hami_control.errors import BadRequest
from hami_control.placement.registry import SERVER_POLICIES
from hami_control.webhook.claims import claim_review, is_claim_create
from hami_control.webhook.dra import removals, dra_patch, opted_in

VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
DEFAULT_SCHEDULER = "default-scheduler"
_SIZING = (C.RESOURCE_MEM, C.RESOURCE_MEM_PERCENTAGE, C.RESOURCE_CORES)


def _escape(token: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def _resources(ctr: Mapping) -> Mapping:
    resources = ctr.get("resources")
    return resources if isinstance(resources, Mapping) else {}


def _asks_gpu(ctr: Mapping) -> bool:
    resources = _resources(ctr)
    return any(isinstance(resources.get(section), Mapping) and
               any(key in resources[section] for key in C.GPU_RESOURCES)
               for section in ("limits", "requests"))


def asks_gpu_slices(pod: Mapping) -> bool:
    """Whether any container of the pod asks for one of our resources (nvidia.com/gpu,
    gpumem, gpumem-percentage, gpucores, priority)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    return any(_asks_gpu(c) for _, c in _containers(spec))


def _containers(spec: Mapping) -> list:
    """(JSON path, container) of every init container and container, in spec order."""
    out = []
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if isinstance(items, list):
            out += [(f"/spec/{field}/{i}", c) for i, c in enumerate(items)
                    if isinstance(c, Mapping)]
    return out


class Webhook:
    """POST /webhook: an AdmissionReview in, the AdmissionReview answer out."""

    def __init__(self, scheduler_name: str = C.SCHEDULER_NAME,
                 defaults: RequestDefaults = RequestDefaults(),
                 namespace_labels: Callable[[str], Mapping] = lambda name: {},
                 runtime_class: str = "",
                 quota_limits: Callable[[str], Mapping] = lambda namespace: {}):
        self.scheduler_name, self.defaults = scheduler_name, defaults
        self.namespace_labels, self.runtime_class = namespace_labels, runtime_class
        self.quota_limits = quota_limits

    def __call__(self, body) -> dict:
        version, request = self._parse(body)
        response = {"uid": request["uid"], "allowed": True}
        response.update(self._review(request))
        return {"apiVersion": version, "kind": "AdmissionReview", "response": response}

    @staticmethod
    def _parse(body) -> tuple:
        if not isinstance(body, Mapping):
            raise BadRequest("the body must be an AdmissionReview object")
        version = body.get("apiVersion")
        if version not in VERSIONS or body.get("kind") != "AdmissionReview":
            raise BadRequest(f"expected kind AdmissionReview with apiVersion one of {VERSIONS}, "
                             f"got {body.get('kind')!r} {version!r}")
        request = body.get("request")
        if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str) \
                or not request["uid"]:
            raise BadRequest("AdmissionReview.request with a uid is required")
        return version, request

    def _review(self, request: Mapping) -> dict:
        if is_claim_create(request):
            return claim_review(request)
        kind = request.get("kind") if isinstance(request.get("kind"), Mapping) else {}
        pod = request.get("object")
        if kind.get("kind") != "Pod" or request.get("operation") != "CREATE":
            return {}
        problem = pod_problem(pod)
        if problem:
            raise BadRequest(f"AdmissionReview.request.object (the Pod): {problem}")
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        if not self._ours(spec):
            return {}
        forged = self._forged(meta)
        if forged:
            return {"allowed": False, "status": {"code": 403, "reason": "Forbidden",
                                                 "message": forged}}
        if self._ignored(meta, request):
            return {}
        asking = [(path, c) for path, c in _containers(spec) if _asks_gpu(c)]
        if not asking:
            return {}
        denial = self._denial(pod, meta, spec, asking)
        if denial:
            return {"allowed": False, "status": {"code": 403, "reason": "Forbidden",
                                                 "message": denial}}
        if opted_in(meta, self._namespace_labels(meta, request)):
            namespace = request.get("namespace") or meta.get("namespace") or "default"
            patch = self._dra_patch(pod, meta, spec, asking,
                                    bool(self.quota_limits(str(namespace))))
        else:
            patch = self._patch(spec, asking)
        return {"patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode()}

    def _namespace_labels(self, meta: Mapping, request: Mapping) -> Mapping:
        namespace = request.get("namespace") or meta.get("namespace")
        if isinstance(namespace, str) and namespace:
            return self.namespace_labels(namespace) or {}
        return {}

    def _ignored(self, meta: Mapping, request: Mapping) -> bool:
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        if labels.get(C.LABEL_WEBHOOK) == C.LABEL_WEBHOOK_IGNORE:
            return True
        ns_labels = self._namespace_labels(meta, request)
        return ns_labels.get(C.LABEL_WEBHOOK) == C.LABEL_WEBHOOK_IGNORE

    def _dra_patch(self, pod: Mapping, meta: Mapping, spec: Mapping, asking,
                   gate: bool) -> list:
        asks = {c.name: c for c in parse_pod(pod, self.defaults).containers if c.nums}
        with_gpus = [(path, c) for path, c in asking if c.get("name") in asks]
        ops = dra_patch(spec, meta, with_gpus, asks, gate=gate) if with_gpus else []
        if with_gpus and spec.get("schedulerName") != self.scheduler_name:
            # kube-scheduler allocates the claims; ours asks hami-control for node scores
            ops.append({"op": "add", "path": "/spec/schedulerName",
                        "value": self.scheduler_name})
        # A container asking only for nvidia.com/priority keeps no nvidia.com/* resource
        # either: no node offers them to a claim user.
        return ops + [op for path, c in asking if c.get("name") not in asks
                      for op in removals(path, c)]

    def _forged(self, meta: Mapping) -> Optional[str]:
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"),
                                                            Mapping) else {}
        keys = [k for k in C.SCHEDULER_POD_ANNOTATIONS if k in annotations]
        if not keys:
            return None
        name = meta.get("name") or meta.get("generateName") or "(unnamed)"
        return (f"pod {name} is created with {', '.join(keys)}: only {self.scheduler_name} "
                "(hami-control) and hami-node write these (the GPUs chosen for the pod and how "
                "far their allocation got), so a pod must not bring them; remove them from the "
                "pod or its template and create it again")

    def _ours(self, spec: Mapping) -> bool:
        name = spec.get("schedulerName")
        return name in (None, "", DEFAULT_SCHEDULER, self.scheduler_name)

    def _denial(self, pod: Mapping, meta: Mapping, spec: Mapping, asking) -> Optional[str]:
        name = meta.get("name") or meta.get("generateName") or "(unnamed)"
        if spec.get("nodeName"):
            return (f"pod {name} asks for GPU slices but already names node "
                    f"{spec['nodeName']!r} (spec.nodeName): GPU pods must be placed by "
                    f"{self.scheduler_name}; use a nodeSelector or node affinity instead")
        for _, ctr in asking:
            security = ctr.get("securityContext")
            if isinstance(security, Mapping) and security.get("privileged") is True:
                return (f"container {ctr.get('name')!r} is privileged and asks for GPU slices: "
                        "a privileged container sees every GPU of the node, so its limits "
                        "cannot hold; drop securityContext.privileged or the nvidia.com/* "
                        "resources")
        try:
            parse_pod(pod, self.defaults)
        except RequestError as e:
            return f"pod {name}: {e}"
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"),
                                                            Mapping) else {}
        for key in (C.ANNO_NODE_SCHEDULER_POLICY, C.ANNO_GPU_SCHEDULER_POLICY):
            value = annotations.get(key)
            if value and value not in SERVER_POLICIES:
                return (f"pod {name}: annotation {key} is {value!r}; use one of "
                        f"{', '.join(SERVER_POLICIES)}")
        return None

    def _patch(self, spec: Mapping, asking) -> list:
        ops = [{"op": "add", "path": "/spec/schedulerName", "value": self.scheduler_name}]
        if self.runtime_class and not spec.get("runtimeClassName"):
            ops.append({"op": "add", "path": "/spec/runtimeClassName",
                        "value": self.runtime_class})
        for path, ctr in asking:
            resources = _resources(ctr)
            limits = resources.get("limits") if isinstance(resources.get("limits"),
                                                           Mapping) else None
            requests = resources.get("requests") if isinstance(resources.get("requests"),
                                                               Mapping) else {}
            given = {**requests, **(limits or {})}
            if C.RESOURCE_GPU in given or not any(k in given for k in _SIZING):
                continue
            count = str(self.defaults.default_gpu_num)
            if limits is None:
                ops.append({"op": "add", "path": f"{path}/resources/limits",
                            "value": {C.RESOURCE_GPU: count}}
                           if isinstance(ctr.get("resources"), Mapping) else
                           {"op": "add", "path": f"{path}/resources",
                            "value": {"limits": {C.RESOURCE_GPU: count}}})
            else:
                ops.append({"op": "add", "path": f"{path}/resources/limits/"
                                                 f"{_escape(C.RESOURCE_GPU)}", "value": count})
        return ops
