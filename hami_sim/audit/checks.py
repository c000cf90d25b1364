"""The auditor's rules, each a pure function of a Snapshot (and the bounds): a list of
Violations naming the objects involved. The Auditor (auditor.py) runs them pass after pass."""
from __future__ import annotations

import re
from datetime import datetime
from typing import Optional

from hami_common import constants as C
from hami_common import node_lock
from hami_common.node_lock import parse_time
from hami_common.errors import HamiFormatError, RequestError
from hami_common.request import parse_pod
from hami_sim.audit.given import could_hold, finished, given, key, usage
from hami_sim.audit.model import ANNO_EXPECT, Bounds, Snapshot, Violation

MIB = 1 << 20


def overcommit(snap: Snapshot) -> list:
    """No GPU's memory, cores or task count over-committed by what bound pods were given,
    and nothing given on a GPU no node registered."""
    gpus, unknown = usage(snap.nodes, snap.pods)
    found = []
    for uuid, use in sorted(gpus.items()):
        d = use.device
        over = []
        if use.mem > d.devmem:
            over.append(f"memory {use.mem} MiB of {d.devmem}")
        if use.cores > d.devcore:
            over.append(f"cores {use.cores}% of {d.devcore}")
        if use.tasks > d.count:
            over.append(f"{use.tasks} tasks of {d.count}")
        if use.exclusive and use.tasks > 1:
            over.append(f"a whole-card task shares it with {use.tasks - 1} more")
        if over:
            found.append(Violation("overcommit", f"GPU {uuid} on {use.node}: "
                                   + ", ".join(over), (f"gpu/{uuid}", *sorted(use.pods))))
    for uuid, pods in sorted(unknown.items()):
        found.append(Violation("overcommit", f"GPU {uuid} given but no node registered it",
                               (f"gpu/{uuid}", *sorted(pods))))
    return found


def _container_names(pod: dict) -> list:
    spec = pod.get("spec") or {}
    return [c["name"] for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]


def _container_of(pod: dict, container_id: str) -> str:
    status = pod.get("status") or {}
    for st in (status.get("initContainerStatuses") or []) + \
            (status.get("containerStatuses") or []):
        if (st.get("containerID") or "").split("://")[-1] == container_id:
            return st.get("name", "")
    return ""


def process_caps(snap: Snapshot, bounds: Bounds = Bounds()) -> list:
    """No container's processes hold more on a GPU, by the driver's count, than the memory
    its pod was given there, nor use a GPU it was not given. A process whose container kubelet
    has not reported in the pod's status yet is judged in a later pass."""
    pods = {(p.get("metadata") or {}).get("uid"): p for p in snap.pods}
    totals = {}
    for proc in snap.processes:
        pod = pods.get(proc.pod_uid)
        if pod is None:
            continue                       # not a pod's process (or a pod already gone)
        ctr = _container_of(pod, proc.container_id)
        if not ctr:
            continue                       # kubelet has not reported the container yet
        entry = totals.setdefault((key(pod), ctr, proc.uuid), [0, [], pod])
        entry[0] += proc.used_bytes
        entry[1].append(proc.pid)
    found = []
    for (pod_key, ctr, uuid), (used, pids, pod) in sorted(totals.items(),
                                                          key=lambda kv: kv[0]):
        names = _container_names(pod)
        devices = given(pod)
        mine = devices[names.index(ctr)] if ctr in names and names.index(ctr) < len(devices) \
            else ()
        cap = next((d.usedmem for d in mine if d.uuid == uuid), None)
        objects = (f"pod/{pod_key}", f"container/{ctr}", f"gpu/{uuid}",
                   *(f"pid/{p}" for p in sorted(pids)))
        if cap is None:
            found.append(Violation("process-cap", f"container {ctr} of {pod_key} holds "
                                   f"{used // MIB} MiB on GPU {uuid}, which it was not given",
                                   objects))
        elif used > cap * MIB + bounds.cap_slack_bytes:
            found.append(Violation("process-cap", f"container {ctr} of {pod_key} holds "
                                   f"{used / MIB:.0f} MiB on GPU {uuid} by the driver's count, "
                                   f"over its cap of {cap} MiB", objects))
    return found


def _age(snap: Snapshot, stamp: str) -> float:
    try:
        return (snap.now - node_lock.parse_time(stamp)).total_seconds()
    except (HamiFormatError, TypeError, AttributeError):
        return 0.0


def _condition(pod: dict, kind: str) -> dict:
    return next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), {})


def pending(snap: Snapshot, bounds: Bounds = Bounds(), room_since: Optional[dict] = None) \
        -> list:
    """No GPU pod left unbound while a node's free room could hold it, pass after pass, for
    longer than bounds.pending_s (room_since: pod -> when the room was first seen, the
    caller's memory between passes, updated here; room that comes and goes starts again), and
    none bound but not started for longer than bounds.bound_start_s."""
    room_since = {} if room_since is None else room_since
    gpus, _ = usage(snap.nodes, snap.pods)
    found, roomy = [], set()
    for pod in snap.pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") != "Pending" or meta.get("deletionTimestamp"):
            continue
        if spec.get("nodeName"):
            scheduled = _condition(pod, "PodScheduled").get("lastTransitionTime") or \
                meta.get("creationTimestamp")
            waited = _age(snap, scheduled)
            if waited > bounds.bound_start_s:
                found.append(Violation("pending", f"{key(pod)} bound to {spec['nodeName']} "
                                       f"{waited:.0f} s ago and not started",
                                       (f"pod/{key(pod)}", f"node/{spec['nodeName']}")))
            continue
        if spec.get("schedulerName") != C.SCHEDULER_NAME:
            continue
        try:
            request = parse_pod(pod)
        except (RequestError, HamiFormatError):
            continue                       # refused input is the webhook's business
        node = could_hold(request, gpus)
        if not node:
            continue
        roomy.add(key(pod))
        since = room_since.setdefault(key(pod), snap.now)
        waited = (snap.now - since).total_seconds()
        if waited > bounds.pending_s:
            said = _condition(pod, "PodScheduled").get("message", "")
            found.append(Violation("pending", f"{key(pod)} Pending although {node} has had "
                                   f"room for it for {waited:.0f} s (created "
                                   f"{_age(snap, meta.get('creationTimestamp')):.0f} s ago; "
                                   f"scheduler: {said[:200]!r})",
                                   (f"pod/{key(pod)}", f"node/{node}")))
    for gone in set(room_since) - roomy:
        del room_since[gone]
    return found


def locks(snap: Snapshot, bounds: Bounds = Bounds()) -> list:
    """No node's bind lock held longer than bounds.lock_age_s."""
    found = []
    for node in snap.nodes:
        meta = node.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(C.ANNO_NODE_LOCK)
        if not value:
            continue
        name = meta.get("name", "")
        try:
            lock = node_lock.decode(value)
        except HamiFormatError:
            found.append(Violation("lock", f"node {name}'s lock {value!r} is malformed",
                                   (f"node/{name}",)))
            continue
        age = (snap.now - lock.time).total_seconds()
        if age > bounds.lock_age_s:
            found.append(Violation("lock", f"node {name} locked for {age:.0f} s by "
                                   f"{lock.namespace}/{lock.pod}",
                                   (f"node/{name}", f"pod/{lock.namespace}/{lock.pod}")))
    return found


def orphans(snap: Snapshot) -> dict:
    """What outlives its pod now: object name -> its pod's uid (accounting directories
    `<uid>_<container>`, ResourceClaims owned by a pod)."""
    uids = {(p.get("metadata") or {}).get("uid") for p in snap.pods}
    found = {}
    for name in snap.accounting_dirs:
        uid = name.split("_", 1)[0]
        if uid not in uids:
            found[f"accounting/{name}"] = uid
    for claim in snap.claims:
        meta = claim.get("metadata") or {}
        owners = [o.get("uid") for o in meta.get("ownerReferences") or []
                  if o.get("kind") == "Pod"]
        reserved = [r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []]
        gone = [u for u in owners + reserved if u not in uids]
        if gone:
            found[f"resourceclaim/{meta.get('namespace')}/{meta.get('name')}"] = gone[0]
    return found


def leftovers(snap: Snapshot, first_seen: dict, bounds: Bounds = Bounds()) -> list:
    """Nothing left after its pod for longer than bounds.leftover_s; first_seen (object ->
    when first seen orphaned) is the caller's memory between passes, updated here."""
    now_orphans = orphans(snap)
    for name in list(first_seen):
        if name not in now_orphans:
            del first_seen[name]
    found = []
    for name, uid in sorted(now_orphans.items()):
        since = first_seen.setdefault(name, snap.now)
        age = (snap.now - since).total_seconds()
        if age > bounds.leftover_s:
            found.append(Violation("leftover", f"{name} left {age:.0f} s after its pod "
                                   f"(uid {uid}) was gone", (name, f"poduid/{uid}")))
    return found


# kubelet's refusals of a pod whose device plugin is not connected at that moment (its
# devicemanager: every device of a plugin whose stream ended is unhealthy until it registers
# again); kube-scheduler cannot see the gap, the node's allocatable lags by up to 10 s.
EXCUSED = ("ending-excused",)          # reported, not violations
# "code = Unavailable": the plugin's connection ended inside kubelet's Allocate call (the
# plugin killed mid-call); a refusal by the plugin itself carries another code.
PLUGIN_DOWN = ("no healthy devices present", "cannot allocate unregistered device",
               "rpc error: code = Unavailable")
# hami-node's Allocate refusing a GPU that failed (an XID) after the pod was bound to it.
GPU_FAILED = ("is Unhealthy (critical XID",)


def refused_by_kubelet_at(pod: dict, said=PLUGIN_DOWN) -> Optional[datetime]:
    """When kubelet refused pod at admission with one of the messages `said` (by default:
    its device plugin was not connected), from kubelet's last write of the pod in
    managedFields; None for any other ending."""
    status = pod.get("status") or {}
    if status.get("reason") != "UnexpectedAdmissionError" or \
            not any(m in (status.get("message") or "") for m in said):
        return None
    return _kubelet_wrote_at(pod)


def _kubelet_wrote_at(pod: dict) -> Optional[datetime]:
    """kubelet's last write of the pod, from managedFields (None without one)."""
    stamps = [f.get("time") for f in (pod.get("metadata") or {}).get("managedFields") or []
              if f.get("manager") == "kubelet" and f.get("time")]
    return parse_time(max(stamps)) if stamps else None


def exit_lost_at(pod: dict) -> Optional[datetime]:
    """When a container of pod ended with its exit status lost (kubelet's exit 255, reason
    Unknown: the runtime could not say how it ended), by its finishedAt, else kubelet's last
    write of the pod; None when no container ended so."""
    for st in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (st.get("state") or {}).get("terminated") or {}
        if term.get("exitCode") == 255 and term.get("reason") == "Unknown":
            return parse_time(term["finishedAt"]) if term.get("finishedAt") else \
                _kubelet_wrote_at(pod)
    return None


def endings(snap: Snapshot, excuse=None) -> list:
    """Every finished pod ended as its workload says (annotation soak.hami.io/expect),
    unless it was deleted (a pod stopped by its deletion ends as the deletion says).
    excuse(pod) -> a reason or None: an ending it explains is reported under the check
    "ending-excused" instead (the soak: kubelet's refusal while a fault had the device
    plugin down)."""
    found = []
    for pod in snap.pods:
        meta = pod.get("metadata") or {}
        want = (meta.get("annotations") or {}).get(ANNO_EXPECT)
        status = pod.get("status") or {}
        if want and finished(pod) and status.get("phase") != want and \
                not meta.get("deletionTimestamp"):
            why = status.get("reason") or ""
            for st in status.get("containerStatuses") or []:
                term = (st.get("state") or {}).get("terminated") or {}
                why = why or f"exit {term.get('exitCode')} {term.get('reason', '')}"
            excused = excuse(pod) if excuse is not None else None
            found.append(Violation("ending-excused" if excused else "ending",
                                   f"{key(pod)} ended {status.get('phase')}, its "
                                   f"workload says {want} ({why}: "
                                   f"{(status.get('message') or '')[:200]})"
                                   + (f"; {excused}" if excused else ""),
                                   (f"pod/{key(pod)}",)))
    return found


_SAMPLE = re.compile(r'^(vGPU_device_memory_(?:usage|limit)_in_bytes)\{([^}]*)\}\s+(\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics(snap: Snapshot) -> list:
    """No container over its limit by the shim's own count (hami-node's /metrics)."""
    if not snap.metrics:
        return []
    seen = {}
    for line in snap.metrics.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        ident = tuple(labels.get(k, "") for k in ("podnamespace", "podname", "ctrname",
                                                   "deviceuuid"))
        seen.setdefault(ident, {})[m.group(1).split("_")[3]] = float(m.group(3))
    found = []
    for (ns, name, ctr, uuid), v in sorted(seen.items()):
        if "usage" in v and "limit" in v and v["limit"] > 0 and v["usage"] > v["limit"]:
            found.append(Violation("metrics-cap", f"container {ctr} of {ns}/{name} uses "
                                   f"{v['usage'] / MIB:.0f} MiB on {uuid} by the shim's count, "
                                   f"over its limit of {v['limit'] / MIB:.0f} MiB",
                                   (f"pod/{ns}/{name}", f"container/{ctr}", f"gpu/{uuid}")))
    return found


def run_all(snap: Snapshot, first_seen: dict, bounds: Bounds = Bounds(),
            room_since: Optional[dict] = None, excuse=None) -> list:
    """Every rule over one snapshot (first_seen, room_since: the caller's memory; excuse:
    see endings)."""
    return (overcommit(snap) + process_caps(snap, bounds) + pending(snap, bounds, room_since)
            + locks(snap, bounds) + leftovers(snap, first_seen, bounds)
            + endings(snap, excuse)
            + metrics(snap))


def now_utc() -> datetime:
    """The auditor's clock."""
    from datetime import timezone
    return datetime.now(timezone.utc)
