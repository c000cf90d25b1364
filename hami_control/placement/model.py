"""The placement data model: devices and nodes with their usage, plans and decisions."""
from dataclasses import dataclass, field
from typing import Mapping, Optional

from hami_common.constants import DEVICE_MODE_HAMI_CORE, DEVICE_MODE_MIG
from hami_common.mig import MigAllocation
from hami_common.node_register import DeviceInfo
from hami_common.pod_devices import ContainerDevice
from hami_control.placement.workload import share_with


class PlacementError(Exception):
    """The placement engine was asked something it cannot answer (unknown policy, bad view)."""


class Device:
    """One physical GPU of a node: what it is (registered) and what is taken of it."""

    __slots__ = ("uuid", "index", "type", "type_lower", "numa", "count", "devmem", "devcore",
                 "health", "cordoned", "mode", "mode_ok", "profiles", "mig_used", "used",
                 "usedmem", "usedcores")

    def __init__(self, info: DeviceInfo, cordoned: bool = False):
        self.uuid, self.index, self.type = info.id, info.index, info.type
        self.type_lower = info.type.lower()
        self.numa, self.count, self.devmem, self.devcore = info.numa, info.count, info.devmem, \
            info.devcore
        self.health, self.cordoned = info.health, cordoned
        # A GPU in MIG or MPS mode (HAMi's register `mode`) takes no hami-core slice.
        self.mode = info.mode
        self.mode_ok = info.mode == DEVICE_MODE_HAMI_CORE
        # A MIG GPU: the profiles it can be cut into, and the placements reserved on it (a
        # placement once per pod holding it; instances never overlap).
        self.profiles = info.mig_profiles if info.mode == DEVICE_MODE_MIG else ()
        self.mig_used: dict = {}
        self.used = self.usedmem = self.usedcores = 0

    @property
    def is_mig(self) -> bool:
        """Whether the GPU is served as MIG instances."""
        return self.mode == DEVICE_MODE_MIG

    def hold_mig(self, placement, sign: int) -> None:
        """Counts a reservation of a placement (+1) or its release (-1)."""
        held = self.mig_used.get(placement, 0) + sign
        if held > 0:
            self.mig_used[placement] = held
        else:
            self.mig_used.pop(placement, None)

    def share_free(self) -> int:
        """Free fraction of the GPU in thousandths (cores and memory, whichever is scarcer)."""
        return share_with(self)

    def __repr__(self):
        return (f"Device({self.uuid}, {self.type}, used={self.used}/{self.count}, "
                f"mem={self.usedmem}/{self.devmem}, cores={self.usedcores}/{self.devcore})")


class StateKey:
    """A node's state as a dict key whose hash is computed once per version: the engine looks
    every node's state up again for each kind of pod it re-scores, and hashing the nested
    tuple each time cost more than the look-up."""

    __slots__ = ("state", "_hash")

    def __init__(self, state: tuple):
        self.state, self._hash = state, hash(state)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return type(other) is StateKey and self.state == other.state


class Node:
    """A node of the cluster view: its GPUs, and optionally its CPU/memory for resource fit."""

    __slots__ = ("name", "devices", "cpu_capacity", "mem_capacity", "cpu_used", "mem_used",
                 "version", "position", "_items", "_key")

    def __init__(self, name: str, devices, cpu_capacity: Optional[int] = None,
                 mem_capacity: Optional[int] = None):
        self.name, self.devices = name, list(devices)
        self.cpu_capacity, self.mem_capacity = cpu_capacity, mem_capacity
        self.cpu_used = self.mem_used = 0
        self.version = 0          # bumped on every change; caches compare it
        self.position = -1        # index in the view's node list
        self._items = None
        self._key = None

    def state_key(self, with_uuid: bool = False):
        """Everything a placement decision can depend on, but the name, as a dict key: nodes
        with equal keys fit and score alike (the UUIDs matter only to pods that filter by
        UUID)."""
        if with_uuid:
            return self._state(True)
        cached = self._key
        if cached is None or cached[0] != self.version:
            cached = self._key = (self.version, StateKey(self._state(False)))
        return cached[1]

    def _state(self, with_uuid: bool) -> tuple:
        return (self.cpu_free, self.mem_free, self.cpu_capacity is None,
                tuple((d.type_lower, d.uuid if with_uuid else None, d.count, d.devmem,
                       d.devcore, d.used, d.usedmem, d.usedcores, d.health, d.cordoned, d.mode,
                       d.numa, tuple(sorted(d.mig_used)) if d.mig_used else ())
                      for d in self.devices))

    def items(self) -> tuple:
        """((type_lower, free share), ...) per device in order, cached per version."""
        cached = self._items
        if cached is None or cached[0] != self.version:
            cached = self._items = (self.version, tuple((d.type_lower, d.share_free())
                                                        for d in self.devices))
        return cached[1]

    @property
    def cpu_free(self) -> float:
        """Free millicores (infinite when the node does not report CPU)."""
        return float("inf") if self.cpu_capacity is None else self.cpu_capacity - self.cpu_used

    @property
    def mem_free(self) -> float:
        """Free MiB of memory (infinite when the node does not report memory)."""
        return float("inf") if self.mem_capacity is None else self.mem_capacity - self.mem_used

    def device(self, uuid: str) -> Optional[Device]:
        """The device with that UUID, if the node has it."""
        for dev in self.devices:
            if dev.uuid == uuid:
                return dev
        return None


@dataclass(frozen=True)
class Decision:
    """The answer for one pod: a node and per-container GPU slices, or a refusal with reasons.

    `devices` follows the pod's container order (init containers first, GPU-less containers as
    empty tuples), ready for `hami_common.pod_devices.encode`. On a refusal, `failed` maps each
    candidate node to its reason text and `message` sums them up (kube-scheduler style).
    """

    node: Optional[str]
    devices: tuple = ()
    score: float = 0.0
    failed: Mapping[str, str] = field(default_factory=dict)
    message: str = ""
    policy: tuple = ()
    mig: tuple = ()             # MigAllocation per MIG instance (hami.io/vgpu-mig-allocations)

    @property
    def ok(self) -> bool:
        """Whether a node was found."""
        return self.node is not None

    def gpu_share(self) -> float:
        """GPUs allocated, each slice counted by its cores share (a whole card is 1.0)."""
        return sum(d.usedcores for ctr in self.devices for d in ctr) / 100.0


def add_hold(held: tuple, init: bool, mem: int, cores: int) -> tuple:
    """A pod's (slots, MiB, cores) on one GPU once a slice of one more of its containers is
    added: regular containers add up; init containers run one after another, so of theirs the
    largest counts, in one slot."""
    if init:
        return (1, max(held[1], mem), max(held[2], cores))
    return (held[0] + 1, held[1] + mem, held[2] + cores)


class Plan(tuple):
    """Device positions per container, and `mig`: {(container, device index): MigChoice} for
    the devices that are MIG instances."""

    def __new__(cls, positions, mig=None):
        plan = super().__new__(cls, positions)
        plan.mig = dict(mig or {})
        return plan


def plan_devices(node: Node, containers, plan) -> tuple:
    """ContainerDevice tuples for a plan (device positions per container) on a node. A MIG
    instance is recorded as HAMi records it: the instance's MiB and its share of the GPU's
    compute (what the GPU gives up); the container's own gpumem/gpucores are caps the node
    agent applies inside the instance."""
    mig = getattr(plan, "mig", {})
    out = []
    for c, (ctr, positions) in enumerate(zip(containers, plan)):
        devs = []
        for d, i in enumerate(positions):
            choice = mig.get((c, d))
            if choice is not None:
                devs.append(ContainerDevice(uuid=node.devices[i].uuid,
                                            usedmem=choice.profile.memory_mb,
                                            usedcores=choice.profile.core))
            else:
                devs.append(ContainerDevice(uuid=node.devices[i].uuid,
                                            usedmem=ctr.memory_on(node.devices[i].devmem),
                                            usedcores=ctr.cores))
        out.append(tuple(devs))
    return tuple(out)


def plan_mig(node: Node, plan) -> tuple:
    """The plan's MIG reservations (MigAllocation), in container then device order."""
    mig = getattr(plan, "mig", {})
    return tuple(MigAllocation(c, d, node.devices[plan[c][d]].uuid, choice.profile.name,
                               choice.placement) for (c, d), choice in sorted(mig.items()))
