"""The Kubernetes API server double: REST over HTTP(S) for the resources hami-py uses, driven
by the official client. `ApiServer` is the Python API; `hami-sim apiserver` the command."""
from .faults import Faults
from .server import ApiServer, node_object

__all__ = ["ApiServer", "Faults", "node_object"]
