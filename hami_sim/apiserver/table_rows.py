"""The columns and cells of the resources the double serves, as the real API server prints them
for `kubectl get` (Kubernetes' pkg/printers/internalversion: same column names, types, wide
columns and cell semantics; the descriptions are ours).

Every row function takes the stored object and `age(timestamp)` (the server's clock, so a test
can fix it) and returns the cells of all columns, wide ones included: kubectl hides the columns
of priority 1 unless asked for `-o wide`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

NODE_ROLE_PREFIX = "node-role.kubernetes.io/"
NODE_ROLE_LABEL = "kubernetes.io/role"
NONE = "<none>"
UNKNOWN = "<unknown>"


class Column(NamedTuple):
    """One TableColumnDefinition."""

    name: str
    description: str
    priority: int = 0
    type: str = "string"
    format: str = ""

    def definition(self) -> dict:
        """The JSON of the definition."""
        return {"name": self.name, "type": self.type, "format": self.format,
                "description": self.description, "priority": self.priority}


NAME = Column("Name", "Name of the object, unique within its namespace.", format="name")
AGE = Column("Age", "Time since the object was created (metadata.creationTimestamp).")


def _finished_at(cs: dict) -> str:
    """When a container's last run ended ("" if it has not restarted); RFC 3339 strings in
    UTC compare in time order."""
    return ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt") or ""


def _pod_ready_and_reason(pod: dict) -> tuple[int, int, str, int, str]:
    """(ready containers, containers, the STATUS reason, restarts, last restart) of a pod,
    following the printer: init containers first, then the containers from the last one."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    sidecars = {n for n, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total = len(spec.get("containers") or []) + len(sidecars)
    reason = status.get("reason") or status.get("phase") or ""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    ready = restarts = sidecar_restarts = 0
    last = sidecar_last = ""
    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += cs.get("restartCount", 0)
        last = max(last, _finished_at(cs))
        if cs.get("name") in sidecars:
            sidecar_restarts += cs.get("restartCount", 0)
            sidecar_last = max(sidecar_last, _finished_at(cs))
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode", 0) == 0:
            continue
        if cs.get("name") in sidecars and cs.get("started"):
            ready += bool(cs.get("ready"))
            continue
        if terminated:
            reason = "Init:" + (terminated.get("reason") or _exit(terminated))
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions") or [])
    if not initializing or initialized:
        ready, restarts, reason, last = _containers(pod, ready, sidecar_restarts, reason,
                                                    sidecar_last)
    return ready, total, reason, restarts, last


def _exit(terminated: dict) -> str:
    signal = terminated.get("signal", 0)
    return f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"


def _containers(pod: dict, ready: int, restarts: int, reason: str,
                last: str) -> tuple[int, int, str, str]:
    status = pod.get("status") or {}
    running, error = False, ""
    for cs in reversed(status.get("containerStatuses") or []):
        restarts += cs.get("restartCount", 0)
        last = max(last, _finished_at(cs))
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated:
            reason = terminated.get("reason") or _exit(terminated)
            if terminated.get("exitCode", 0):
                error = reason
        elif cs.get("ready") and "running" in state:
            running = True
            ready += 1
    if reason == "Completed":
        pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in status.get("conditions") or [])
        if running and pod_ready:
            reason = "Running"
        elif error:
            reason = error
        elif running:
            reason = "NotReady"
    return ready, restarts, reason, last


def pod_row(pod: dict, age: Callable[[str], str]) -> list:
    """NAME READY STATUS RESTARTS AGE | IP NODE NOMINATED-NODE READINESS-GATES."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    ready, total, reason, restarts, last = _pod_ready_and_reason(pod)
    if meta.get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif status.get("phase") not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restart_cell = str(restarts)
    if restarts and last:
        restart_cell = f"{restarts} ({age(last)} ago)"
    ips = status.get("podIPs") or []
    ip = (ips[0].get("ip") if ips else "") or status.get("podIP") or NONE
    gates = spec.get("readinessGates") or []
    gate_cell = NONE
    if gates:
        true = {c.get("type") for c in status.get("conditions") or []
                if c.get("status") == "True"}
        gate_cell = f"{sum(g.get('conditionType') in true for g in gates)}/{len(gates)}"
    return [meta["name"], f"{ready}/{total}", reason, restart_cell,
            age(meta.get("creationTimestamp")), ip, spec.get("nodeName") or NONE,
            status.get("nominatedNodeName") or NONE, gate_cell]


def pod_conditions(pod: dict) -> list:
    """The row conditions of a finished pod (kubectl hides Completed rows with some flags)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return [{"type": "Completed", "status": "True", "reason": "Succeeded",
                 "message": "The pod has completed successfully."}]
    if phase == "Failed":
        return [{"type": "Completed", "status": "True", "reason": "Failed",
                 "message": "The pod failed."}]
    return []


def _node_status(node: dict) -> str:
    ready = [c for c in (node.get("status") or {}).get("conditions") or []
             if c.get("type") == "Ready"]
    words = ["Ready" if ready[-1].get("status") == "True" else "NotReady"] if ready \
        else ["Unknown"]
    if (node.get("spec") or {}).get("unschedulable"):
        words.append("SchedulingDisabled")
    return ",".join(words)


def _node_roles(labels: dict) -> str:
    roles = set()
    for key, value in labels.items():
        if key.startswith(NODE_ROLE_PREFIX) and key[len(NODE_ROLE_PREFIX):]:
            roles.add(key[len(NODE_ROLE_PREFIX):])
        elif key == NODE_ROLE_LABEL and value:
            roles.add(value)
    return ",".join(sorted(roles)) or NONE


def node_row(node: dict, age: Callable[[str], str]) -> list:
    """NAME STATUS ROLES AGE VERSION | INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION
    CONTAINER-RUNTIME."""
    meta, status = node["metadata"], node.get("status") or {}
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        return next((a.get("address") for a in status.get("addresses") or []
                     if a.get("type") == kind), NONE)
    return [meta["name"], _node_status(node), _node_roles(meta.get("labels") or {}),
            age(meta.get("creationTimestamp")), info.get("kubeletVersion", ""),
            address("InternalIP"), address("ExternalIP"), info.get("osImage") or UNKNOWN,
            info.get("kernelVersion") or UNKNOWN, info.get("containerRuntimeVersion") or UNKNOWN]


def _core_event(event: dict) -> dict:
    """An events.k8s.io/v1 Event in the core v1 field names (the server prints both alike)."""
    if event.get("apiVersion") != "events.k8s.io/v1":
        return event
    return {"metadata": event["metadata"], "type": event.get("type"),
            "reason": event.get("reason"), "message": event.get("note"),
            "involvedObject": event.get("regarding") or {},
            "source": event.get("deprecatedSource") or {},
            "firstTimestamp": event.get("deprecatedFirstTimestamp"),
            "lastTimestamp": event.get("deprecatedLastTimestamp"),
            "count": event.get("deprecatedCount", 0), "series": event.get("series"),
            "eventTime": event.get("eventTime"),
            "reportingComponent": event.get("reportingController"),
            "reportingInstance": event.get("reportingInstance")}


def event_row(event: dict, age: Callable[[str], str]) -> list:
    """LAST SEEN TYPE REASON OBJECT | SUBOBJECT SOURCE | MESSAGE | FIRST SEEN COUNT NAME."""
    ev = _core_event(event)
    first = age(ev.get("firstTimestamp") or ev.get("eventTime"))
    last = age(ev["lastTimestamp"]) if ev.get("lastTimestamp") else first
    count = ev.get("count") or 1
    if series := ev.get("series"):
        last, count = age(series.get("lastObservedTime")), series.get("count", 0)
    ref, source = ev.get("involvedObject") or {}, ev.get("source") or {}
    kind = (ref.get("kind") or "").lower()
    target = f"{kind}/{ref['name']}" if ref.get("name") else kind
    component = source.get("component") or ev.get("reportingComponent") or ""
    instance = source.get("host") or ev.get("reportingInstance") or ""
    return [last, ev.get("type") or "", ev.get("reason") or "", target,
            ref.get("fieldPath") or "", f"{component}, {instance}" if instance else component,
            (ev.get("message") or "").strip(), first, count, ev["metadata"]["name"]]


def namespace_row(ns: dict, age: Callable[[str], str]) -> list:
    """NAME STATUS AGE."""
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", ""),
            age(ns["metadata"].get("creationTimestamp"))]


def lease_row(lease: dict, age: Callable[[str], str]) -> list:
    """NAME HOLDER AGE."""
    return [lease["metadata"]["name"], (lease.get("spec") or {}).get("holderIdentity") or "",
            age(lease["metadata"].get("creationTimestamp"))]


def quota_row(quota: dict, age: Callable[[str], str]) -> list:
    """NAME AGE REQUEST LIMIT: `resource: used/hard` of each hard limit, limits.* apart."""
    status = quota.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    request, limit = [], []
    for name in sorted(hard):
        (limit if name.split(".")[0] == "limits" and "." in name else request).append(
            f"{name}: {used.get(name, '0')}/{hard[name]}")
    return [quota["metadata"]["name"], age(quota["metadata"].get("creationTimestamp")),
            ", ".join(request), ", ".join(limit)]


class Printer(NamedTuple):
    """The columns of a resource and the function that fills a row."""

    columns: tuple
    row: Callable[[dict, Callable[[str], str]], list]
    conditions: Callable[[dict], list] = lambda obj: []


_EVENTS = Printer((
    Column("Last Seen", "Time the event was last seen."),
    Column("Type", "Type of the event (Normal, Warning)."),
    Column("Reason", "Why the event was emitted (short, machine readable)."),
    Column("Object", "The object the event is about (kind/name)."),
    Column("Subobject", "The part of the object (fieldPath), e.g. a container.", 1),
    Column("Source", "The component (and host) that reported the event.", 1),
    Column("Message", "Human-readable description of the event."),
    Column("First Seen", "Time the event was first seen.", 1),
    Column("Count", "Number of times the event occurred.", 1),
    Column("Name", "Name of the event object.", 1, format="name")), event_row)

# Storage key of the resource (Resource.key) -> its printer.
PRINTERS = {
    "pods": Printer((
        NAME, Column("Ready", "Ready containers / containers."),
        Column("Status", "The aggregate status of the pod's containers."),
        Column("Restarts", "Container restarts, and how long ago the last one was."), AGE,
        Column("IP", "The pod's IP address (status.podIPs).", 1),
        Column("Node", "The node the pod is bound to (spec.nodeName).", 1),
        Column("Nominated Node", "The node preemption nominated (status.nominatedNodeName).",
               1),
        Column("Readiness Gates", "Readiness gates whose condition is True / gates.", 1)),
        pod_row, pod_conditions),
    "nodes": Printer((
        NAME, Column("Status", "The status of the node (Ready, NotReady, Unknown)."),
        Column("Roles", "The roles of the node (node-role.kubernetes.io/ labels)."), AGE,
        Column("Version", "Kubelet version (status.nodeInfo.kubeletVersion)."),
        Column("Internal-IP", "The node's InternalIP address.", 1),
        Column("External-IP", "The node's ExternalIP address.", 1),
        Column("OS-Image", "OS image (status.nodeInfo.osImage).", 1),
        Column("Kernel-Version", "Kernel version (status.nodeInfo.kernelVersion).", 1),
        Column("Container-Runtime", "Container runtime version.", 1)), node_row),
    "events": _EVENTS,
    "events.k8s.io/events": _EVENTS,
    "namespaces": Printer((NAME, Column("Status", "The phase of the namespace."), AGE),
                          namespace_row),
    "coordination.k8s.io/leases": Printer(
        (NAME, Column("Holder", "The holder of the lease (spec.holderIdentity)."), AGE),
        lease_row),
    "resourcequotas": Printer((
        NAME, AGE, Column("Request", "Used/hard of each request quota (requests.*, pods, ...)."),
        Column("Limit", "Used/hard of each limits.* quota.")), quota_row),
}
