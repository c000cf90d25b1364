"""The extender's bind verb: lock the node, bind the pod with `bind-phase: allocating`.

The Binding carries the `hami.io/bind-phase` and `hami.io/bind-time` annotations, which the API
server copies onto the pod as it binds it: the node agent never sees a pod `allocating` that is
not bound, and a bind costs two API writes (lock, Binding) instead of three. Any failure
releases the lock at once (a failed bind never stalls a node for the lock's 5 minutes),
records a Warning Event on the pod, and answers an Error that kube-scheduler shows; the pod
stays unbound, keeps its reservation, and is filtered again on kube-scheduler's retry.
"""
import logging
from typing import Callable

from hami_common import constants as C
from hami_common.errors import RequestError
from hami_common.request import RequestDefaults, parse_pod
from hami_control.cluster.api import ApiError
from hami_control.cluster.events import warn_pod
from hami_control.errors import BindError
from hami_control.extender.args import parse_bind
from hami_control.extender.filter import unavailable
from hami_control.extender.lock import NodeLocker

log = logging.getLogger(__name__)
EVENT_REASON = "BindingFailed"


class BindHandler:
    """POST /bind: ExtenderBindingArgs in, ExtenderBindingResult out."""

    def __init__(self, state, api, leader, locker: NodeLocker, clock, component: str,
                 defaults: RequestDefaults = RequestDefaults(), metrics=None,
                 synced: Callable[[], bool] = lambda: True, writer=None,
                 asked_no_gpu: Callable[[str], bool] = lambda key: False):
        self.state, self.api, self.leader, self.locker, self.clock = \
            state, api, leader, locker, clock
        self.component, self.defaults, self.metrics, self.synced = \
            component, defaults, metrics, synced
        self.writer, self.asked_no_gpu = writer, asked_no_gpu

    def __call__(self, body) -> dict:
        args = parse_bind(body)
        refusal = unavailable(self.leader, self.synced)
        if refusal:
            self._count("unavailable")
            return {"Error": refusal}
        try:
            self._wait_for_decision(args)
            self._bind(args)
        except BindError as e:
            log.warning("bind %s to %s: %s", args.key, args.node, e)
            self._event(args, str(e))
            self._count("error")
            return {"Error": str(e)}
        finally:
            if self.writer is not None:
                self.writer.forget(args.key)
        self._count("bound")
        return {"Error": ""}

    def _wait_for_decision(self, args) -> None:
        """The filter's write of this pod's decision must have landed before it is bound."""
        if self.writer is not None:
            error = self.writer.wait(args.key)
            if error:
                raise BindError(error)

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.result("bind", result)

    def _bind(self, args) -> None:
        reservation = self.state.reservation(args.key)
        if reservation is None or not reservation.devices:
            self._bind_without_gpus(args)      # no GPU to allocate: no lock, no bind-phase
            return
        if reservation.node != args.node:
            raise BindError(f"pod {args.key} was given GPUs on node {reservation.node}, but is "
                            f"being bound to {args.node}; kube-scheduler filters it again")
        sick = self.state.unhealthy(args.node, reservation.device_usage())
        if sick:       # an XID since the filter: kubelet's Allocate would fail the pod for good
            raise BindError(f"GPU {', '.join(sick)} on node {args.node}, given to pod "
                            f"{args.key}, turned Unhealthy since it was placed; "
                            "kube-scheduler filters it again")
        lock = self.locker.acquire(args.node, args.namespace, args.name)
        phase = {C.ANNO_BIND_PHASE: C.BIND_PHASE_ALLOCATING,
                 C.ANNO_BIND_TIME: str(int(self.clock.now().timestamp()))}
        try:
            self.api.bind_pod(args.namespace, args.name, args.uid, args.node, phase)
        except ApiError as e:
            if self._bound_anyway(args):
                log.info("bind %s: the answer was lost but the pod is bound to %s", args.key,
                         args.node)
                return
            released = self.locker.release(args.node, lock)
            raise BindError(f"binding pod {args.key} to node {args.node} failed: {e}; the "
                            f"node lock is {'released' if released else 'no longer held'} "
                            "and kube-scheduler retries the pod") from e

    def _bound_anyway(self, args) -> bool:
        """Whether the pod is bound to the node although the Binding call failed (a lost
        answer, or kube-scheduler retrying a bind that had worked)."""
        try:
            pod = self.api.get_pod(args.namespace, args.name)
        except ApiError:
            return False
        return pod is not None and (pod.get("spec") or {}).get("nodeName") == args.node

    def _bind_without_gpus(self, args) -> None:
        """A pod that holds no GPU (maybe its CPU and memory): bind it plainly if it asks for
        no GPU."""
        if not self.asked_no_gpu(args.key):
            self._check_asks_no_gpu(args)
        try:
            self.api.bind_pod(args.namespace, args.name, args.uid, args.node, {})
        except ApiError as e:
            if not self._bound_anyway(args):
                raise BindError(f"binding pod {args.key} to node {args.node} failed: {e}") \
                    from e

    def _check_asks_no_gpu(self, args) -> None:
        """Reads the pod (the filter did not see it lately) to make sure it asks for no GPU."""
        try:
            pod = self.api.get_pod(args.namespace, args.name)
        except ApiError as e:
            raise BindError(f"could not read pod {args.key}: {e}") from e
        if pod is None:
            raise BindError(f"pod {args.key} does not exist")
        try:
            wants_gpu = parse_pod(pod, self.defaults).wants_gpu
        except RequestError as e:
            raise BindError(f"pod {args.key}: {e}") from e
        if wants_gpu:
            raise BindError(f"pod {args.key} asks for GPUs but holds no GPU decision from "
                            "hami-control (it was not filtered by this scheduler, or the "
                            "decision was undone); kube-scheduler filters it again")

    def _event(self, args, message: str) -> None:
        warn_pod(self.api, self.component, self.clock.now(), args.namespace, args.name,
                 args.uid, EVENT_REASON, message)
