"""The extender's preempt verb: per node kube-scheduler proposes, the victims that make room for
the pod on its GPUs.

kube-scheduler's own victims (those it needs for its plugins: CPU, memory, ...) go anyway; to
them the fewest lower-priority GPU pods are added that free enough memory and cores on one GPU
(or on the GPUs of a multi-GPU container); a node where no such set exists is left out. A
kube-scheduler with kubernetes/kubernetes#135486 offers nodes the extender refused with no
victims at all: the victims are then chosen among the node's lower-priority pods. A pod whose
preemption hami-control already started (trigger.py) is answered with its hold. Each answer
that works is recorded as a proposal; the node kube-scheduler then evicts on becomes the hold.
A pod asking for no GPU gets kube-scheduler's own proposal back unchanged.
"""
import logging

from hami_common.errors import RequestError
from hami_common.request import RequestDefaults, parse_pod
from hami_control.extender.args import parse_preempt, preempt_result
from hami_control.extender.filter import unavailable
from hami_control.preemption.book import PodMeta

log = logging.getLogger(__name__)


class PreemptHandler:
    """POST /preempt: ExtenderPreemptionArgs in, ExtenderPreemptionResult out."""

    def __init__(self, state, leader, defaults: RequestDefaults = RequestDefaults(),
                 metrics=None, synced=lambda: True, enabled: bool = True):
        self.state, self.leader, self.defaults = state, leader, defaults
        self.metrics, self.synced, self.enabled = metrics, synced, enabled

    def _done(self, result: str, answer: dict) -> dict:
        if self.metrics is not None:
            self.metrics.result("preempt", result)
        return answer

    def __call__(self, body) -> dict:
        args = parse_preempt(body)
        refusal = unavailable(self.leader, self.synced)
        if refusal:
            log.info("preempt %s: %s", args.key, refusal)
            return self._done("unavailable", preempt_result({}))
        try:
            request = parse_pod(args.pod, self.defaults)
        except RequestError as e:
            log.info("preempt %s: %s", args.key, e)
            return self._done("invalid", preempt_result({}))
        if not request.wants_gpu:
            return self._done("no_gpu", preempt_result(
                {n: (uids, args.pdb_violations.get(n, 0)) for n, uids in args.victims.items()
                 if uids}))
        if not self.enabled:
            return self._done("disabled", preempt_result({}))
        meta = PodMeta.of(args.pod)
        plans = self.state.preempt_answer(request, meta.priority, args.victims)
        answer = {node: ([c.uid for c in plan.victims], plan.pdb_violations)
                  for node, plan in plans.items()
                  if plan.ok and plan.victims and all(c.uid for c in plan.victims)}
        for node, plan in plans.items():
            log.info("preempt %s on %s: %s", args.key, node, plan.reason or "no victims needed")
        return self._done("victims" if answer else "none", preempt_result(answer))
