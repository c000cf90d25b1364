"""kube-scheduler's extender messages (extender/v1): reading ExtenderArgs and
ExtenderBindingArgs, writing the results. The Go structs have no JSON tags, so the keys are the
Go field names; kube-scheduler decodes case-insensitively, and so does this."""
from dataclasses import dataclass
from itertools import repeat
from typing import Mapping, Optional

from hami_common.podshape import pod_problem
from hami_control.errors import BadRequest


def _field(body: Mapping, name: str):
    """body[name], matched case-insensitively as Go's encoding/json does."""
    if name in body:
        return body[name]
    lowered = name.lower()
    for key, value in body.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


def _object(body, what: str) -> Mapping:
    if not isinstance(body, Mapping):
        raise BadRequest(f"{what} must be a JSON object")
    return body


@dataclass(frozen=True)
class FilterArgs:
    """ExtenderArgs: the pod, and the candidate nodes by name or as objects."""

    pod: dict
    node_names: list
    nodes: Optional[list] = None      # the node objects in Nodes mode (not nodeCacheCapable)

    @property
    def key(self) -> str:
        """namespace/name of the pod."""
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def parse_filter(body) -> FilterArgs:
    """FilterArgs from a decoded body; BadRequest says what is missing."""
    body = _object(body, "ExtenderArgs")
    pod = _field(body, "Pod")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata"), Mapping) or \
            not isinstance(pod["metadata"].get("name"), str) or not pod["metadata"]["name"]:
        raise BadRequest("ExtenderArgs.Pod must be a v1.Pod object with metadata.name")
    problem = pod_problem(pod)
    if problem:
        raise BadRequest(f"ExtenderArgs.Pod: {problem}")
    names, nodes = _field(body, "NodeNames"), _field(body, "Nodes")
    if names is not None:
        # map() keeps the check of a 1,213-name list in C: it runs on every filter.
        if not isinstance(names, list) or not all(map(isinstance, names, repeat(str))):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
        return FilterArgs(dict(pod), list(names))
    if nodes is not None:
        items = nodes.get("items") if isinstance(nodes, Mapping) else None
        if not isinstance(items, list) or not all(
                isinstance(n, Mapping) and isinstance(n.get("metadata"), Mapping)
                and isinstance(n["metadata"].get("name"), str) for n in items):
            raise BadRequest("ExtenderArgs.Nodes must be a v1.NodeList whose items have "
                             "metadata.name")
        return FilterArgs(dict(pod), [n["metadata"]["name"] for n in items], list(items))
    raise BadRequest("ExtenderArgs needs NodeNames (nodeCacheCapable: true) or Nodes")


def filter_result(args: FilterArgs, chosen: list, failed: Mapping = None,
                  error: str = "") -> dict:
    """ExtenderFilterResult: `chosen` names (a subset of the input), reasons for the others."""
    result = {"NodeNames": list(chosen), "FailedNodes": dict(failed or {}),
              "FailedAndUnresolvableNodes": {}, "Error": error}
    if args is not None and args.nodes is not None:
        keep = set(chosen)
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                           "items": [n for n in args.nodes if n["metadata"]["name"] in keep]}
    else:
        result["Nodes"] = None
    return result


@dataclass(frozen=True)
class BindArgs:
    """ExtenderBindingArgs."""

    namespace: str
    name: str
    uid: str
    node: str

    @property
    def key(self) -> str:
        """namespace/name of the pod."""
        return f"{self.namespace}/{self.name}"


def parse_bind(body) -> BindArgs:
    """BindArgs from a decoded body; BadRequest names the missing field."""
    body = _object(body, "ExtenderBindingArgs")
    values = {}
    for name in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = _field(body, name)
        if value is None and name == "PodUID":
            value = ""
        if not isinstance(value, str) or (not value and name != "PodUID"):
            raise BadRequest(f"ExtenderBindingArgs.{name} must be a non-empty string")
        values[name] = value
    return BindArgs(values["PodNamespace"], values["PodName"], values["PodUID"], values["Node"])


@dataclass(frozen=True)
class PreemptArgs:
    """ExtenderPreemptionArgs: the pod, and per node the UIDs of kube-scheduler's victims
    (NodeNameToMetaVictims with nodeCacheCapable, else the pods of NodeNameToVictims)."""

    pod: dict
    victims: dict                 # node -> [UID, ...]
    pdb_violations: dict          # node -> kube-scheduler's NumPDBViolations

    @property
    def key(self) -> str:
        """namespace/name of the pod."""
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _victim_uids(node: str, entry, meta: bool) -> list:
    if entry is None:
        return []
    if not isinstance(entry, Mapping):
        raise BadRequest(f"the victims of node {node!r} must be an object with Pods")
    pods = _field(entry, "Pods") or []
    if not isinstance(pods, list):
        raise BadRequest(f"the victims of node {node!r}: Pods must be a list")
    uids = []
    for pod in pods:
        source = pod if meta else (pod or {}).get("metadata") if isinstance(pod, Mapping) \
            else None
        uid = _field(source, "UID") if isinstance(source, Mapping) else None
        if not isinstance(uid, str) or not uid:
            raise BadRequest(f"a victim of node {node!r} has no UID")
        uids.append(uid)
    return uids


def parse_preempt(body) -> PreemptArgs:
    """PreemptArgs from a decoded body; BadRequest says what is wrong."""
    body = _object(body, "ExtenderPreemptionArgs")
    pod = _field(body, "Pod")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata"), Mapping) or \
            not pod["metadata"].get("name"):
        raise BadRequest("ExtenderPreemptionArgs.Pod must be a v1.Pod object with "
                         "metadata.name")
    problem = pod_problem(pod)
    if problem:
        raise BadRequest(f"ExtenderPreemptionArgs.Pod: {problem}")
    by_meta = _field(body, "NodeNameToMetaVictims")
    by_pods = _field(body, "NodeNameToVictims")
    meta = by_meta is not None
    nodes = by_meta if meta else by_pods
    if nodes is None:
        nodes = {}
    if not isinstance(nodes, Mapping):
        raise BadRequest("ExtenderPreemptionArgs.NodeNameToMetaVictims must map node names to "
                         "victims")
    victims, violations = {}, {}
    for node, entry in nodes.items():
        victims[node] = _victim_uids(node, entry, meta)
        count = _field(entry, "NumPDBViolations") if isinstance(entry, Mapping) else 0
        violations[node] = count if isinstance(count, int) else 0
    return PreemptArgs(dict(pod), victims, violations)


def preempt_result(plans: Mapping) -> dict:
    """ExtenderPreemptionResult: node -> MetaVictims (UIDs and the budget violations)."""
    return {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
        for node, (uids, violations) in plans.items()}}
