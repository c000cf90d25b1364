"""The gRPC edge of the DRA driver: the DRA services (v1 and v1beta1, the same handlers) on
<kubelet root>/plugins/<driver>/dra.sock, and plugin registration on
<kubelet root>/plugins_registry/<driver>-reg.sock, which kubelet's plugin watcher finds.

The services serve before the registration socket appears (kubelet dials back at once). A
watcher re-creates either socket if it disappears. kubelet keeps its own registrations across
its restarts by finding the socket again, so nothing has to be re-registered by hand.
"""
import os
import threading
from concurrent import futures
from typing import Callable, Optional

import grpc

from hami_common import draplugin
from hami_common.deviceplugin import unix_target
from hami_common.draplugin import (dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2,
                                   dra_v1beta1_pb2_grpc, registration_pb2,
                                   registration_pb2_grpc)
from hami_node.dra.driver import ClaimRef, DraDriver
from hami_node.plugin.errors import NodeAgentError
from hami_node.plugin.registration import inode

POLL_S = 0.5
MAX_SOCKET_PATH = 107      # sun_path's size, less the terminating byte


def _refs(request) -> list:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]


class DraService:
    """NodePrepareResources / NodeUnprepareResources for one API version's messages."""

    def __init__(self, driver: DraDriver, pb):
        self.driver, self.pb = driver, pb

    def NodePrepareResources(self, request, context):   # noqa: N802 (gRPC method name)
        """Prepares the claims; per claim its devices with CDI IDs, or an error."""
        out = self.pb.NodePrepareResourcesResponse()
        for uid, done in self.driver.prepare(_refs(request)).items():
            answer = out.claims[uid]
            if done.error:
                answer.error = done.error
                continue
            for device, ids in zip(done.devices, done.cdi_ids):
                answer.devices.add(request_names=[device.request], pool_name=done.pool,
                                   device_name=device.device, cdi_device_ids=list(ids))
        return out

    def NodeUnprepareResources(self, request, context):   # noqa: N802
        """Unprepares the claims (unknown ones are already done)."""
        out = self.pb.NodeUnprepareResourcesResponse()
        for uid, error in self.driver.unprepare(_refs(request)).items():
            out.claims[uid].error = error
        return out


class Registration(registration_pb2_grpc.RegistrationServicer):
    """What kubelet's plugin watcher asks: who we are, then whether it took us."""

    def __init__(self, driver_name: str, endpoint: str, log: Callable[[str], None],
                 on_register: Callable[[], None]):
        self.driver_name, self.endpoint, self.log = driver_name, endpoint, log
        self.on_register = on_register
        self.registered = threading.Event()

    def GetInfo(self, request, context):   # noqa: N802
        """PluginInfo: a DRAPlugin serving our services on the DRA socket."""
        return registration_pb2.PluginInfo(type=draplugin.PLUGIN_TYPE, name=self.driver_name,
                                           endpoint=self.endpoint,
                                           supported_versions=list(draplugin.SERVICES))

    def NotifyRegistrationStatus(self, request, context):   # noqa: N802
        """kubelet's verdict: logged; a registration wakes the slice publisher."""
        if request.plugin_registered:
            self.log(f"kubelet registered DRA driver {self.driver_name}")
            self.registered.set()
            self.on_register()
        else:
            self.log(f"kubelet refused DRA driver {self.driver_name}: {request.error}")
        return registration_pb2.RegistrationStatusResponse()


class DraPluginServer:
    """Serves the DRA services and the registration socket; keeps both in place."""

    def __init__(self, kubelet_root: str, driver_name: str, driver: DraDriver, *,
                 log: Callable[[str], None] = print,
                 on_register: Optional[Callable[[], None]] = None):
        self.service_path = draplugin.service_socket(kubelet_root, driver_name)
        self.registration_path = draplugin.registration_socket(kubelet_root, driver_name)
        self.driver, self.log = driver, log
        self.registration = Registration(driver_name, self.service_path, log,
                                         on_register or (lambda: None))
        self._servers: dict = {}
        self._inodes: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="dra-sockets")

    def _serve(self, path: str, add) -> None:
        if len(path.encode()) > MAX_SOCKET_PATH:
            raise NodeAgentError(f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes; "
                                 "give kubeletRootDir a shorter folder")
        old = self._servers.pop(path, None)
        if old is not None:
            old.stop(grace=None)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.unlink(path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="dra"))
        add(server)
        server.add_insecure_port(unix_target(path))
        server.start()
        self._servers[path] = server
        self._inodes[path] = inode(path)

    def _add_services(self, server) -> None:
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DraService(self.driver, dra_v1_pb2),
                                                        server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
            DraService(self.driver, dra_v1beta1_pb2), server)

    def _add_registration(self, server) -> None:
        registration_pb2_grpc.add_RegistrationServicer_to_server(self.registration, server)

    def start(self) -> "DraPluginServer":
        """Serves the DRA services, then the registration socket; watches both."""
        self._serve(self.service_path, self._add_services)
        self._serve(self.registration_path, self._add_registration)
        self.log(f"serving DRA ({', '.join(draplugin.SERVICES)}) on {self.service_path}, "
                 f"registration on {self.registration_path}")
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            for path, add in ((self.service_path, self._add_services),
                              (self.registration_path, self._add_registration)):
                if inode(path) != self._inodes.get(path):
                    self.log(f"{path} was removed; serving it again")
                    self._serve(path, add)

    def alive(self) -> bool:
        """Whether the socket watcher runs."""
        return self._thread.is_alive()

    def stop(self) -> None:
        """Removes the registration socket first (kubelet unregisters us), then the rest."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for path in (self.registration_path, self.service_path):
            server = self._servers.pop(path, None)
            if server is not None:
                server.stop(grace=None).wait(5)
            if os.path.lexists(path):
                os.unlink(path)
