"""What the dashboard remembers besides the placement view: the pods as the watch delivered
them (phase, node, GPU limits, what each pending one asks), the extender's last refusal of each
pending pod, and a short ring of events (placed, refused, deleted, GPU health changes).

It is fed by the cluster sync's pod callback and by the filter's answers, so it costs no API
call of its own; everything is bounded (pods by the watch, refusals by the pods, events by
RING)."""
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

from hami_common.errors import RequestError
from hami_common.request import RequestDefaults, parse_pod
from hami_control.cluster.objects import pod_key

RING = 500
NODE_AGENT_LABEL = ("app.kubernetes.io/name", "hami-node")
_GPU_RESOURCE_PREFIXES = ("nvidia.com/", "hami.io/")


@dataclass(frozen=True)
class PodFacts:
    """One pod as the dashboard shows it."""

    key: str
    phase: str
    node: str
    created: str
    limits: dict            # container name -> its GPU limits (resource name -> value)
    request: object = None  # hami_common.request.PodRequest while it is pending and asks GPUs


def _limits(pod: dict) -> dict:
    spec = pod.get("spec") or {}
    out = {}
    for ctr in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        limits = (ctr.get("resources") or {}).get("limits") or {}
        gpu = {k: str(v) for k, v in limits.items() if k.startswith(_GPU_RESOURCE_PREFIXES)}
        if gpu:
            out[str(ctr.get("name"))] = gpu
    return out


def _pending_request(pod: dict, defaults: RequestDefaults):
    try:
        request = parse_pod(pod, defaults)
    except RequestError:
        return None
    return request if request.wants_gpu else None


class Record:
    """Pods, refusals and events, under one lock (written by the sync and filter threads)."""

    def __init__(self, defaults: RequestDefaults = RequestDefaults(), clock=time.time):
        self.defaults, self.clock = defaults, clock
        self.lock = threading.Lock()
        self.pods: dict = {}            # key -> PodFacts
        self.refusals: dict = {}        # key -> (when, reason text)
        self.agents: dict = {}          # node -> IP of the node agent's pod there
        self.events: deque = deque(maxlen=RING)
        self._seq = itertools.count(1)
        self.version = 0                # bumped on every change (the snapshot's fingerprint)

    def event(self, kind: str, text: str, pod: str = "", node: str = "", gpu: str = "") -> None:
        """Adds one event to the ring."""
        with self.lock:
            self.version += 1
            self.events.append({"seq": next(self._seq), "at": self.clock(), "kind": kind,
                                "text": text, "pod": pod, "node": node, "gpu": gpu})

    def on_pod(self, pod: dict, deleted: bool) -> None:
        """The cluster sync's pod callback."""
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get(NODE_AGENT_LABEL[0]) == NODE_AGENT_LABEL[1]:
            self._agent(pod, deleted)
        key = pod_key(pod)
        if deleted:
            with self.lock:
                self.version += 1
                known = self.pods.pop(key, None)
                self.refusals.pop(key, None)
            if known is not None and known.limits:
                self.event("deleted", f"{key} deleted", pod=key, node=known.node)
            return
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = str(spec.get("nodeName") or "")
        phase = str(status.get("phase") or "Pending")
        facts = PodFacts(key, phase, node, str(meta.get("creationTimestamp") or ""),
                         _limits(pod),
                         None if node else _pending_request(pod, self.defaults))
        with self.lock:
            self.version += 1
            before = self.pods.get(key)
            self.pods[key] = facts
            if node:
                self.refusals.pop(key, None)
        if facts.limits and node and (before is None or before.node != node):
            self.event("bound", f"{key} bound to {node}", pod=key, node=node)

    def _agent(self, pod: dict, deleted: bool) -> None:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        ip = str((pod.get("status") or {}).get("podIP") or "")
        with self.lock:
            self.version += 1
            if deleted or not ip:
                self.agents.pop(node, None)
            elif node:
                self.agents[node] = ip

    def on_filter(self, body, answer: dict) -> None:
        """The filter's answer for a pod: a refusal is kept (and told) until the pod binds."""
        try:
            key = pod_key(body.get("Pod") or body.get("pod") or {})
        except AttributeError:
            return
        failed = answer.get("FailedNodes") or answer.get("failedNodes") or {}
        error = answer.get("Error") or answer.get("error") or ""
        if answer.get("NodeNames") or answer.get("nodeNames"):
            with self.lock:
                if self.refusals.pop(key, None) is not None:
                    self.version += 1
            return
        reason = error or "; ".join(f"{n}: {why}" for n, why in sorted(failed.items())[:20]) \
            or "no node passed"
        with self.lock:
            self.version += 1
            before = self.refusals.get(key)
            self.refusals[key] = (self.clock(), reason)
        if before is None or before[1] != reason:
            self.event("refused", f"{key} not placed: {reason}", pod=key)

    def copy(self) -> tuple:
        """(pods, refusals, agents, events) as copies, for one snapshot."""
        with self.lock:
            return dict(self.pods), dict(self.refusals), dict(self.agents), list(self.events)

    def agent_ip(self, node: str) -> Optional[str]:
        """The node agent's pod IP on that node, if its pod was seen."""
        with self.lock:
            return self.agents.get(node)
