"""Namespace GPU quotas: what a ResourceQuota allows, what a namespace's pods hold, and whether
one more pod fits. Pure functions of plain values; the watch and the status writer feed them.

HAMi reads three keys of a ResourceQuota's `spec.hard`, which Kubernetes' own quota system
neither counts nor enforces (it tracks extended resources only under `requests.`):
`limits.nvidia.com/gpu` (GPU slices), `limits.nvidia.com/gpumem` (MiB, a binary unit such as
"20Gi" is bytes) and `limits.nvidia.com/gpucores` (percent points, 100 = one whole card).

What a pod holds is counted from its placement, in the units of the GPUs actually chosen (a
`gpumem-percentage` becomes MiB of that GPU; a container with N GPUs holds N slices), and over
its containers as Kubernetes counts a pod's requests: the larger of (the containers that run
together: app containers and sidecars) and (each init container on top of the sidecars started
before it).
"""
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple, Optional

from hami_common import constants as C
from hami_common.errors import HamiFormatError
from hami_common.quantity import MIB, has_binary_unit, parse_quantity
from hami_control.placement.model import Decision

REASON = "ResourceQuotaNotFit"
PREFIX = "limits."
KEYS = tuple(PREFIX + r for r in (C.RESOURCE_GPU, C.RESOURCE_MEM, C.RESOURCE_CORES))
UNITS = {KEYS[0]: "GPUs", KEYS[1]: "MiB", KEYS[2]: "% cores"}


class Amount(NamedTuple):
    """GPU slices, MiB and percent cores; the order of KEYS."""

    gpus: int = 0
    mem: int = 0
    cores: int = 0

    def __add__(self, other):
        return Amount(*(a + b for a, b in zip(self, other)))

    def __sub__(self, other):
        return Amount(*(a - b for a, b in zip(self, other)))


ZERO = Amount()


@dataclass(frozen=True)
class QuotaSpec:
    """The HAMi keys of one ResourceQuota's spec.hard: key -> limit (absent: no limit), and
    what its status says of them: key -> (hard, used), None where absent or unreadable."""

    namespace: str
    name: str
    limits: Mapping
    reported: Mapping = field(default_factory=dict)


def _value(key: str, raw) -> int:
    try:
        value = parse_quantity(raw)
    except HamiFormatError as e:
        raise HamiFormatError(f"{key}: {e}") from e
    if key == KEYS[1] and has_binary_unit(raw):
        value = value / MIB              # "20Gi" means bytes; a plain number means MiB
    if value < 0 or value.denominator != 1:
        raise HamiFormatError(f"{key} is {raw!r}; give a whole number >= 0 (MiB for gpumem)")
    return int(value)


def parse_quota(obj: Mapping) -> Optional[QuotaSpec]:
    """The HAMi limits of a v1.ResourceQuota dict; None when it sets none of HAMi's keys;
    HamiFormatError (naming the quota and key) for a value that is not a whole quantity."""
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    hard = (obj.get("spec") or {}).get("hard") or {}
    limits = {}
    for key in KEYS:
        if key in hard:
            try:
                limits[key] = _value(key, hard[key])
            except HamiFormatError as e:
                raise HamiFormatError(f"resourcequota {namespace}/{name}: {e}") from e
    if not limits:
        return None
    status = obj.get("status") or {}
    reported = {key: (_readable(key, (status.get("hard") or {}).get(key)),
                      _readable(key, (status.get("used") or {}).get(key))) for key in limits}
    return QuotaSpec(namespace, name, limits, reported)


def _readable(key: str, raw) -> Optional[int]:
    try:
        return None if raw is None else _value(key, raw)
    except HamiFormatError:
        return None             # rewritten by the status writer


def effective_limits(specs: Iterable[QuotaSpec]) -> dict:
    """key -> limit for a namespace with these quotas: every quota must hold, so the lowest."""
    limits: dict = {}
    for spec in specs:
        for key, value in spec.limits.items():
            limits[key] = min(value, limits.get(key, value))
    return limits


def pod_amount(devices, init_positions) -> Amount:
    """What a pod holds against quota, from its per-container GPU slices (init containers
    first, as in `vgpu-devices-allocated`) and the positions of its init containers.

    A position that is not an init container but comes before one is a sidecar (sidecars are
    init containers that keep running): an init container runs on top of those."""
    running = peak = ZERO
    for position, ctr in enumerate(devices):
        held = Amount(len(ctr), sum(d.usedmem for d in ctr), sum(d.usedcores for d in ctr))
        if position in init_positions:
            peak = Amount(*map(max, peak, running + held))
        else:
            running = running + held
    return Amount(*map(max, peak, running))


def request_floor(request, devmem: int = 0) -> Amount:
    """A lower bound of what a request will hold on GPUs of at least `devmem` MiB: exact unless
    a container asks for a percentage of memory (MiB of `devmem`, 0 by default). A MIG
    instance holds at least the MiB asked and its profile's cores (unknown here: 0)."""
    mig = request.filters.mig
    devices = tuple(tuple(_Slice(c.memory_on(devmem), 0 if mig else c.cores)
                          for _ in range(c.nums)) for c in request.containers)
    return pod_amount(devices, {i for i, c in enumerate(request.containers) if c.init})


class _Slice(NamedTuple):
    usedmem: int
    usedcores: int


def depends_on_gpu(request, limits: Mapping) -> bool:
    """Whether the request's memory against a gpumem limit is known only on a chosen GPU (a
    MIG instance's is its profile's)."""
    return KEYS[1] in limits and any(c.nums and (not c.mem_mib or request.filters.mig)
                                     for c in request.containers)


def refusal(namespace: str, limits: Mapping, used: Amount, asked: Amount) -> Optional[str]:
    """None if `asked` fits beside `used` within every limit; else ResourceQuotaNotFit with the
    numbers of the first limit it exceeds (kube-scheduler retries the pod as pods finish)."""
    for key, have, want in zip(KEYS, used, asked):
        limit = limits.get(key)
        if limit is not None and want and have + want > limit:
            return (f"{REASON}: namespace {namespace} {key}: used {have} + asked {want} > "
                    f"limit {limit} {UNITS[key]}")
    return None


def status_patch(spec: QuotaSpec, used: Amount) -> Optional[dict]:
    """The ResourceQuota status for HAMi's keys ({"hard": .., "used": ..}), or None when the
    status already says so. Kubernetes' quota controller computes no `limits.<extended>` key
    and keeps the used values it cannot compute, so these survive its updates; it also copies
    spec.hard into status.hard, which is written here only for API servers without it."""
    want = {key: (limit, value) for key, limit, value in
            ((k, spec.limits.get(k), v) for k, v in zip(KEYS, used)) if limit is not None}
    if all(spec.reported.get(key) == pair for key, pair in want.items()):
        return None
    return {"hard": {key: str(limit) for key, (limit, _) in want.items()},
            "used": {key: str(value) for key, (_, value) in want.items()}}


_RETRIES = 8     # placements tried for a percentage request (see _smaller_gpus)


def _smaller_gpus(view, request, limits, used, candidates, over: dict) -> list:
    """The candidates where the request may still fit its quota: on a node whose smallest GPU
    already takes it over, it is over anywhere on that node (those go into `over`). Only a node
    with GPUs of several sizes can be left and still be over, hence the few retries."""
    left = []
    for name in candidates:
        node = view.node(name)
        if name in over or node is None:
            continue
        smallest = min((d.devmem for d in node.devices), default=0)
        why = refusal(request.namespace, limits, used, request_floor(request, smallest))
        if why is None:
            left.append(name)
        else:
            over[name] = why
    return left


def place_within_quota(engine, view, request, nodes, limits: Mapping):
    """The engine's decision for `request`, kept within its namespace's `limits` (given the
    usage the view holds: the pod's own earlier reservation must be released first).

    A request whose amount is known beforehand is refused before any placement. One that asks
    for a percentage of memory is placed, and if its MiB on the chosen GPUs exceed the quota,
    the nodes where it cannot fit are left out and it is placed again (a smaller GPU may fit);
    at most _RETRIES placements, after which the nodes not tried are refused with the last
    quota reason."""
    if not limits:
        return engine.place(view, request, nodes)
    used = view.namespace_used(request.namespace)
    inits = {i for i, c in enumerate(request.containers) if c.init}
    why = refusal(request.namespace, limits, used, request_floor(request))
    over: dict = {}                       # node -> why, for the nodes left out over the quota
    candidates = nodes                    # None: every node (named only if a retry needs it)
    for _ in range(_RETRIES if why is None else 0):
        decision = engine.place(view, request, candidates)
        if not decision.ok:
            return Decision(None, failed={**decision.failed, **over}, message=decision.message,
                            policy=decision.policy) if over else decision
        why = refusal(request.namespace, limits, used, pod_amount(decision.devices, inits))
        if why is None:
            return decision
        over[decision.node] = why
        if not depends_on_gpu(request, limits):
            break
        candidates = _smaller_gpus(view, request, limits, used, _names(view, candidates), over)
        if not candidates:
            break
    offered = _names(view, nodes)
    failed = {**dict.fromkeys(offered, why), **over} if engine.config.explain else {}
    return Decision(None, failed=failed, message=f"0/{len(offered)} nodes are available: {why}")


def _names(view, nodes) -> list:
    return [n.name for n in view.nodes] if nodes is None else list(nodes)


def node_summary(node) -> str:
    """One line for `kubectl describe node` (annotation hami.io/node-gpu-allocated): what the
    scheduler has allocated of the node's registered GPUs, e.g.
    `gpus 2/4 in use (3/40 slices), gpumem 12000/65536 MiB, gpucores 130/400`."""
    devices = node.devices
    return (f"gpus {sum(1 for d in devices if d.used)}/{len(devices)} in use "
            f"({sum(d.used for d in devices)}/{sum(d.count for d in devices)} slices), "
            f"gpumem {sum(d.usedmem for d in devices)}/{sum(d.devmem for d in devices)} MiB, "
            f"gpucores {sum(d.usedcores for d in devices)}/{sum(d.devcore for d in devices)}")
