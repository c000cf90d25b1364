"""The Registration service kubelet serves on kubelet.sock."""
from __future__ import annotations

import os
import re
from concurrent import futures
from typing import Callable

import grpc

from hami_common.deviceplugin import KUBELET_SOCKET_NAME, VERSION, api_pb2, api_pb2_grpc

# An extended resource: a domain-prefixed name outside kubernetes.io.
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def registration_problem(req: api_pb2.RegisterRequest, plugin_dir: str) -> str | None:
    """Why kubelet would refuse this registration, or None."""
    if req.version != VERSION:
        return (f"requested device plugin version {req.version!r} is not supported; "
                f"kubelet supports {VERSION}")
    if not _RESOURCE.match(req.resource_name) or req.resource_name.split("/")[0].endswith(
            "kubernetes.io"):
        return (f"invalid extended resource name {req.resource_name!r}: expected "
                "<vendor domain>/<name> outside kubernetes.io")
    if not req.endpoint or "/" in req.endpoint:
        return (f"endpoint {req.endpoint!r} must be a socket file name in the plugin "
                f"directory {plugin_dir}")
    return None


class _Servicer(api_pb2_grpc.RegistrationServicer):
    def __init__(self, plugin_dir: str, on_register: Callable):
        self._plugin_dir = plugin_dir
        self._on_register = on_register

    def Register(self, request, context):  # noqa: N802 (gRPC method name)
        problem = registration_problem(request, self._plugin_dir)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        self._on_register(request)
        return api_pb2.Empty()


class RegistrationServer:
    """Registration on <plugin_dir>/kubelet.sock; on_register(request) is called for each
    accepted registration."""

    def __init__(self, plugin_dir: str, on_register: Callable):
        self.socket_path = os.path.join(plugin_dir, KUBELET_SOCKET_NAME)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(_Servicer(plugin_dir, on_register),
                                                        self._server)

    def start(self) -> "RegistrationServer":
        """Binds kubelet.sock (replacing a stale one) and serves."""
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._server.add_insecure_port("unix://" + os.path.abspath(self.socket_path))
        self._server.start()
        return self

    def stop(self) -> None:
        """Stops serving at once."""
        self._server.stop(grace=None).wait(5)
