"""The cluster view: nodes, their GPUs and what every placed (or reserved) pod takes of them.

Usage is kept per device and changed only through reserve/release, so a decision is visible to
the next one at once. Every change bumps the node's version; the engine's caches compare
versions to know which nodes to look at again.
"""
from dataclasses import dataclass
from itertools import repeat
from typing import Iterable, Optional

import numpy as np

from hami_control.placement.capacity import CapacityIndex
from hami_control.placement.model import Device, Node, PlacementError, add_hold
from hami_control.placement.quota import ZERO, Amount, pod_amount


@dataclass(frozen=True)
class Reservation:
    """What one pod takes: per container (init containers first) the GPU slices it got."""

    pod: str
    node: str
    devices: tuple
    init_positions: frozenset = frozenset()   # containers that end before the others start
    cpu_milli: int = 0
    memory_mib: int = 0
    held_for: str = ""          # slices of a gone victim kept for this preemptor (no quota)
    mig: tuple = ()             # MigAllocation per MIG instance the pod holds

    def device_usage(self) -> dict:
        """uuid -> (slots, MiB, cores) the pod holds on that GPU.

        Init containers run one after another before the others start, so per GPU the pod holds
        the larger of (sum over regular containers, largest init container), per dimension.
        """
        regular, init = {}, {}
        for position, ctr in enumerate(self.devices):
            is_init = position in self.init_positions
            into = init if is_init else regular
            for d in ctr:
                into[d.uuid] = add_hold(into.get(d.uuid, (0, 0, 0)), is_init, d.usedmem,
                                        d.usedcores)
        usage = dict(regular)
        for uuid, held in init.items():
            usage[uuid] = tuple(max(a, b) for a, b in zip(usage.get(uuid, (0, 0, 0)), held))
        return usage

    @classmethod
    def of(cls, request, decision) -> "Reservation":
        """What a pod takes once the decision for it is applied (a pod without GPUs holds no
        device list at all, as when it is read back from a pod without GPU annotations)."""
        devices = decision.devices if any(decision.devices) else ()
        return cls(pod=request.key, node=decision.node, devices=devices,
                   init_positions=frozenset(i for i, c in enumerate(request.containers)
                                            if c.init),
                   cpu_milli=request.cpu_milli, memory_mib=request.memory_mib,
                   mig=tuple(decision.mig))


class ClusterView:
    """Nodes by name, their devices' usage, and the reservations that make it up."""

    def __init__(self):
        self.nodes: list = []
        self._by_name: dict = {}
        self._reservations: dict = {}
        self._by_node: dict = {}          # node name -> set of pod keys
        self._arrays = None               # (versions, CapacityIndex); rebuilt when nodes come or go
        self.epoch = 0                    # bumped when nodes come or go (positions change)
        self.caches: dict = {}            # owned by the engine; reset with the epoch
        self._static_cache = None
        self._position: dict = {}         # node name -> position
        self._last_candidates = None      # (epoch, names, mask, unknown)
        self._ns_used: dict = {}          # namespace -> Amount its reservations hold (quota)
        self._quota_holds: dict = {}      # key -> (namespace, Amount): DRA claims, gated pods

    # --- nodes -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, name: str) -> Optional[Node]:
        """The node of that name, or None."""
        return self._by_name.get(name)

    def upsert_node(self, name: str, devices, cpu_milli: Optional[int] = None,
                    memory_mib: Optional[int] = None, cordoned: Iterable[str] = ()) -> Node:
        """Add or replace a node's registration; existing reservations on it are re-applied."""
        cordon = set(cordoned)
        node = Node(name, [Device(info, info.id in cordon) for info in devices], cpu_milli,
                    memory_mib)
        old = self._by_name.get(name)
        if old is not None:
            node.position, node.version = old.position, old.version + 1
            self.nodes[old.position] = node
        else:
            node.position = self._position[name] = len(self.nodes)
            self.nodes.append(node)
        self._by_name[name] = node
        self._changed()                   # a new node, or the GPU inventory may have changed
        for key in self._by_node.get(name, ()):
            self._apply(node, self._reservations[key], +1)
        return node

    def remove_node(self, name: str) -> None:
        """Forget a node; its reservations stay and return with it."""
        if self._by_name.pop(name, None) is not None:
            self.nodes = [n for n in self.nodes if n.name != name]
            for position, node in enumerate(self.nodes):
                node.position = position
            self._position = {node.name: node.position for node in self.nodes}
            self._changed()

    def _changed(self) -> None:
        """Nodes came, went or were re-registered: positions or inventories changed."""
        self._arrays = None
        self.epoch += 1
        self.caches.clear()

    def _indexes(self) -> tuple:
        # Built on first use after a change, so that registering N nodes costs O(N), not O(N^2).
        if self._arrays is None:
            self._arrays = (np.array([n.version for n in self.nodes], dtype=np.int64),
                            CapacityIndex(self.nodes))
        return self._arrays

    @property
    def versions(self) -> np.ndarray:
        """Each node's version, by position."""
        return self._indexes()[0]

    @property
    def capacity(self) -> CapacityIndex:
        """The free-capacity index, by position."""
        return self._indexes()[1]

    def candidates(self, names) -> tuple:
        """(read-only mask over node positions, names the view does not know) for a list of
        node names. The last answer is kept: kube-scheduler sends the same list again and
        again, and comparing it costs a fraction of mapping it anew."""
        key = tuple(names)
        last = self._last_candidates
        if last is not None and last[0] == self.epoch and last[1] == key:
            return last[2], last[3]
        positions = np.fromiter(map(self._position.get, key, repeat(-1)), np.int64, len(key))
        known = positions >= 0
        mask = np.zeros(len(self.nodes), dtype=bool)
        mask[positions[known]] = True
        mask.flags.writeable = False
        unknown = [] if known.all() else [key[i] for i in np.flatnonzero(~known)]
        self._last_candidates = (self.epoch, key, mask, unknown)
        return mask, unknown

    def node_shapes(self) -> dict:
        """{(cpu capacity, memory capacity, GPU types): number of nodes} (cached until nodes
        come or go); capacities are infinite when a node does not report them."""
        return self._static()[1]

    def largest(self) -> tuple:
        """(most millicores, most GPUs x 1000) of any node (cached like above)."""
        return self._static()[0]

    def _static(self) -> tuple:
        if self._static_cache is None or self._static_cache[0] != self.epoch:
            largest = (max((n.cpu_capacity or 0 for n in self.nodes), default=0),
                       max((len(n.devices) * 1000 for n in self.nodes), default=0) or 1000)
            shapes = {}
            for node in self.nodes:
                shape = (float("inf") if node.cpu_capacity is None else node.cpu_capacity,
                         float("inf") if node.mem_capacity is None else node.mem_capacity,
                         tuple(sorted(d.type_lower for d in node.devices)))
                shapes[shape] = shapes.get(shape, 0) + 1
            self._static_cache = (self.epoch, (largest, shapes))
        return self._static_cache[1]

    def _touch(self, node: Node) -> None:
        node.version += 1
        if self._arrays is not None:
            self._arrays[0][node.position] = node.version
            self._arrays[1].update(node)

    # --- reservations --------------------------------------------------------------------
    def reservation(self, pod: str) -> Optional[Reservation]:
        """The pod's reservation, if it holds one."""
        return self._reservations.get(pod)

    def reservations(self) -> list:
        """All reservations (a copy)."""
        return list(self._reservations.values())

    def reserve(self, reservation: Reservation) -> None:
        """Record what a pod takes. PlacementError if the pod already holds a reservation."""
        if reservation.pod in self._reservations:
            raise PlacementError(f"pod {reservation.pod} already holds a reservation on "
                                 f"{self._reservations[reservation.pod].node}; release it first")
        self._reservations[reservation.pod] = reservation
        self._by_node.setdefault(reservation.node, set()).add(reservation.pod)
        self._count(reservation, +1)
        node = self._by_name.get(reservation.node)
        if node is not None:
            self._apply(node, reservation, +1)

    def release(self, pod: str) -> Optional[Reservation]:
        """Give back what a pod took; returns the reservation, or None if it held none."""
        reservation = self._reservations.pop(pod, None)
        if reservation is None:
            return None
        self._by_node[reservation.node].discard(pod)
        self._count(reservation, -1)
        node = self._by_name.get(reservation.node)
        if node is not None:
            self._apply(node, reservation, -1)
        return reservation

    def hold_quota(self, key: str, namespace: str, amount: Optional[Amount]) -> None:
        """Counts against the namespace's quota what `key` holds off this view's GPUs (a DRA
        claim, which kube-scheduler allocates; a claim pod let through its quota gate), or
        with None stops counting it."""
        old = self._quota_holds.pop(key, None)
        if old is not None:
            self._add_used(old[0], old[1], -1)
        if amount is not None and amount != ZERO:
            self._quota_holds[key] = (namespace, amount)
            self._add_used(namespace, amount, +1)

    def quota_hold(self, key: str) -> Optional[Amount]:
        """What `key` holds by hold_quota, or None."""
        held = self._quota_holds.get(key)
        return None if held is None else held[1]

    def namespace_used(self, namespace: str) -> Amount:
        """GPU slices, MiB and cores the namespace's reservations and quota holds hold (for
        its quota)."""
        return self._ns_used.get(namespace, ZERO)

    def namespaces_used(self) -> dict:
        """namespace -> Amount, for every namespace that holds GPUs (a copy)."""
        return dict(self._ns_used)

    def node_reservations(self, name: str) -> list:
        """The reservations on a node."""
        return [self._reservations[k] for k in sorted(self._by_node.get(name, ()))]

    def _count(self, reservation: Reservation, sign: int) -> None:
        if not reservation.devices or reservation.held_for:
            return
        self._add_used(reservation.pod.partition("/")[0],
                       pod_amount(reservation.devices, reservation.init_positions), sign)

    def _add_used(self, namespace: str, held: Amount, sign: int) -> None:
        total = self._ns_used.get(namespace, ZERO) + Amount(*(sign * v for v in held))
        if total == ZERO:
            self._ns_used.pop(namespace, None)
        else:
            self._ns_used[namespace] = total

    def _apply(self, node: Node, reservation: Reservation, sign: int) -> None:
        for uuid, (slots, mem, cores) in reservation.device_usage().items():
            dev = node.device(uuid)
            if dev is not None:          # a GPU that vanished from the registration holds nothing
                dev.used += sign * slots
                dev.usedmem += sign * mem
                dev.usedcores += sign * cores
        for alloc in reservation.mig:
            dev = node.device(alloc.gpu_uuid)
            if dev is not None:
                dev.hold_mig(alloc.placement, sign)
        node.cpu_used += sign * reservation.cpu_milli
        node.mem_used += sign * reservation.memory_mib
        self._touch(node)

    def overcommitted(self) -> list:
        """Devices or nodes whose usage exceeds capacity: (node, what) pairs; empty if none."""
        bad = []
        for node in self.nodes:
            for d in node.devices:
                if d.used > d.count or d.usedmem > d.devmem or d.usedcores > d.devcore or \
                        min(d.used, d.usedmem, d.usedcores) < 0:
                    bad.append((node.name, repr(d)))
            if node.cpu_free < 0 or node.mem_free < 0:
                bad.append((node.name, f"cpu {node.cpu_used}/{node.cpu_capacity} "
                                       f"mem {node.mem_used}/{node.mem_capacity}"))
        return bad
