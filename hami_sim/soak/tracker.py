"""The soak's pods through their lives: created (or refused while a fault lasts, tried again
with the next tick), watched to their start (latency) and end, deleted once finished (after the
auditor has had time to see how they ended) or while running when their turn comes."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from hami_sim.soak.workload import LABEL, SoakPod

GRACE_S = 2


@dataclass
class Life:
    """One soak pod as the soak saw it."""

    pod: SoakPod
    created: float                      # wall clock of the create call
    during_fault: bool = False          # a fault was active before it started
    waited_room: bool = False           # seen unschedulable (no GPU had room) before it started
    started: float = 0.0                # its container's startedAt (wall clock)
    running_seen: float = 0.0           # monotonic time it was first seen started
    phase: str = "Pending"
    finished_seen: float = 0.0          # monotonic time it was first seen finished
    deleted: bool = False
    deleted_running: bool = False


def _wall(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(
        timezone.utc).timestamp()


def _started_at(pod: dict) -> float:
    for st in (pod.get("status") or {}).get("containerStatuses") or []:
        state = st.get("state") or {}
        for key in ("running", "terminated"):
            if (state.get(key) or {}).get("startedAt"):
                return _wall(state[key]["startedAt"])
    return 0.0


def _unschedulable(pod: dict) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (pod.get("status") or {}).get("conditions") or [])


@dataclass
class PodTracker:
    """The soak's pods in one namespace, by name."""

    cluster: object
    run_id: str
    audit_interval_s: float
    namespace: str = "default"
    lives: dict = field(default_factory=dict)
    refused: dict = field(default_factory=dict)     # why -> count
    pending_pod: object = None                       # refused, to be tried again
    start: float = 0.0

    def create(self, pod: SoakPod) -> None:
        """Creates pod (or the one refused last time first: the same pod is tried again)."""
        from kubernetes.client.rest import ApiException
        todo = self.pending_pod or pod
        self.pending_pod = None
        try:
            self.cluster.core_v1.create_namespaced_pod(self.namespace, todo.manifest,
                                                       _preload_content=False,
                                                       _request_timeout=20)
        except ApiException as e:
            why = f"{e.status} {e.reason}"
            if "webhook" in (e.body or ""):
                why += " (webhook)"
            self.refused[why] = self.refused.get(why, 0) + 1
            self.pending_pod = todo
            return
        except Exception as e:       # the API server away: connection refused, timeout
            why = type(e).__name__
            self.refused[why] = self.refused.get(why, 0) + 1
            self.pending_pod = todo
            return
        self.lives[todo.name] = Life(todo, time.time())

    def _list(self) -> list:
        resp = self.cluster.core_v1.list_namespaced_pod(
            self.namespace, label_selector=f"{LABEL}={self.run_id}", _preload_content=False,
            _request_timeout=15)
        return json.loads(resp.data).get("items") or []

    def sweep(self, fault_active: bool) -> None:
        """Notes starts and ends; deletes pods finished long enough ago, and long pods
        whose turn to be deleted while running has come."""
        try:
            pods = self._list()
        except Exception:
            return                              # the API server away: next time
        now = time.monotonic()
        for pod in pods:
            life = self.lives.get(pod["metadata"]["name"])
            if life is None or life.deleted:
                continue
            if not life.started:
                life.during_fault = life.during_fault or fault_active
                life.waited_room = life.waited_room or _unschedulable(pod)
            life.phase = (pod.get("status") or {}).get("phase") or life.phase
            if not life.started and _started_at(pod):
                life.started, life.running_seen = _started_at(pod), now
            if life.phase in ("Succeeded", "Failed"):
                life.finished_seen = life.finished_seen or now
                if now - life.finished_seen > 2 * self.audit_interval_s + 2:
                    self._delete(life)
            elif life.pod.delete_after_s and life.running_seen and \
                    now - life.running_seen > life.pod.delete_after_s:
                life.deleted_running = self._delete(life)

    def _delete(self, life: Life) -> bool:
        from kubernetes.client.rest import ApiException
        try:
            self.cluster.core_v1.delete_namespaced_pod(life.pod.name, self.namespace,
                                                       grace_period_seconds=GRACE_S,
                                                       _request_timeout=15)
        except ApiException as e:
            if e.status != 404:
                return False
        except Exception:
            return False
        life.deleted = True
        return True

    def drain(self, timeout: float, accounting) -> None:
        """Lets the finished pods be seen, deletes every pod left, waits until none is left
        and the accounting directories are cleaned (up to timeout seconds)."""
        deadline = time.monotonic() + timeout
        time.sleep(2 * self.audit_interval_s + 2)
        self.sweep(False)
        while time.monotonic() < deadline:
            try:
                pods = self._list()
            except Exception:
                time.sleep(1)
                continue
            now = time.monotonic()
            for pod in pods:
                life = self.lives.get(pod["metadata"]["name"])
                if life is None or life.deleted:
                    continue
                life.phase = (pod.get("status") or {}).get("phase") or life.phase
                if life.phase in ("Succeeded", "Failed"):     # seen by the auditor first
                    life.finished_seen = life.finished_seen or now
                    if now - life.finished_seen > 2 * self.audit_interval_s + 2:
                        self._delete(life)
                else:
                    life.deleted_running = self._delete(life)
            if not pods and not accounting():
                return
            time.sleep(2)
