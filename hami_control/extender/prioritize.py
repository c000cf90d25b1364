"""The extender's prioritize verb: node scores for pods whose GPUs kube-scheduler allocates
itself (DRA claims), from the DRA nodes' model (claims/nodes.py).

deploy/ configures it as an extender of its own with only `prioritizeVerb`, no
`managedResources` (so kube-scheduler asks it about every pod of hami-scheduler) and
`ignorable: true`. Every answer is a HostPriorityList: a pod this model has nothing to say
about (not a claim pod of the webhook's, hami-control not synced yet) gets 0 on every node,
so the answer never keeps a pod from being scheduled. Device-plugin pods never need it: the
filter leaves kube-scheduler one node, and kube-scheduler scores no single node.
"""
import logging
from typing import Callable

from hami_control.extender.args import parse_filter
from hami_control.placement.dra import priorities

log = logging.getLogger(__name__)


class PrioritizeHandler:
    """POST /prioritize: ExtenderArgs in, HostPriorityList out."""

    def __init__(self, nodes, synced: Callable[[], bool] = lambda: True, metrics=None):
        self.nodes, self.synced, self.metrics = nodes, synced, metrics
        self._told_unsynced = False

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.result("prioritize", result)

    def __call__(self, body) -> list:
        args = parse_filter(body)
        if not self.synced():
            if not self._told_unsynced:
                self._told_unsynced = True
                log.info("prioritize before the cluster is listed: every node scores 0 "
                         "(kube-scheduler's own scores decide) until it is")
            self._count("not_synced")
            return priorities({}, args.node_names)
        answer = self.nodes.score(args.pod, args.node_names)
        self._count("scored" if any(a["Score"] for a in answer) else "no_score")
        return answer
