"""Does a pod fit on a node, and on which GPUs? HAMi's per-device checks, in HAMi's order.

Regular containers are fitted first, then init containers. Init containers end before the
regular ones start, so on a GPU the pod holds the larger of the two (see Reservation): an init
container may reuse what the pod's own regular containers take, but never what other pods hold.
Each GPU of one container is a different physical GPU; two containers may share a GPU.
"""
from collections import Counter
from typing import Optional

from hami_control.placement import migfit
from hami_control.placement import reasons as R
from hami_control.placement.model import Node, Plan, add_hold

_ZERO = (0, 0, 0)


def resource_reason(node: Node, request) -> Optional[str]:
    """kube-scheduler's resource fit for CPU and memory, when the node reports them."""
    if request.cpu_milli and request.cpu_milli > node.cpu_free:
        return R.NODE_INSUFFICIENT_CPU
    if request.memory_mib and request.memory_mib > node.mem_free:
        return R.NODE_INSUFFICIENT_MEMORY
    return None


def _merge(regular, init, ctr, mem) -> tuple:
    """The pod's (slots, MiB, cores) on a GPU after adding `ctr` to it."""
    if ctr.init:
        init = add_hold(init, True, mem, ctr.cores)
    else:
        regular = add_hold(regular, False, mem, ctr.cores)
    return tuple(max(a, b) for a, b in zip(regular, init))


def device_reason(dev, ctr, filters, regular=_ZERO, init=_ZERO, mig_taken=()) -> Optional[str]:
    """Why `ctr` cannot take one slice of `dev`, or None if it can. `regular`/`init` are what
    the pod being placed already holds on the device (its other containers); on a MIG GPU,
    `mig_taken` the placements they take there."""
    if not dev.health:
        return R.CARD_NOT_HEALTH
    if dev.cordoned:
        return R.CARD_CORDONED
    if dev.mode not in filters.modes:
        return R.CARD_MODE_MISMATCH
    if (filters.use_types or filters.nouse_types) and not filters.type_ok(dev.type):
        return R.CARD_TYPE_MISMATCH
    if (filters.use_uuids or filters.nouse_uuids) and not filters.uuid_ok(dev.uuid):
        return R.CARD_UUID_MISMATCH
    if dev.is_mig:
        return migfit.reason(dev, ctr, mig_taken)
    mem = ctr.mem_mib if ctr.mem_mib else dev.devmem * ctr.mem_percent // 100
    if regular is _ZERO and init is _ZERO:
        slots, used_mem, used_cores, own_cores = 1, mem, ctr.cores, 0
    else:
        slots, used_mem, used_cores = _merge(regular, init, ctr, mem)
        own_cores = max(regular[2], init[2])
    if dev.used + slots > dev.count:
        return R.CARD_TIME_SLICING_EXHAUSTED
    if dev.usedmem + used_mem > dev.devmem:
        return R.CARD_INSUFFICIENT_MEMORY
    if dev.usedcores + used_cores > dev.devcore:
        return R.CARD_INSUFFICIENT_CORE
    if ctr.cores == 100 and dev.devcore == 100 and (dev.used or (regular[0] and not ctr.init)):
        return R.EXCLUSIVE_CONFLICT
    if ctr.cores == 0 and dev.devcore and dev.usedcores + own_cores >= dev.devcore:
        return R.CARD_COMPUTE_EXHAUSTED
    return None


def _numa_groups(node: Node, feasible: list, need: int) -> list:
    groups = {}
    for pos in feasible:
        groups.setdefault(node.devices[pos].numa, []).append(pos)
    return [groups[n] for n in sorted(groups) if len(groups[n]) >= need]


def _choose(node, feasible, ctr, request, gpu_policy, reasons, demand=None):
    if request.filters.numa_bind:
        groups = _numa_groups(node, feasible, ctr.nums)
        if not groups:
            if len(feasible) >= ctr.nums:
                reasons[R.NUMA_NOT_FIT] += len(feasible)
            elif feasible:
                reasons[R.ALLOCATED_INSUFFICIENT] += len(feasible)
            return None
        feasible = groups[0]      # the lowest NUMA node that can hold the whole container
    elif len(feasible) < ctr.nums:
        if feasible:
            reasons[R.ALLOCATED_INSUFFICIENT] += len(feasible)
        return None
    if len(feasible) == ctr.nums:
        return tuple(feasible)
    if all(node.devices[pos].is_mig for pos in feasible):
        return migfit.pick(node, feasible, ctr, demand)
    return tuple(gpu_policy.pick(node, feasible, ctr, request))


def fit_pod(node: Node, request, gpu_policy, demand=None):
    """(plan, None) where plan (a Plan) gives per container the device positions it takes and
    the MIG instances it gets, or (None, reason text) saying why the pod does not fit on the
    node's GPUs. `demand`: the MIG asks seen lately (migfit.MigDemand)."""
    containers = request.containers
    plan = [()] * len(containers)
    order = [i for i, c in enumerate(containers) if c.nums and not c.init] + \
            [i for i, c in enumerate(containers) if c.nums and c.init]
    if not order:
        return Plan(plan), None
    devices = node.devices
    if any(containers[i].nums > len(devices) for i in order):
        return None, R.NODE_NO_DEVICES if devices else R.NODE_UNKNOWN
    held_regular, held_init, held_mig, mig_plan = {}, {}, {}, {}
    filters = request.filters
    for i in order:
        ctr = containers[i]
        reasons = Counter()
        feasible = []
        for pos, dev in enumerate(devices):
            why = device_reason(dev, ctr, filters, held_regular.get(pos, _ZERO),
                                held_init.get(pos, _ZERO), held_mig.get(pos, ()))
            if why is None:
                feasible.append(pos)
            else:
                reasons[why] += 1
        chosen = _choose(node, feasible, ctr, request, gpu_policy, reasons, demand)
        if chosen is None:
            return None, R.format_reason(reasons, len(devices))
        plan[i] = chosen
        for d, pos in enumerate(chosen):
            if devices[pos].is_mig:
                taken = held_mig.get(pos, ())
                choice = migfit.choose(devices[pos], ctr, taken, demand)
                mig_plan[(i, d)] = choice
                held_mig[pos] = taken + (choice.placement,)
        if len(order) > 1:
            held = held_init if ctr.init else held_regular
            for pos in chosen:
                held[pos] = add_hold(held.get(pos, _ZERO), ctr.init,
                                     ctr.memory_on(devices[pos].devmem), ctr.cores)
    return Plan(plan, mig_plan), None
