"""MigManager at Allocate: an instance in a reservation's way that no unfinished pod holds is
reclaimed and the reservation made, waiting (bounded) while its processes exit; a held one is
never touched and the refusal comes at once. The backend is a small stand-in for NVML's
placement rule (tests/node/test_node_mig.py runs the same through NVML on the simulated GPU)."""
import pytest

from hami_common import constants as C
from hami_common.mig import MigAllocation, MigPlacement, encode_allocations
from hami_node.plugin.errors import AllocationError, BackendError
from hami_node.plugin.mig import RECLAIM_WAIT_S, MigManager
from hami_node.plugin.mig_nvml import MigInstance

GPU = "GPU-a"
P = MigPlacement


class Gpu:
    """Instances by GPU-instance id; create refuses an overlapping placement, destroy one
    with processes (`busy`: how many more destroy calls fail)."""

    def __init__(self):
        self.instances_, self.busy, self.next_id = {}, {}, 1

    def mode(self, uuid):
        return (1, 1)

    def profiles(self, uuid):
        return ()

    def instances(self, uuid):
        return list(self.instances_.values())

    def create(self, uuid, profile, placement):
        if any(i.placement.overlaps(placement) for i in self.instances_.values()):
            raise BackendError(f"GPU {uuid}: cannot create a {profile} instance at slices "
                               f"{placement.start}: Insufficient resources")
        gi, self.next_id = self.next_id, self.next_id + 1
        self.instances_[gi] = MigInstance(uuid, gi, 0, profile, placement, f"MIG-{gi}", 1000)
        return self.instances_[gi]

    def destroy(self, uuid, gi):
        if self.busy.get(gi, 0) > 0:
            self.busy[gi] -= 1
            raise BackendError(f"GPU {uuid}: instance {gi} is in use")
        del self.instances_[gi]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def manager(gpu, pods):
    clock = Clock()
    mgr = MigManager(gpu, [GPU], clock=clock, sleep=clock.sleep, log=lambda m: None,
                     pods=lambda: pods)
    mgr.prepare()
    return mgr, clock


def holder(gi, profile, placement):
    """A running pod whose recorded instance is gi."""
    alloc = MigAllocation(0, 0, GPU, profile, placement, f"MIG-{gi}", gi, 0)
    return {"metadata": {"name": f"holder-{gi}", "annotations": {
        C.ANNO_MIG_ALLOCATIONS: encode_allocations([alloc])}}, "status": {"phase": "Running"}}


WHOLE = MigAllocation(0, 0, GPU, "7g.40gb", P(0, 8))


@pytest.mark.parametrize("busy_rounds", [0, 3], ids=["idle", "processes-exiting"])
def test_an_instance_no_pod_holds_is_reclaimed_for_the_reservation(busy_rounds):
    gpu = Gpu()
    gone = gpu.create(GPU, "1g.5gb", P(6, 1))       # its pod ended before the next round
    gpu.busy[gone.gpu_instance_id] = busy_rounds
    mgr, clock = manager(gpu, [])
    [made] = mgr.realize([WHOLE])
    assert made.allocation.profile == "7g.40gb" and made.allocation.realized
    assert [i.profile for i in gpu.instances(GPU)] == ["7g.40gb"]
    assert clock.now < 1.0                   # a few polls while the processes exit


def test_the_wait_for_a_busy_instance_is_bounded():
    gpu = Gpu()
    stuck = gpu.create(GPU, "1g.5gb", P(6, 1))
    gpu.busy[stuck.gpu_instance_id] = 10 ** 6
    mgr, clock = manager(gpu, [])
    with pytest.raises(AllocationError, match="Insufficient resources"):
        mgr.realize([WHOLE])
    assert RECLAIM_WAIT_S <= clock.now < RECLAIM_WAIT_S + 1
    assert [i.profile for i in gpu.instances(GPU)] == ["1g.5gb"]


def test_a_held_instance_in_the_way_is_kept_and_the_refusal_immediate():
    gpu = Gpu()
    held = gpu.create(GPU, "1g.5gb", P(6, 1))
    mgr, clock = manager(gpu, [holder(held.gpu_instance_id, "1g.5gb", P(6, 1))])
    with pytest.raises(AllocationError, match="MIG layout cannot be made"):
        mgr.realize([WHOLE])
    assert clock.now == 0 and gpu.instances(GPU) == [held]


def test_without_a_pod_lister_nothing_is_reclaimed_at_allocate():
    gpu = Gpu()
    gpu.create(GPU, "1g.5gb", P(6, 1))
    mgr = MigManager(gpu, [GPU], log=lambda m: None)
    mgr.prepare()
    with pytest.raises(AllocationError):
        mgr.realize([WHOLE])
    assert len(gpu.instances(GPU)) == 1
