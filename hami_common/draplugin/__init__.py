"""kubelet's DRA plugin API (v1 and v1beta1) and plugin registration: constants, and the
generated protobuf/gRPC modules (dra_v1_pb2, dra_v1beta1_pb2, registration_pb2 and their
_grpc modules). Imports neither kubernetes nor yaml.
"""
import os

# PluginInfo.type of a DRA driver.
PLUGIN_TYPE = "DRAPlugin"
# The services hami-node serves, best first: kubelet takes the first one it knows
# (1.34 knows both and prefers v1).
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"


def registry_dir(kubelet_root: str) -> str:
    """kubelet's plugin watcher folder (follows kubelet's --root-dir)."""
    return os.path.join(kubelet_root, "plugins_registry")


def registration_socket(kubelet_root: str, driver: str) -> str:
    """The driver's registration socket, <root>/plugins_registry/<driver>-reg.sock."""
    return os.path.join(registry_dir(kubelet_root), f"{driver}-reg.sock")


def service_socket(kubelet_root: str, driver: str) -> str:
    """The socket the DRA services are served on, <root>/plugins/<driver>/dra.sock."""
    return os.path.join(kubelet_root, "plugins", driver, "dra.sock")
