"""Why a node or a device was refused, in HAMi's words, counted the way HAMi reports them:
`2/8 CardInsufficientMemory, 6/8 CardTypeMismatch` (devices refused for a reason / devices)."""
from collections import Counter

# Per-device reasons, in the order the checks run (HAMi's order; CardCordoned is ours).
CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"
CARD_MODE_MISMATCH = "CardModeMismatch"         # ours: a MIG or MPS GPU takes no hami-core slice
CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_UUID_MISMATCH = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
EXCLUSIVE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_COMPUTE_EXHAUSTED = "CardComputeUnitsExhausted"
CARD_MIG_INFEASIBLE = "CardMigTopologyInfeasible"   # HAMi's: no free MIG placement fits
NUMA_NOT_FIT = "NumaNotFit"
ALLOCATED_INSUFFICIENT = "AllocatedCardsInsufficientRequest"

# Per-node reasons (no device count in front).
NODE_NO_DEVICES = "NodeInsufficientDevice"
NODE_INSUFFICIENT_CPU = "Insufficient cpu"
NODE_INSUFFICIENT_MEMORY = "Insufficient memory"
NODE_UNKNOWN = "NodeUnregistered"

HINTS = {
    CARD_NOT_HEALTH: "the GPU is unhealthy",
    CARD_CORDONED: "the GPU is cordoned (hami.io/device-cordon)",
    CARD_MODE_MISMATCH: "the GPU's mode (hami-core, mig or mps) is not one the pod accepts "
                        "(nvidia.com/vgpu-mode; unset means hami-core)",
    CARD_TYPE_MISMATCH: "the GPU type is excluded by nvidia.com/use-gputype or nouse-gputype",
    CARD_UUID_MISMATCH: "the GPU is excluded by nvidia.com/use-gpuuuid or nouse-gpuuuid",
    CARD_TIME_SLICING_EXHAUSTED: "the GPU already runs as many tasks as it may share",
    CARD_INSUFFICIENT_MEMORY: "not enough free GPU memory",
    CARD_INSUFFICIENT_CORE: "not enough free GPU cores",
    EXCLUSIVE_CONFLICT: "an exclusive (100% cores) request needs an unused GPU",
    CARD_COMPUTE_EXHAUSTED: "all cores of the GPU are taken",
    CARD_MIG_INFEASIBLE: "no MIG profile covering the memory has a placement free of the "
                         "instances reserved on the GPU",
    NUMA_NOT_FIT: "not enough fitting GPUs on one NUMA node (nvidia.com/numa-bind)",
    ALLOCATED_INSUFFICIENT: "some GPUs fit, but fewer than the container asks for",
    NODE_NO_DEVICES: "the node has fewer GPUs than one container asks for",
    NODE_INSUFFICIENT_CPU: "not enough free CPU on the node",
    NODE_INSUFFICIENT_MEMORY: "not enough free memory on the node",
    NODE_UNKNOWN: "the node publishes no GPUs (hami.io/node-nvidia-register)",
}


def format_reason(counts: Counter, cards: int) -> str:
    """`n/cards Reason, ...` for device reasons; node reasons stand alone."""
    parts = []
    for reason, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        parts.append(f"{count}/{cards} {reason}" if reason not in _NODE_LEVEL else reason)
    return ", ".join(parts)


_NODE_LEVEL = frozenset((NODE_NO_DEVICES, NODE_INSUFFICIENT_CPU, NODE_INSUFFICIENT_MEMORY,
                         NODE_UNKNOWN))


def summarize(failed: dict, total: int) -> str:
    """One line for a refusal: `0/3 nodes are available: 2 CardInsufficientMemory, 1 ...`."""
    per_reason = Counter()
    for text, nodes in Counter(failed.values()).items():     # most nodes share a few texts
        for part in text.split(", "):
            per_reason[part.split(" ", 1)[1] if part[:1].isdigit() else part] += nodes
    detail = ", ".join(f"{n} {r}" for r, n in sorted(per_reason.items(), key=lambda kv: -kv[1]))
    return f"0/{total} nodes are available" + (f": {detail}" if detail else "")
