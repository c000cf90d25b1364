"""The device plugin service refuses requests kubelet never sends (INVALID_ARGUMENT, with what
is wrong) before the allocator looks up any pod, so junk on the socket cannot fail the pod
kubelet is starting (tests/k8s/test_bad_input_real.py feeds the real socket)."""
import grpc
import pytest

from hami_common.deviceplugin import api_pb2
from hami_node.plugin.service import DevicePluginService


class Aborted(Exception):
    """What context.abort raises (grpc raises an exception of its own there too)."""


class Context:
    def abort(self, code, message):
        raise Aborted(code, message)


class Table:
    """Eight virtual devices."""

    def virtual_devices(self):
        return [(f"GPU-a-{i}", True, 0) for i in range(8)]


class Allocator:
    """Records that it was asked."""

    def __init__(self):
        self.asked = []

    def allocate(self, requests):
        self.asked.append(requests)
        return []

    def preferred(self, requests):
        self.asked.append(requests)
        return [[] for _ in requests]


def _allocate(*containers):
    return api_pb2.AllocateRequest(container_requests=[
        api_pb2.ContainerAllocateRequest(devices_ids=ids) for ids in containers])


ALLOCATE_JUNK = [
    ("no-containers", _allocate(), "no container_requests"),
    ("no-devices", _allocate([]), "container_requests[0] has no devices_ids"),
    ("twice", _allocate(["GPU-a-0"], ["GPU-a-1", "GPU-a-1"]), "[1] names a device twice"),
    ("thousands", _allocate([f"junk-{i}" for i in range(5000)]), "offers 8"),
]


def refusal(method: str, request_):
    """(status code, message, the allocator) of a call that the service must refuse."""
    allocator = Allocator()
    service = DevicePluginService(Table(), allocator, log=lambda _m: None)
    with pytest.raises(Aborted) as refused:
        getattr(service, method)(request_, Context())
    return (*refused.value.args, allocator)


@pytest.mark.parametrize("request_, says", [c[1:] for c in ALLOCATE_JUNK],
                         ids=[c[0] for c in ALLOCATE_JUNK])
def test_allocate_junk_touches_no_pod(request_, says):
    code, message, allocator = refusal("Allocate", request_)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and says in message
    assert "no pod was touched" in message and allocator.asked == []


def _preferred(available, must, size):
    return api_pb2.PreferredAllocationRequest(container_requests=[
        api_pb2.ContainerPreferredAllocationRequest(
            available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)])


PREFERRED_JUNK = [
    ("negative-size", _preferred(["a"], [], -1), "allocation_size -1 is not between 1"),
    ("size-over-available", _preferred(["a"], [], 100000), "and the 1 available"),
    ("must-not-available", _preferred(["a", "b"], ["z"], 1), "not all among"),
    ("must-over-size", _preferred(["a", "b"], ["a", "b"], 1), "2 must_include_deviceIDs"),
]


@pytest.mark.parametrize("request_, says", [c[1:] for c in PREFERRED_JUNK],
                         ids=[c[0] for c in PREFERRED_JUNK])
def test_preferred_allocation_junk_is_refused(request_, says):
    code, message, allocator = refusal("GetPreferredAllocation", request_)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and says in message
    assert allocator.asked == []


def test_what_kubelet_sends_reaches_the_allocator():
    allocator = Allocator()
    service = DevicePluginService(Table(), allocator, log=lambda _m: None)
    service.Allocate(_allocate(["GPU-a-0", "GPU-a-1"]), Context())
    service.GetPreferredAllocation(_preferred(["GPU-a-0", "GPU-a-1"], ["GPU-a-1"], 1),
                                   Context())
    assert allocator.asked == [[["GPU-a-0", "GPU-a-1"]], [(["GPU-a-0", "GPU-a-1"],
                                                           ["GPU-a-1"], 1)]]
