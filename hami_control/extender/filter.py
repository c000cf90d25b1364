"""The extender's filter verb: choose ONE node and the exact GPUs for a pod, record the choice
on the pod (HAMi's annotations) and reserve it in the view at once.

Filters run one at a time (kube-scheduler's scheduling cycle is sequential anyway), so a
decision and its reservation are never interleaved with another pod's decision. With a
DecisionWriter (the server's setting) the write onto the pod runs after the answer; the bind
waits for it (extender/writes.py). Without one, the filter writes before it answers.

When the view holds CPU and memory, a pod of this scheduler that asks for no GPU is placed too:
on a node without GPUs when one is offered (kube-scheduler chooses among them), else on the
GPU node where its CPU and memory strand the least GPU share. Its decision is `vgpu-node`
alone, so that the view counts it until it is bound, as for GPU pods.
"""
import dataclasses
import functools
import logging
import threading
from collections import OrderedDict
from typing import Callable, Optional

from hami_common import constants as C
from hami_common import pod_devices
from hami_common.mig import encode_allocations
from hami_common.errors import RequestError
from hami_common.request import RequestDefaults, parse_pod
from hami_control.cluster.api import ApiError
from hami_control.cluster.objects import resource_version, scheduler_name
from hami_control.extender.args import FilterArgs, filter_result, parse_filter
from hami_control.placement import PlacementError

log = logging.getLogger(__name__)
_NO_GPU_KEEP = 4096

ALLOCATION_ANNOTATIONS = (C.ANNO_VGPU_NODE, C.ANNO_VGPU_TIME, C.ANNO_DEVICES_TO_ALLOCATE,
                          C.ANNO_DEVICES_ALLOCATED, C.ANNO_MIG_ALLOCATIONS, C.ANNO_BIND_PHASE,
                          C.ANNO_BIND_TIME)


def unavailable(leader, synced: Callable[[], bool]) -> str:
    """Why this replica may not filter or bind now ("" when it may)."""
    if not leader.is_leader:
        holder = getattr(leader, "holder", "") or "nobody yet"
        return (f"this hami-control replica is not the leader (the lease is held by {holder});"
                " only the leader filters and binds: point the extender at the "
                "hami-control-leader Service, which selects the pod labelled "
                "hami.io/control-leader=true (this connection is closed, so the retry goes "
                "there)")
    if not synced():
        return ("hami-control has not finished listing nodes and pods since it started; "
                "kube-scheduler retries the pod in a moment")
    return ""


def server_request(request, resources: bool):
    """The request as the server places it: without CPU and memory unless the view holds them
    (kube-scheduler has checked them before calling the extender; dropping them makes pods
    that differ only there share the engine's per-request caches)."""
    if resources or (not request.cpu_milli and not request.memory_mib):
        return request
    return dataclasses.replace(request, cpu_milli=0, memory_mib=0)


def allocation_annotations(decision, now_s: float) -> dict:
    """HAMi's pod annotations for a decision (bind-phase cleared until the next bind); a
    decision without GPUs is the node alone. MIG instances are reserved as HAMi's scheduler
    reserves them, in `hami.io/vgpu-mig-allocations` beside the devices (the node agent
    makes exactly those at Allocate)."""
    devices = pod_devices.encode(decision.devices) if any(decision.devices) else None
    mig = encode_allocations(decision.mig) if decision.mig else None
    return {C.ANNO_VGPU_NODE: decision.node, C.ANNO_VGPU_TIME: str(int(now_s)),
            C.ANNO_DEVICES_TO_ALLOCATE: devices, C.ANNO_DEVICES_ALLOCATED: devices,
            C.ANNO_MIG_ALLOCATIONS: mig, C.ANNO_BIND_PHASE: None, C.ANNO_BIND_TIME: None}


class FilterHandler:
    """POST /filter: ExtenderArgs in, ExtenderFilterResult out."""

    def __init__(self, state, api, leader, clock, defaults: RequestDefaults = RequestDefaults(),
                 metrics=None, synced: Callable[[], bool] = lambda: True, writer=None,
                 scheduler: str = C.SCHEDULER_NAME, preemption=None):
        self.state, self.api, self.leader, self.clock = state, api, leader, clock
        self.preemption = preemption     # called with a pod that fits nowhere (trigger.py)
        self.defaults, self.metrics, self.synced, self.writer = defaults, metrics, synced, writer
        self.scheduler = scheduler
        self._serial = threading.Lock()
        self._no_gpu: OrderedDict = OrderedDict()     # recent pods that asked for no GPU

    def __call__(self, body) -> dict:
        args = parse_filter(body)
        refusal = unavailable(self.leader, self.synced)
        if refusal:
            return self._done("unavailable", filter_result(args, [], error=refusal))
        try:
            request = parse_pod(args.pod, self.defaults)
        except RequestError as e:
            return self._done("invalid", filter_result(args, [], error=f"pod {args.key}: {e}"))
        if not request.wants_gpu:
            self._no_gpu[args.key] = True
            if len(self._no_gpu) > _NO_GPU_KEEP:
                self._no_gpu.popitem(last=False)
            passed = self._without_gpus(args)
            if passed is not None:
                return self._done("no_gpu", filter_result(args, passed))
        with self._serial:
            if self.writer is not None:
                self.writer.wait(request.key)       # the pod's earlier write lands first
            return self._place(args, server_request(request, self.state.resources))

    def _without_gpus(self, args: FilterArgs) -> Optional[list]:
        """The nodes passed through for a pod that asks for no GPU, or None to place it.

        It is placed when it is this scheduler's and the view holds CPU and memory, and only
        GPU nodes are offered: elsewhere its CPU and memory strand no GPU."""
        if not self.state.resources or scheduler_name(args.pod) != self.scheduler:
            return args.node_names
        without = self.state.unknown_nodes(args.node_names)
        return without or None

    def asked_no_gpu(self, key: str) -> bool:
        """Whether pod key was filtered lately as asking for no GPU (its bind needs no
        decision)."""
        return self._no_gpu.pop(key, False)

    def _done(self, result: str, answer: dict) -> dict:
        if self.metrics is not None:
            self.metrics.result("filter", result)
        return answer

    def _place(self, args: FilterArgs, request) -> dict:
        try:
            placement = self.state.decide(request, args.node_names)
        except PlacementError as e:
            return self._done("invalid", filter_result(args, [], error=f"pod {args.key}: {e}"))
        decision = placement.decision
        failed = decision.failed
        if not decision.ok and self.preemption is not None:
            failed = self.preemption(args.pod, request, args.node_names, failed)
        if decision.ok:
            changes = allocation_annotations(decision, self.clock.now().timestamp())
        elif placement.previous is not None:
            changes = dict.fromkeys(ALLOCATION_ANNOTATIONS)   # drop the earlier decision
        else:
            self.state.confirm(request.key, placement.token, None)
            return self._done("unschedulable", filter_result(args, [], failed))
        write = functools.partial(self._write, request, placement, changes)
        if self.writer is not None:
            self.writer.submit(request.key, write)
        else:
            error = write()
            if error:
                return filter_result(args, [], error=error)
        if not decision.ok:
            return self._done("unschedulable", filter_result(args, [], failed))
        return self._done("scheduled", filter_result(args, [decision.node]))

    def _write(self, request, placement, changes: dict) -> Optional[str]:
        """Writes the decision onto the pod: None, or what went wrong (then rolled back)."""
        try:
            pod = self.api.patch_pod_annotations(
                request.namespace, request.name, changes,
                {C.LABEL_VGPU_NODE: changes.get(C.ANNO_VGPU_NODE)})
        except ApiError as e:
            self.state.rollback(request.key, placement)
            log.warning("filter %s: writing its annotations failed: %s", request.key, e)
            self._done("write_failed", None)
            return (f"could not record the GPU decision on pod {request.key}: {e}; the "
                    "reservation is undone and kube-scheduler retries the pod")
        self.state.confirm(request.key, placement.token, resource_version(pod))
        return None
