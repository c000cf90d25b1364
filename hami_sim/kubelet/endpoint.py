"""kubelet's side of one registered device plugin: the gRPC channel to its socket, its
options, and the device list it streams through ListAndWatch."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import grpc

from hami_common.deviceplugin import (HEALTHY, PRE_START_TIMEOUT_S, api_pb2, api_pb2_grpc,
                                      unix_target)

CALL_TIMEOUT_S = 10.0


class PluginCallError(RuntimeError):
    """A call to the plugin failed; the message carries the plugin's own words."""


@dataclass(frozen=True)
class Device:
    """One device as the plugin advertised it."""

    id: str
    health: str
    numa_nodes: tuple[int, ...] = ()

    @property
    def healthy(self) -> bool:
        """Whether it can be allocated."""
        return self.health == HEALTHY


class PluginEndpoint:
    """A connection to one plugin; follows ListAndWatch in a thread until stopped or broken."""

    def __init__(self, resource: str, socket_path: str, options: api_pb2.DevicePluginOptions,
                 on_change: Callable[["PluginEndpoint"], None]):
        self.resource = resource
        self.socket_path = socket_path
        self.pre_start_required = options.pre_start_required
        self.preferred_available = options.get_preferred_allocation_available
        self.devices: dict[str, Device] = {}
        self.connected = False  # a ListAndWatch stream is open
        self.stopped = False
        self._on_change = on_change
        self._channel = grpc.insecure_channel(unix_target(socket_path))
        self._stub = api_pb2_grpc.DevicePluginStub(self._channel)
        self._stream = None
        self._thread = threading.Thread(target=self._follow, daemon=True,
                                        name=f"listandwatch-{resource}")

    def start(self) -> "PluginEndpoint":
        """Starts following ListAndWatch."""
        self._thread.start()
        return self

    def _follow(self) -> None:
        try:
            self._stream = self._stub.ListAndWatch(api_pb2.Empty(), wait_for_ready=True)
            for response in self._stream:
                self.connected = True
                self.devices = {
                    d.ID: Device(d.ID, d.health,
                                 tuple(n.ID for n in d.topology.nodes) if d.HasField(
                                     "topology") else ())
                    for d in response.devices}
                self._on_change(self)
        except grpc.RpcError:
            pass  # the plugin went away or we cancelled; handled below either way
        finally:
            self.connected = False
            if not self.stopped:
                # A plugin whose stream ended has no usable devices until it registers again.
                self.devices = {d.id: Device(d.id, "Unhealthy", d.numa_nodes)
                                for d in self.devices.values()}
                self._on_change(self)

    def stop(self) -> None:
        """Cancels the stream and closes the channel."""
        self.stopped = True
        if self._stream is not None:
            self._stream.cancel()
        self._channel.close()
        self._thread.join(timeout=5)

    def _call(self, name: str, method, request, timeout: float):
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise PluginCallError(f"{self.resource} plugin {name} failed: "
                                  f"{e.code().name}: {e.details()}") from e

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        """GetPreferredAllocation for one container."""
        req = api_pb2.PreferredAllocationRequest(container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must_include,
                allocation_size=size)])
        resp = self._call("GetPreferredAllocation", self._stub.GetPreferredAllocation, req,
                          CALL_TIMEOUT_S)
        if len(resp.container_responses) != 1:
            raise PluginCallError(f"{self.resource} plugin GetPreferredAllocation answered "
                                  f"{len(resp.container_responses)} containers, expected 1")
        return list(resp.container_responses[0].deviceIDs)

    def allocate(self, device_ids: list[str]) -> api_pb2.ContainerAllocateResponse:
        """Allocate for one container (kubelet sends one container per call)."""
        req = api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=device_ids)])
        resp = self._call("Allocate", self._stub.Allocate, req, CALL_TIMEOUT_S)
        if len(resp.container_responses) != 1:
            raise PluginCallError(f"{self.resource} plugin Allocate answered "
                                  f"{len(resp.container_responses)} containers, expected 1")
        return resp.container_responses[0]

    def pre_start(self, device_ids: list[str]) -> None:
        """PreStartContainer, with kubelet's 30 s deadline."""
        self._call("PreStartContainer", self._stub.PreStartContainer,
                   api_pb2.PreStartContainerRequest(devices_ids=device_ids),
                   PRE_START_TIMEOUT_S)
