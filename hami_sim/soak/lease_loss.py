"""kube-scheduler's exit after a lost Lease, told apart from a crash (the installed mode).

kube-scheduler with leader election exits ("Leaderelection lost", exit 1) when it cannot renew
its Lease within its renew deadline (10 s by default), and kubelet restarts it: Kubernetes'
own design, which keeps two schedulers from ever acting at once. An API server restart or an
etcd pause can outlast that deadline on this machine, so the soak's kube-apiserver and etcd
faults may cost the chart's kube-scheduler one restart. Such a restart is counted apart (and
printed), not reported as a component that stopped; any other restart still is.

How: the release's container restart counts are read before the fault, then watched for
WATCH_S after it recovers; a container whose count rose and whose last run ended inside that
span with the Lease message in its output is one such restart. A restart whose last run ended
otherwise (a soak's SIGKILL meanwhile, a crash) is not counted here.
"""
from __future__ import annotations

import time
from typing import Callable

from hami_common.node_lock import parse_time
from hami_sim.realcluster.installed import last_output

LEASE_LOST = "leaderelection lost"      # kube-scheduler's last words, matched without case
WATCH_S = 20.0
SLACK_S = 2.0                           # finishedAt has whole seconds


class LeaseLosses:
    """Restarts of the release's containers after a lost Lease during an API outage.

    pods() lists the release's pods as JSON; output(pod, container) is the end of the run
    before the container's last restart; note(pod, container) is told of each one found, so
    that the caller expects that restart."""

    def __init__(self, pods: Callable[[], list], output: Callable[[dict, str], str],
                 note: Callable[[str, str], None], clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        self.pods, self.output, self.note = pods, output, note
        self.clock, self.sleep = clock, sleep
        self.found: list = []            # in words, for the report

    def counts(self) -> dict:
        """(pod, container) -> restartCount now."""
        return {(p["metadata"]["name"], s["name"]): s.get("restartCount", 0)
                for p in self.pods()
                for s in (p.get("status") or {}).get("containerStatuses") or []}

    def around(self, kind: str, fault: Callable[[], float]) -> float:
        """Runs fault (an API outage of kind; returns its recovery time), then watches for
        WATCH_S for a restart it caused by a lost Lease."""
        before, start = self.counts(), self.clock()
        recovered = fault()
        deadline, seen = self.clock() + WATCH_S, set()
        while True:
            self._look(kind, before, start, seen)
            if self.clock() >= deadline:
                return recovered
            self.sleep(1.0)

    def _look(self, kind: str, before: dict, start: float, seen: set) -> None:
        try:
            pods = self.pods()
        except Exception:          # the API server may still be settling: look again later
            return
        for pod in pods:
            for s in (pod.get("status") or {}).get("containerStatuses") or []:
                key = (pod["metadata"]["name"], s["name"])
                last = (s.get("lastState") or {}).get("terminated") or {}
                stamp = last.get("finishedAt")
                ended = parse_time(stamp).timestamp() if stamp else 0.0
                if s.get("restartCount", 0) <= before.get(key, 0) or key in seen or \
                        ended < start - SLACK_S:
                    continue
                if LEASE_LOST in self.output(pod, s["name"]).lower():
                    seen.add(key)
                    self.note(*key)
                    self.found.append(f"{key[0]}/{key[1]} exited after losing its Lease "
                                      f"during {kind} (ended {last.get('finishedAt')}, exit "
                                      f"{last.get('exitCode')}); kubelet restarted it")


def previous_output(c) -> Callable[[dict, str], str]:
    """The end of a container's run before its last restart."""
    return lambda pod, container: last_output(c, pod, container, 40, previous=True)
