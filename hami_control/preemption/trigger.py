"""FilterPreemption: preemption started by the filter, for kube-scheduler versions that never
ask the extender.

kube-scheduler (1.34 and before) chooses its victims by dry-running its own filter plugins
only: with the GPU resources `ignoredByScheduler`, a node the extender refused looks roomy as
soon as lower-priority pods are removed, every one of them is "reprieved", the node has no
victims, and the preempt verb is never called (kubernetes/kubernetes#139270, fixed by #135486,
after which kube-scheduler hands such nodes to the extender with no victims). So when a filter
finds that a pod fits nowhere, hami-control chooses the victims itself, holds the slices they
will free, nominates the pod and evicts them as kube-scheduler would. A kube-scheduler that
does call the preempt verb afterwards is answered with this same hold.
"""

from hami_control.preemption.book import PodMeta



class FilterPreemption:
    """Called by the filter with a refused pod: starts (or reports) its preemption."""

    def __init__(self, state, evictor):
        self.state, self.evictor = state, evictor

    def __call__(self, pod: dict, request, nodes, failed: dict) -> dict:
        """The refusal's per-node reasons, with what preemption does about them."""
        meta = PodMeta.of(pod)
        if meta.never:
            return failed
        hold = self.state.hold_of(request.key)
        if hold is not None:
            waiting = ", ".join(hold.waiting) or "nothing (the slices are free)"
            victims = ", ".join(sorted(hold.victims))
            return _note(failed, hold.node, f"preemption holds the slices of {victims} for "
                                            f"this pod; waiting for {waiting} to end")
        plan, _ = self.state.preempt(request, meta.priority, nodes)
        if plan is None:
            return failed
        self.evictor.submit((request.namespace, request.name, meta.uid), plan)
        return _note(failed, plan.node, f"preempting: {plan.reason}; the freed slices are "
                                        "held for this pod")


def _note(failed: dict, node: str, text: str) -> dict:
    out = dict(failed)
    out[node] = f"{out[node]}; {text}" if out.get(node) else text
    return out
