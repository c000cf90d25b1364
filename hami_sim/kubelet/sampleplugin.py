"""A minimal device plugin for tests and examples: N fake devices of one resource, health
settable at runtime, every call recorded, failures injectable. It behaves as a plugin must:
serves before registering, and re-registers when kubelet.sock is re-created or its own socket
is removed (a kubelet restart)."""
from __future__ import annotations

import os
import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from hami_common.deviceplugin import (HEALTHY, KUBELET_SOCKET_NAME, UNHEALTHY, VERSION, api_pb2,
                                      api_pb2_grpc, unix_target)


@dataclass
class Calls:
    """What kubelet asked, in order."""

    allocate: list = field(default_factory=list)  # [device IDs] per container
    preferred: list = field(default_factory=list)  # (available, must_include, size)
    pre_start: list = field(default_factory=list)  # [device IDs]
    registrations: int = 0


class SamplePlugin(api_pb2_grpc.DevicePluginServicer):
    """Devices `<prefix>-<n>`; Allocate answers env SAMPLE_DEVICES=<ids>, a mount, a device
    node and an annotation per container."""

    def __init__(self, plugin_dir, resource: str = "example.com/dev", count: int = 4, *,
                 endpoint: str = "sample.sock", prefix: str = "dev", pre_start: bool = False,
                 preferred: bool = False, numa: int | None = None):
        self.plugin_dir = str(plugin_dir)
        self.resource = resource
        self.endpoint = endpoint
        self.options = api_pb2.DevicePluginOptions(pre_start_required=pre_start,
                                                   get_preferred_allocation_available=preferred)
        self.health = {f"{prefix}-{i}": HEALTHY for i in range(count)}
        self.numa = numa
        self.calls = Calls()
        self.allocate_error: str | None = None  # answer Allocate with this error when set
        self.prefer_reversed = True  # GetPreferredAllocation picks from the end (detectable)
        self._cond = threading.Condition()
        self._version = 0
        self._server = None
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch_kubelet, daemon=True)

    @property
    def socket_path(self) -> str:
        """The plugin's socket."""
        return os.path.join(self.plugin_dir, self.endpoint)

    # Life cycle -------------------------------------------------------------------------

    def start(self) -> "SamplePlugin":
        """Serves, registers, and keeps re-registering after kubelet restarts."""
        self._serve()
        self.register()
        self._watcher.start()
        return self

    def _serve(self) -> None:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, self._server)
        self._server.add_insecure_port(unix_target(self.socket_path))
        self._server.start()

    def register(self) -> None:
        """Register with kubelet (raises grpc.RpcError when refused or when no kubelet)."""
        kubelet = os.path.join(self.plugin_dir, KUBELET_SOCKET_NAME)
        with grpc.insecure_channel(unix_target(kubelet)) as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(api_pb2.RegisterRequest(
                version=VERSION, endpoint=self.endpoint, resource_name=self.resource,
                options=self.options), timeout=5)
        self.calls.registrations += 1

    def _watch_kubelet(self) -> None:
        kubelet = os.path.join(self.plugin_dir, KUBELET_SOCKET_NAME)
        seen = _inode(kubelet)
        while not self._stop.wait(0.05):
            now = _inode(kubelet)
            if now is None or (now == seen and os.path.exists(self.socket_path)):
                continue
            # kubelet restarted: our socket is gone and/or kubelet.sock is new. Serve again,
            # then register with whichever kubelet now serves kubelet.sock.
            if not os.path.exists(self.socket_path):
                self._server.stop(grace=None)
                self._serve()
            try:
                self.register()
            except grpc.RpcError:
                continue  # the old kubelet is gone and the new one is not serving yet
            seen = now

    def stop(self) -> None:
        """Stops serving and watching."""
        self._stop.set()
        with self._cond:
            self._version += 1
            self._cond.notify_all()
        if self._watcher.is_alive():
            self._watcher.join(timeout=5)
        if self._server:
            self._server.stop(grace=None).wait(5)
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def set_health(self, device_id: str, healthy: bool) -> None:
        """Changes one device's health; ListAndWatch streams the new list."""
        with self._cond:
            self.health[device_id] = HEALTHY if healthy else UNHEALTHY
            self._version += 1
            self._cond.notify_all()

    # DevicePlugin service ---------------------------------------------------------------

    def GetDevicePluginOptions(self, request, context):  # noqa: N802 (gRPC names)
        return self.options

    def _devices(self):
        topo = (api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=self.numa)])
                if self.numa is not None else None)
        return api_pb2.ListAndWatchResponse(devices=[
            api_pb2.Device(ID=i, health=h, topology=topo) for i, h in sorted(self.health.items())])

    def ListAndWatch(self, request, context):  # noqa: N802
        version = -1
        while context.is_active() and not self._stop.is_set():
            with self._cond:
                if version == self._version:
                    self._cond.wait(0.2)
                    continue
                version, response = self._version, self._devices()
            yield response

    def GetPreferredAllocation(self, request, context):  # noqa: N802
        out = []
        for req in request.container_requests:
            self.calls.preferred.append((list(req.available_deviceIDs),
                                         list(req.must_include_deviceIDs), req.allocation_size))
            pool = sorted(req.available_deviceIDs, reverse=self.prefer_reversed)
            picked = list(req.must_include_deviceIDs)
            picked += [d for d in pool if d not in picked][: req.allocation_size - len(picked)]
            out.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=picked))
        return api_pb2.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request, context):  # noqa: N802
        if self.allocate_error:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, self.allocate_error)
        out = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            self.calls.allocate.append(ids)
            out.append(api_pb2.ContainerAllocateResponse(
                envs={"SAMPLE_DEVICES": ",".join(ids)},
                mounts=[api_pb2.Mount(container_path="/opt/sample", host_path="/tmp/sample",
                                      read_only=True)],
                devices=[api_pb2.DeviceSpec(container_path=f"/dev/{i}", host_path=f"/dev/{i}",
                                            permissions="rw") for i in ids],
                annotations={"example.com/devices": ",".join(ids)}))
        return api_pb2.AllocateResponse(container_responses=out)

    def PreStartContainer(self, request, context):  # noqa: N802
        self.calls.pre_start.append(list(request.devices_ids))
        return api_pb2.PreStartContainerResponse()


def _inode(path: str):
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
