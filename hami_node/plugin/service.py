"""The DevicePlugin gRPC service: a thin adapter from kubelet's messages to DeviceTable and
Allocator."""
import threading
from typing import Callable

import grpc

from hami_common.deviceplugin import HEALTHY, UNHEALTHY, api_pb2, api_pb2_grpc
from hami_node.plugin.allocate import ContainerAnswer
from hami_node.plugin.allocator import Allocator
from hami_node.plugin.devices import DeviceTable
from hami_node.plugin.errors import AllocationError, ClusterError

STREAM_POLL_S = 0.5   # how often an idle ListAndWatch checks that kubelet is still listening


def allocate_problem(requests, offered: int) -> str:
    """What makes an Allocate one that kubelet never sends ('' if nothing): no container, a
    container without devices, a device twice, more devices than this plugin offers. Refused
    before any pod is looked up, so that junk never fails the pod kubelet is starting."""
    if not requests:
        return "no container_requests: kubelet asks for at least one container's devices"
    for i, ids in enumerate(requests):
        if not ids:
            return f"container_requests[{i}] has no devices_ids"
        if len(set(ids)) != len(ids):
            return f"container_requests[{i}] names a device twice"
        if len(ids) > offered:
            return (f"container_requests[{i}] asks for {len(ids)} devices; this plugin offers "
                    f"{offered}")
    return ""


def preferred_problem(available, must_include, size: int) -> str:
    """What makes a GetPreferredAllocation request impossible ('' if nothing): kubelet asks
    for 1..len(available) devices, must_include among the available ones."""
    if not 1 <= size <= len(available):
        return f"allocation_size {size} is not between 1 and the {len(available)} available"
    if not set(must_include) <= set(available):
        return "must_include_deviceIDs are not all among available_deviceIDs"
    if len(must_include) > size:
        return f"{len(must_include)} must_include_deviceIDs for an allocation_size of {size}"
    return ""


def device_list(table: DeviceTable, numa: bool = False) -> api_pb2.ListAndWatchResponse:
    """Every virtual device with its health, and its NUMA node when `numa` (numaTopology)."""
    return api_pb2.ListAndWatchResponse(devices=[
        api_pb2.Device(ID=vid, health=HEALTHY if healthy else UNHEALTHY,
                       topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=node)])
                       if numa else None)
        for vid, healthy, node in table.virtual_devices()])


def container_response(answer: ContainerAnswer,
                       device_specs: bool = True) -> api_pb2.ContainerAllocateResponse:
    """One ContainerAnswer as kubelet's message (its device nodes only if device_specs)."""
    return api_pb2.ContainerAllocateResponse(
        envs=answer.envs,
        mounts=[api_pb2.Mount(container_path=m.container_path, host_path=m.host_path,
                              read_only=m.read_only) for m in answer.mounts],
        devices=[api_pb2.DeviceSpec(container_path=d.container_path, host_path=d.host_path,
                                    permissions=d.permissions)
                 for d in (answer.devices if device_specs else ())],
        cdi_devices=[api_pb2.CDIDevice(name=name) for name in answer.cdi_devices])


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    """kubelet's view of this node's GPUs."""

    def __init__(self, table: DeviceTable, allocator: Allocator,
                 log: Callable[[str], None] = print, numa: bool = False,
                 device_specs: bool = True):
        self.table, self.allocator, self.log, self.numa = table, allocator, log, numa
        self.device_specs = device_specs
        self.stopping = threading.Event()

    def GetDevicePluginOptions(self, request, context):  # noqa: N802 (gRPC method names)
        return api_pb2.DevicePluginOptions(pre_start_required=False,
                                           get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):  # noqa: N802
        seen = -1
        while context.is_active() and not self.stopping.is_set():
            version = self.table.version
            if version != seen:
                seen = version
                yield device_list(self.table, self.numa)
            self.table.wait_change(seen, STREAM_POLL_S)

    def GetPreferredAllocation(self, request, context):  # noqa: N802
        requests = [(list(r.available_deviceIDs), list(r.must_include_deviceIDs),
                     r.allocation_size) for r in request.container_requests]
        for i, r in enumerate(requests):
            problem = preferred_problem(*r)
            if problem:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"container_requests[{i}]: {problem}")
        return api_pb2.PreferredAllocationResponse(container_responses=[
            api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids)
            for ids in self.allocator.preferred(requests)])

    def Allocate(self, request, context):  # noqa: N802
        requests = [list(r.devices_ids) for r in request.container_requests]
        problem = allocate_problem(requests, len(self.table.virtual_devices()))
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not an Allocate kubelet sends "
                                                            f"({problem}); no pod was touched")
        try:
            answers = self.allocator.allocate(requests)
        except AllocationError as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except ClusterError as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        return api_pb2.AllocateResponse(container_responses=[
            container_response(a, self.device_specs) for a in answers])

    def PreStartContainer(self, request, context):  # noqa: N802
        return api_pb2.PreStartContainerResponse()
