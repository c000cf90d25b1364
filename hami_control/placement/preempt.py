"""Preemption's pure core: which lower-priority pods to evict on a node so that a pod fits on
its GPUs: the fewest, lowest priority first, PodDisruptionBudgets respected where possible.

kube-scheduler judges a node as a whole; a GPU pod needs room on ONE GPU (or on each of the
GPUs it asks for). So the search works per GPU: for a container asking for k GPUs, each set
of k usable GPUs is a target, and only the pods holding slices of the target's GPUs can free
it. Per target, a greedy pass (lowest priority first until the pod fits, then every victim
put back that need not go, highest priority first: kube-scheduler's reprieve) gives an upper
bound, and every smaller set is then tried in turn, within a budget of fit checks; a plan says
whether its search was exhaustive. Sets are compared by (PodDisruptionBudget violations,
number of victims, their priorities from the highest down).

Quota: a pod whose namespace's GPU quota cannot take it may preempt only pods of its own
namespace, and only so many that the namespace then fits its quota; another namespace's pods
never make room for it (their GPUs would go to a pod its quota forbids). Within a namespace,
priority decides.
"""
from dataclasses import dataclass, field
from itertools import combinations
from typing import Mapping, Optional, Sequence

from hami_control.placement import pdb as P
from hami_control.placement.fit import device_reason, fit_pod, resource_reason
from hami_control.placement.model import Device, Node, plan_devices
from hami_control.placement.policy import Binpack
from hami_control.placement.quota import Amount, pod_amount, refusal, request_floor
from hami_control.placement.view import Reservation

DEFAULT_BUDGET = 2000           # fit checks per node (a check is ~20 us on an 8-GPU node)
_MAX_TARGETS = 64               # GPU sets tried for a multi-GPU container
_PICK = Binpack()               # which of the fitting GPUs: any, the check is only "fits"


@dataclass(frozen=True)
class Candidate:
    """A pod that could be preempted: lower priority than the preemptor, on the node."""

    key: str                    # namespace/name
    priority: int
    reservation: Reservation
    labels: Mapping = field(default_factory=dict)
    uid: str = ""

    @property
    def namespace(self) -> str:
        """The pod's namespace."""
        return self.key.partition("/")[0]


@dataclass(frozen=True)
class QuotaRule:
    """The preemptor's namespace quota: its limits and what the namespace holds now."""

    namespace: str
    limits: Mapping
    used: Amount


@dataclass(frozen=True)
class NodePlan:
    """The victims on one node (lowest priority first) and the GPUs the pod then gets; or,
    with `victims` None, why no set of victims makes room there."""

    node: str
    victims: Optional[tuple] = None
    devices: tuple = ()
    pdb_violations: int = 0
    reason: str = ""
    exhaustive: bool = True
    checks: int = 0

    @property
    def ok(self) -> bool:
        """Whether evicting the victims makes room."""
        return self.victims is not None

    def rank(self) -> tuple:
        """Plans compare by this: fewer budget violations, fewer victims, lower priorities."""
        return (self.pdb_violations, len(self.victims or ()),
                tuple(sorted((c.priority for c in self.victims or ()), reverse=True)))


def scratch_node(node: Node) -> Node:
    """A copy of the node whose usage can be changed freely."""
    devices = []
    for dev in node.devices:
        copy = Device.__new__(Device)
        for slot in Device.__slots__:
            setattr(copy, slot, getattr(dev, slot))
        copy.mig_used = dict(dev.mig_used)
        devices.append(copy)
    clone = Node(node.name, devices, node.cpu_capacity, node.mem_capacity)
    clone.cpu_used, clone.mem_used = node.cpu_used, node.mem_used
    return clone


def remove(node: Node, reservations, sign: int = -1) -> None:
    """Takes what the reservations hold off the (scratch) node; sign +1 puts it back."""
    for r in reservations:
        for uuid, (slots, mem, cores) in r.device_usage().items():
            dev = node.device(uuid)
            if dev is not None:
                dev.used += sign * slots
                dev.usedmem += sign * mem
                dev.usedcores += sign * cores
        for alloc in r.mig:            # a victim's MIG instance frees its placement
            dev = node.device(alloc.gpu_uuid)
            if dev is not None:
                dev.hold_mig(alloc.placement, sign)
        node.cpu_used += sign * r.cpu_milli
        node.mem_used += sign * r.memory_mib


class _Search:
    """One node's search: the scratch node, the checks spent, the best set found."""

    def __init__(self, node: Node, request, forced, budgets, quota, budget, resources):
        self.node, self.request, self.budgets = scratch_node(node), request, budgets
        self.quota, self.budget, self.resources = quota, budget, resources
        self.checks, self.best, self.cut = 0, None, False
        self.forced = tuple(forced)
        remove(self.node, (c.reservation for c in self.forced))

    def fit(self, extra: Sequence[Candidate]) -> Optional[tuple]:
        """The pod's devices once forced + extra are gone, or None."""
        self.checks += 1
        remove(self.node, (c.reservation for c in extra))
        try:
            if self.resources and resource_reason(self.node, self.request):
                return None
            plan, _ = fit_pod(self.node, self.request, _PICK)
            if plan is None:
                return None
            devices = plan_devices(self.node, self.request.containers, plan)
            return devices if self._quota_ok(extra, devices) else None
        finally:
            remove(self.node, (c.reservation for c in extra), +1)

    def _quota_ok(self, extra, devices) -> bool:
        if self.quota is None:
            return True
        freed = Amount()
        for c in self.forced + tuple(extra):
            if c.namespace == self.quota.namespace and c.reservation.devices:
                freed = freed + pod_amount(c.reservation.devices,
                                           c.reservation.init_positions)
        inits = {i for i, ctr in enumerate(self.request.containers) if ctr.init}
        return refusal(self.quota.namespace, self.quota.limits, self.quota.used - freed,
                       pod_amount(devices, inits)) is None

    def offer(self, extra: tuple, devices: tuple) -> None:
        """Keeps forced + extra if it beats the best so far."""
        victims = tuple(sorted(self.forced + extra, key=lambda c: (c.priority, c.key)))
        plan = NodePlan(self.node.name, victims, devices,
                        P.violations(victims, self.budgets))
        if self.best is None or plan.rank() < self.best.rank():
            self.best = plan

    def greedy(self, pool: Sequence[Candidate]) -> None:
        """Lowest priority first until the pod fits, then put back what need not go."""
        taken = []
        for cand in pool:
            taken.append(cand)
            if self.fit(taken) is not None:
                break
        else:
            return
        for cand in sorted(taken, key=lambda c: (-c.priority, c.key)):
            rest = [c for c in taken if c is not cand]
            if self.fit(rest) is not None:
                taken = rest
        self.offer(tuple(taken), self.fit(taken))

    def exhaustive(self, pool: Sequence[Candidate]) -> None:
        """Every set smaller than (or as small as) the best, fewest victims first."""
        for size in range(0 if self.forced else 1, len(pool) + 1):
            best = self.best
            if best is not None and not best.pdb_violations and \
                    size > len(best.victims) - len(self.forced):
                return
            for extra in combinations(pool, size):
                if self.checks >= self.budget:
                    self.cut = True
                    return
                devices = self.fit(extra)
                if devices is not None:
                    self.offer(extra, devices)


def usable_positions(node: Node, request) -> list:
    """The GPUs of the node that some GPU container of the pod could use if they were free."""
    empty = scratch_node(node)
    for dev in empty.devices:
        dev.used = dev.usedmem = dev.usedcores = 0
        dev.mig_used = {}
    ctrs = [c for c in request.containers if c.nums]
    return [pos for pos, dev in enumerate(empty.devices)
            if any(device_reason(dev, c, request.filters) is None for c in ctrs)]


def _targets(node: Node, request, usable: list) -> list:
    """GPU position sets whose holders could make room: per k-GPU container, every k usable
    GPUs; one set of all usable GPUs otherwise (several containers, or too many sets)."""
    gpu_ctrs = [c for c in request.containers if c.nums]
    if len(gpu_ctrs) == 1 and not gpu_ctrs[0].init:
        sets = list(combinations(usable, gpu_ctrs[0].nums))
        if len(sets) <= _MAX_TARGETS:
            return [set(s) for s in sets]
    return [set(usable)]


def _pool(node: Node, target: set, candidates: Sequence[Candidate]) -> list:
    uuids = {node.devices[p].uuid for p in target}
    pool = [c for c in candidates
            if any(d.uuid in uuids for ctr in c.reservation.devices for d in ctr)]
    return sorted(pool, key=lambda c: (c.priority, c.key))


def choose(node: Node, request, candidates: Sequence[Candidate], forced: Sequence = (),
           budgets: Sequence = (), quota: Optional[QuotaRule] = None,
           budget: int = DEFAULT_BUDGET, resources: bool = True) -> NodePlan:
    """The victims to evict on `node` (besides `forced`, which go anyway) for `request` to fit,
    among `candidates` (pods of lower priority, none of them terminating)."""
    quota, candidates, why_quota = _quota_scope(node, request, candidates, quota)
    search = _Search(node, request, forced, budgets, quota, budget, resources)
    usable = usable_positions(node, request)
    if not usable:
        return NodePlan(node.name, reason="no GPU of the node suits the pod")
    pools = [_pool(node, t, candidates) for t in _targets(node, request, usable)]
    if search.forced:
        devices = search.fit(())
        if devices is not None:
            search.offer((), devices)
    for pool in pools:
        search.greedy(pool)
    for pool in pools:
        if search.cut:
            break
        search.exhaustive(pool)
    best = search.best
    if best is None:
        return NodePlan(node.name, reason=_refusal(search, candidates, why_quota),
                        exhaustive=not search.cut, checks=search.checks)
    return NodePlan(best.node, best.victims, best.devices, best.pdb_violations,
                    _explain(best, why_quota), not search.cut, search.checks)


def _quota_scope(node: Node, request, candidates, quota) -> tuple:
    """(quota rule to check, candidates allowed, why) for the preemptor's namespace."""
    if quota is None or not quota.limits:
        return None, list(candidates), ""
    smallest = min((d.devmem for d in node.devices), default=0)
    why = refusal(quota.namespace, quota.limits, quota.used, request_floor(request, smallest))
    if why is None:
        return quota, list(candidates), ""
    own = [c for c in candidates if c.namespace == quota.namespace]
    return quota, own, (f"{why}: a pod over its namespace's quota may preempt only pods of "
                        f"namespace {quota.namespace}")


def _refusal(search: _Search, candidates, why_quota: str) -> str:
    if not candidates:
        return why_quota or "no pod of lower priority holds a GPU the pod could use"
    tail = f" ({why_quota})" if why_quota else ""
    if search.cut:
        return f"no set of victims found within {search.budget} fit checks{tail}"
    return "the pod does not fit even with every lower-priority pod gone" + tail


def _explain(plan: NodePlan, why_quota: str) -> str:
    gpus = sorted({d.uuid for ctr in plan.devices for d in ctr})
    names = ", ".join(f"{c.key} (priority {c.priority})" for c in plan.victims)
    text = f"evicting {names} frees {', '.join(gpus)}"
    if plan.pdb_violations:
        text += f"; violates {plan.pdb_violations} PodDisruptionBudget(s): no set avoids it"
    return text + (f"; {why_quota}" if why_quota else "")
