"""Serving the plugin socket and staying registered with kubelet.

The plugin serves first, then registers (kubelet dials back at once). kubelet deletes every
socket in the plugin directory when it restarts, so a watcher polls every 0.1 s: when our socket
is gone it serves a new one, and when kubelet.sock is new (another inode) or ours was replaced
it registers again, retrying until the new kubelet answers.
"""
import os
import threading
from concurrent import futures
from typing import Callable, Optional

import grpc

from hami_common.deviceplugin import (KUBELET_SOCKET_NAME, VERSION, api_pb2, api_pb2_grpc,
                                      unix_target)

POLL_S = 0.1
REGISTER_TIMEOUT_S = 5.0


def inode(path: str) -> Optional[int]:
    """The file's inode number (None when it is gone): a socket made again has a new one."""
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


class PluginServer:
    """Serves `servicer` on <plugin_dir>/<endpoint> and keeps it registered for `resource`."""

    def __init__(self, plugin_dir: str, endpoint: str, resource: str, servicer,
                 *, log: Callable[[str], None] = print,
                 on_register: Optional[Callable[[], None]] = None):
        self.plugin_dir, self.endpoint, self.resource = plugin_dir, endpoint, resource
        self.servicer, self.log = servicer, log
        self.on_register = on_register or (lambda: None)
        self.registered = threading.Event()
        self.registrations = 0
        self._server = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="registration")

    @property
    def socket_path(self) -> str:
        """Our socket."""
        return os.path.join(self.plugin_dir, self.endpoint)

    @property
    def kubelet_socket(self) -> str:
        """kubelet's Registration socket."""
        return os.path.join(self.plugin_dir, KUBELET_SOCKET_NAME)

    def start(self) -> "PluginServer":
        """Serves now; registers (and re-registers) from the watcher thread."""
        os.makedirs(self.plugin_dir, exist_ok=True)
        self._serve()
        self._thread.start()
        return self

    def alive(self) -> bool:
        """Whether the watcher runs (the watchdog pings only while it does)."""
        return self._thread.is_alive()

    def _serve(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="dp"))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
        server.add_insecure_port(unix_target(self.socket_path))
        server.start()
        self._server = server
        self.log(f"serving the device plugin API on {self.socket_path}")

    def register(self) -> None:
        """One Register call; grpc.RpcError when kubelet refuses or is absent."""
        with grpc.insecure_channel(unix_target(self.kubelet_socket)) as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(api_pb2.RegisterRequest(
                version=VERSION, endpoint=self.endpoint, resource_name=self.resource,
                options=api_pb2.DevicePluginOptions(pre_start_required=False,
                                                    get_preferred_allocation_available=True)),
                timeout=REGISTER_TIMEOUT_S)

    def _watch(self) -> None:
        registered_with, served = None, inode(self.socket_path)
        complained = False
        while not self._stop.is_set():
            if inode(self.socket_path) != served:
                self.log("our socket was removed (kubelet restarted?); serving it again")
                self._serve()
                served, registered_with = inode(self.socket_path), None
            kubelet = inode(self.kubelet_socket)
            if kubelet is not None and kubelet != registered_with:
                try:
                    self.register()
                except grpc.RpcError as e:
                    if not complained:
                        self.log(f"registration with kubelet failed ({e.code().name}: "
                                 f"{e.details()}); retrying")
                        complained = True
                else:
                    registered_with, complained = kubelet, False
                    self.registrations += 1
                    self.registered.set()
                    self.log(f"registered {self.resource} with kubelet")
                    self.on_register()
            self._stop.wait(POLL_S)

    def stop(self) -> None:
        """Stops watching and serving; removes our socket."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)
