"""MIG formats (HAMi's migProfiles and hami.io/vgpu-mig-allocations, both ways) and the pure
MIG placement rules: HAMi's smallest-fit and ours."""
import json

import pytest

from hami_common import node_register
from hami_common.errors import HamiFormatError
from hami_common.mig import (MigAllocation, MigPlacement, MigProfile, decode_allocations,
                             encode_allocations)
from hami_control.placement import mig

from _placement_fixtures import A100_MIG

P = MigPlacement
A100 = A100_MIG

# What HAMi's device plugin writes (its Go encoder: omitempty, these keys).
HAMI_REGISTER = ('[{"id":"GPU-a","index":0,"count":7,"devmem":40960,"devcore":100,'
                 '"type":"NVIDIA-NVIDIA A100-SXM4-40GB","mode":"mig","health":true,'
                 '"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":14,"sliceCount":1,'
                 '"placements":[{"start":6,"size":1},{"start":5,"size":1}]}]}]')
HAMI_ALLOC = ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
              '"placement":{"start":6,"size":1}}]')


def test_hamis_register_annotation_reads_and_writes_back_the_same():
    devices = node_register.decode(HAMI_REGISTER)
    assert devices[0].mode == "mig"
    assert devices[0].mig_profiles[0] == MigProfile("1g.5gb", 4864, 14, 1, (P(6, 1), P(5, 1)))
    assert json.loads(node_register.encode(devices))[0]["migProfiles"] == \
        json.loads(HAMI_REGISTER)[0]["migProfiles"]
    plain = node_register.encode(node_register.decode(HAMI_REGISTER.replace(
        ',"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":14,"sliceCount":1,'
        '"placements":[{"start":6,"size":1},{"start":5,"size":1}]}]', '')))
    assert "migProfiles" not in plain          # omitted when empty, as HAMi does


def test_mig_allocations_round_trip_and_hamis_checks():
    allocs = decode_allocations(HAMI_ALLOC)
    assert allocs == [MigAllocation(0, 0, "GPU-a", "1g.5gb", P(6, 1))]
    done = [MigAllocation(0, 0, "GPU-a", "1g.5gb", P(6, 1), "MIG-x", 7, 0)]
    assert decode_allocations(encode_allocations(done)) == done
    assert json.loads(encode_allocations(allocs)) == json.loads(HAMI_ALLOC)


@pytest.mark.parametrize("value, why", [
    ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","placement":{"start":6,"size":1}}]',
     "incomplete"),
    (HAMI_ALLOC.replace('"placement"', '"migUUID":"MIG-x","placement"'), "partial runtime"),
    (HAMI_ALLOC[:-1] + "," + HAMI_ALLOC[1:], "duplicate"),
    (HAMI_ALLOC.replace('"size":1', '"size":0'), "size must be at least 1"),
    ("{", "not valid JSON"),
], ids=["no-profile", "partial", "duplicate", "empty-placement", "json"])
def test_bad_mig_allocations_say_what_is_wrong(value, why):
    with pytest.raises(HamiFormatError, match=why):
        decode_allocations(value)


@pytest.mark.parametrize("memory, used, want", [
    (4000, (), ("1g.5gb", 6)),                    # 1g from the highest start
    (9000, (), ("1g.10gb", 6)),                   # HAMi: of equal memory, fewest slices
    (15000, (P(6, 1),), ("3g.20gb", 0)),          # 3g at 4 overlaps the 1g at 6
    (15000, (P(0, 1), P(6, 1)), None),            # no 20 GB placement left; 7g neither
    (50000, (), None),                            # more than the GPU
], ids=["1g-high", "variant", "3g-avoids", "full", "too-big"])
def test_smallest_fit_is_hamis_rule(memory, used, want):
    choice = mig.smallest_fit(A100, used, memory)
    assert (choice and (choice.profile.name, choice.placement.start)) == want


def test_best_fit_keeps_room_for_the_pending_mix():
    # A 3g.20gb at 4-7 exists; a 10 GB ask can only go into 0-3 (any choice kills the other
    # 3g.20gb), so ours keeps the most 1g.5gb room and gives the 10 GB variant with more SMs.
    used = (P(4, 4),)
    mix = mig.Mix({"3g.20gb": 5.0, "1g.5gb": 1.0})
    hami = mig.smallest_fit(A100, used, 9000)
    ours = mig.best_fit(A100, used, 9000, mix)
    assert (hami.profile.name, hami.placement) == ("1g.10gb", P(2, 2))
    assert ours.profile.memory_mb == 9856        # never more memory than smallest-fit
    assert ours.profile.slice_count == 2         # the variant with the most SMs


def test_best_fit_prefers_a_placement_that_keeps_a_big_profile_possible():
    # 1g.5gb with 4g.20gb (needs 0-3) pending: never inside 0-3 while 4-6 are free.
    mix = mig.Mix({"4g.20gb": 10.0})
    choice = mig.best_fit(A100, (), 4000, mix)
    assert choice.placement.start >= 4
    cost_choice, cost = mig.loss(A100, (), 4000, mix)
    assert cost_choice == choice and cost == 0
