"""kubelet's device plugin API v1beta1: constants, and the generated protobuf/gRPC modules.

Import the messages and stubs as `from hami_common.deviceplugin import api_pb2, api_pb2_grpc`.
This package imports neither kubernetes nor yaml, so the node agent can use it anywhere.
"""
import os

VERSION = "v1beta1"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET_NAME = "kubelet.sock"
DEFAULT_KUBELET_SOCKET = os.path.join(DEFAULT_PLUGIN_DIR, KUBELET_SOCKET_NAME)
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# kubelet gives PreStartContainer this long before it gives up on the container.
PRE_START_TIMEOUT_S = 30.0
# Device IDs longer than this are refused by kubelet.
MAX_DEVICE_ID_LEN = 63


def unix_target(path: str) -> str:
    """The gRPC channel target for a Unix socket path."""
    return "unix://" + os.path.abspath(path)
