"""Evictor: carries a preemption out the way kube-scheduler's DefaultPreemption does.

The preemptor is nominated to the node (`status.nominatedNodeName`): kube-scheduler then tries
that node first, and its own preemption leaves the pod alone while victims on the nominated
node terminate. Each victim gets the `DisruptionTarget` condition with reason
`PreemptionByScheduler` (what kube-scheduler checks for, and what controllers such as the Job
controller read) and is deleted gracefully, only if it still is the same pod (UID
precondition), with a Normal `Preempted` Event; the preemptor gets a `Preempting` Event naming
the victims and why. The calls run on a small pool, off the filter's answer; a call that fails
is logged (and the victim left alone): the hold then waits for nothing that comes, and expires.
"""
import logging
from concurrent.futures import ThreadPoolExecutor

from hami_control.cluster.api import ApiError, Conflict, NotFound
from hami_control.cluster.events import pod_event

log = logging.getLogger(__name__)
COMPONENT = "hami-control"


class Evictor:
    """Nominates preemptors and evicts their victims through a PreemptionApi."""

    def __init__(self, api, clock, scheduler: str, workers: int = 2):
        self.api, self.clock, self.scheduler = api, clock, scheduler
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preempt")

    def submit(self, preemptor, plan) -> None:
        """Carries the plan out in the background. preemptor: (namespace, name, uid)."""
        self._pool.submit(self._run, preemptor, plan)

    def _run(self, preemptor, plan) -> None:
        namespace, name, uid = preemptor
        try:
            self.api.patch_pod_status(namespace, name, {"nominatedNodeName": plan.node})
        except ApiError as e:
            log.warning("preemption for %s/%s: could not nominate node %s: %s", namespace, name,
                        plan.node, e)
        victims = ", ".join(c.key for c in plan.victims)
        pod_event(self.api, COMPONENT, self.clock.now(), namespace, name, uid, "Preempting",
                  f"hami-control preempts {victims} on node {plan.node}: {plan.reason}")
        for victim in plan.victims:
            self._evict(victim, f"{namespace}/{name}", uid, plan.node)
        log.info("preemption for %s/%s on %s: %s", namespace, name, plan.node, plan.reason)

    def _evict(self, victim, preemptor: str, preemptor_uid: str, node: str) -> None:
        namespace, _, name = victim.key.partition("/")
        condition = {"type": "DisruptionTarget", "status": "True",
                     "reason": "PreemptionByScheduler",
                     "message": f"{self.scheduler}: preempting to accommodate a higher priority "
                                "pod",
                     "lastTransitionTime": self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")}
        try:
            self.api.patch_pod_status(namespace, name, {"conditions": [condition]})
            self.api.delete_pod(namespace, name, victim.uid)
        except (NotFound, Conflict):
            log.info("preemption victim %s is gone already", victim.key)
            return
        except ApiError as e:
            log.warning("could not preempt %s for %s: %s", victim.key, preemptor, e)
            return
        pod_event(self.api, COMPONENT, self.clock.now(), namespace, name, victim.uid,
                  "Preempted", f"Preempted by pod {preemptor_uid} ({preemptor}) on node {node}")

    def close(self) -> None:
        """Waits for the evictions in flight."""
        self._pool.shutdown(wait=True)
