"""MIG on the node: the GPUs served as MIG (config `migDevices`), what they publish, making the
scheduler's reserved instance at Allocate, and reclaiming instances no live pod holds.

The scheduler reserves, per MIG device of a container, a profile at a placement on a GPU
(`hami.io/vgpu-mig-allocations`); Allocate makes exactly that instance (NVML: a GPU instance
at the placement and a compute instance over it), hands the container its MIG UUID, and writes
the instance's identity back into the annotation. `reconcile` destroys every instance on the
MIG GPUs that no unfinished pod of this node names: after a pod ends, and after hami-node was
killed between making an instance and recording it (orphans). Instances younger than
`grace_s` are left alone: their Allocate may still be recording them. An instance in the way
of a reservation at Allocate (its pod ended or was deleted before the next round) is
reclaimed there and then: the real kubelet never retries a failed Allocate.
"""
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Optional, Sequence

from hami_common import constants as C
from hami_common.errors import HamiFormatError
from hami_common.mig import MigAllocation, decode_allocations
from hami_node.plugin.errors import AllocationError, BackendError, ClusterError

# How long Allocate waits for the processes of a gone pod to leave an instance in its way
# (a pod deleted with --force: its containers are still being killed), and how often it looks.
RECLAIM_WAIT_S = 10.0
RECLAIM_POLL_S = 0.25


@dataclass(frozen=True)
class Realized:
    """A reservation with the instance made for it."""

    allocation: MigAllocation
    memory_mb: int

    @property
    def gpu_uuid(self) -> str:
        """The physical GPU."""
        return self.allocation.gpu_uuid

    @property
    def mig_uuid(self) -> str:
        """The MIG device the container gets."""
        return self.allocation.mig_uuid


def mig_gpus(gpus: Iterable, wanted: Sequence[str]) -> set:
    """UUIDs of the GPUs `migDevices` names (by UUID or index; "all" for every GPU)."""
    wanted = [w.strip() for w in wanted if w.strip()]
    return {g.uuid for g in gpus if "all" in wanted or g.uuid in wanted or str(g.index) in wanted}


def pod_allocations(pod: dict) -> list:
    """The pod's MIG reservations; AllocationError when the annotation is malformed."""
    meta = pod.get("metadata") or {}
    try:
        return decode_allocations((meta.get("annotations") or {}).get(C.ANNO_MIG_ALLOCATIONS, ""))
    except HamiFormatError as e:
        raise AllocationError(f"annotation {C.ANNO_MIG_ALLOCATIONS} of pod "
                              f"{meta.get('namespace')}/{meta.get('name')} is malformed ({e}); "
                              "delete the pod so that it is scheduled again") from e


class MigManager:
    """MIG instances of this node's MIG GPUs. `backend`: NvmlMig (or a test double)."""

    def __init__(self, backend, uuids: Iterable[str], *, grace_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] = print,
                 pods: Optional[Callable[[], Iterable[dict]]] = None,
                 reclaim_wait_s: float = RECLAIM_WAIT_S,
                 sleep: Callable[[float], None] = time.sleep):
        self.backend, self.uuids = backend, set(uuids)
        self.pods = pods       # this node's pods now (reclaiming at Allocate); None: never
        self.reclaim_wait_s, self.sleep = reclaim_wait_s, sleep
        self.grace_s, self.clock, self.log = grace_s, clock, log
        self._made = {}        # (gpu, gi id) -> when this agent made it
        self._profiles = {}

    def prepare(self) -> None:
        """Puts the MIG GPUs in MIG mode and reads their profiles; a GPU a process still holds
        stays pending (logged) and publishes no profiles until it is active."""
        for uuid in sorted(self.uuids):
            try:
                mode = self.backend.mode(uuid)
                if mode is None:
                    self.log(f"migDevices: GPU {uuid} cannot do MIG; serving it with the shim")
                    self.uuids.discard(uuid)
                    continue
                if mode[0] != 1 and not self.backend.enable(uuid):
                    self.log(f"GPU {uuid}: MIG mode is pending: a process holds the GPU (NVML "
                             "says In Use); it takes effect once the GPU is idle")
                    continue
                self._profiles[uuid] = tuple(self.backend.profiles(uuid))
            except BackendError as e:
                self.log(f"GPU {uuid}: MIG unavailable ({e})")

    def profiles(self, uuid: str) -> tuple:
        """What a MIG GPU publishes (empty until its MIG mode is active)."""
        if uuid in self.uuids and uuid not in self._profiles:
            self.prepare()
        return self._profiles.get(uuid, ())

    def is_mig(self, uuid: str) -> bool:
        """Whether the GPU is served as MIG."""
        return uuid in self.uuids

    def instances(self) -> dict:
        """GPU UUID -> its MIG instances, for the MIG GPUs in MIG mode (a GPU that cannot say
        is left out and logged)."""
        out = {}
        for uuid in sorted(self._profiles):
            try:
                out[uuid] = list(self.backend.instances(uuid))
            except BackendError as e:
                self.log(f"GPU {uuid}: cannot list MIG instances ({e})")
        return out

    def realize(self, allocations: Sequence[MigAllocation]) -> list:
        """Realized per reservation: makes each reserved instance (or finds the one an earlier
        attempt made); all or none: AllocationError says why and destroys what it made."""
        made, out = [], []
        try:
            for alloc in allocations:
                if alloc.gpu_uuid not in self.uuids:
                    raise AllocationError(f"GPU {alloc.gpu_uuid} is not served as MIG on this "
                                          "node (migDevices); delete the pod")
                existing = self._existing(alloc)
                inst = existing or self._create(alloc)
                if not existing:
                    made.append(inst)
                    self._made[(inst.gpu_uuid, inst.gpu_instance_id)] = self.clock()
                out.append(Realized(replace(alloc, mig_uuid=inst.mig_uuid,
                                            gpu_instance_id=inst.gpu_instance_id,
                                            compute_instance_id=inst.compute_instance_id),
                                    inst.memory_mb))
        except BackendError as e:
            self._undo(made)
            raise AllocationError(f"the MIG layout cannot be made: {e}; the pod stays Pending "
                                  "until it is scheduled where the instance fits") from e
        except AllocationError:
            self._undo(made)
            raise
        return out

    def _create(self, alloc: MigAllocation):
        """Makes the reserved instance. When its placement is taken by instances no unfinished
        pod holds (their pod ended or was deleted since the last round), reclaims them and
        tries again, waiting up to reclaim_wait_s while their processes exit; BackendError
        when a held instance is in the way, or after that wait."""
        deadline, tries = self.clock() + self.reclaim_wait_s, 0
        while True:
            try:
                return self.backend.create(alloc.gpu_uuid, alloc.profile, alloc.placement)
            except BackendError:
                tries += 1
                left = self._reclaim_in_the_way(alloc, quiet=tries > 1)
                if left is None or (left and self.clock() >= deadline):
                    raise
            if left:
                self.sleep(RECLAIM_POLL_S)

    def _reclaim_in_the_way(self, alloc: MigAllocation, quiet: bool) -> Optional[int]:
        """Reclaims what no unfinished pod holds (quiet: what is still busy not logged
        again); of it, how many overlapping the reservation's placement are left (busy),
        None when none overlapped."""
        if self.pods is None:
            return None
        try:
            pods = list(self.pods())
        except ClusterError as e:
            self.log(f"cannot list this node's pods to reclaim MIG instances ({e})")
            return None
        unheld = self._unheld(pods)
        in_the_way = [(uuid, i) for uuid, i in unheld if uuid == alloc.gpu_uuid and
                      i.placement.overlaps(alloc.placement)]
        destroyed = self._destroy(unheld, quiet)
        return len([i for _, i in in_the_way if i not in destroyed]) if in_the_way else None

    def recorded(self, realized: Iterable[Realized]) -> None:
        """The instances are in their pod's annotation now: no grace once the pod is gone."""
        for r in realized:
            self._made.pop((r.gpu_uuid, r.allocation.gpu_instance_id), None)

    def _existing(self, alloc: MigAllocation):
        for inst in self.backend.instances(alloc.gpu_uuid):
            if inst.placement == alloc.placement and inst.profile == alloc.profile and \
                    (not alloc.realized or inst.gpu_instance_id == alloc.gpu_instance_id):
                return inst if inst.mig_uuid else None
        return None

    def _undo(self, made) -> None:
        for inst in made:
            try:
                self.backend.destroy(inst.gpu_uuid, inst.gpu_instance_id)
            except BackendError as e:
                self.log(f"cannot undo MIG instance {inst.mig_uuid}: {e}; reconcile retries")

    def reconcile(self, pods: Iterable[dict]) -> list:
        """Destroys instances on the MIG GPUs that no unfinished pod names (by GPU and GPU
        instance id, or by profile and placement while not yet recorded: the instance its
        Allocate finds); returns what it destroyed."""
        return self._destroy(self._unheld(pods))

    def _unheld(self, pods: Iterable[dict]) -> list:
        """(GPU UUID, instance) of every instance no unfinished pod holds."""
        claimed, pending = set(), set()
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in C.POD_FINISHED_PHASES:
                continue
            try:
                allocs = pod_allocations(pod)
            except AllocationError:
                continue
            for a in allocs:
                if a.realized:
                    claimed.add((a.gpu_uuid, a.gpu_instance_id))
                else:
                    pending.add((a.gpu_uuid, a.profile, a.placement))
        unheld = []
        for uuid in sorted(self._profiles):
            try:
                instances = self.backend.instances(uuid)
            except BackendError as e:
                self.log(f"GPU {uuid}: cannot list MIG instances ({e})")
                continue
            for inst in instances:
                key = (uuid, inst.gpu_instance_id)
                if key in claimed:
                    self._made.pop(key, None)      # recorded: no grace once its pod is gone
                young = self.clock() - self._made.get(key, -1e18) < self.grace_s
                if not (key in claimed or (uuid, inst.profile, inst.placement) in pending
                        or young):
                    unheld.append((uuid, inst))
        return unheld

    def _destroy(self, instances: Iterable, quiet: bool = False) -> list:
        destroyed = []
        for uuid, inst in instances:
            try:
                self.backend.destroy(uuid, inst.gpu_instance_id)
                self._made.pop((uuid, inst.gpu_instance_id), None)
                destroyed.append(inst)
                self.log(f"GPU {uuid}: destroyed MIG instance {inst.profile} at "
                         f"{inst.placement.start} ({inst.mig_uuid}): no pod holds it")
            except BackendError as e:
                if not quiet:
                    self.log(f"GPU {uuid}: MIG instance {inst.gpu_instance_id} not reclaimed "
                             f"yet ({e})")
        return destroyed
