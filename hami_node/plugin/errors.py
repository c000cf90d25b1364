"""The node agent's exceptions: one base, one class per way things go wrong.

Every message says what to fix; callers add context with `raise ... from e`.
"""


class NodeAgentError(Exception):
    """Base of every error hami-node raises on purpose."""


class ConfigError(NodeAgentError):
    """Invalid configuration; the message names the key and where its value came from."""

    def __init__(self, key: str, message: str, source: str = ""):
        where = f" (from {source})" if source else ""
        super().__init__(f"{key}{where}: {message}")
        self.key = key
        self.source = source


class BackendError(NodeAgentError):
    """The GPU backend (NVML) cannot answer."""


class ClusterError(NodeAgentError):
    """The Kubernetes API refused or failed a request; `status` is the HTTP status (0: none)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class AllocationError(NodeAgentError):
    """An Allocate that cannot be honoured; the message is what kubelet shows the user."""


class ShimInstallError(NodeAgentError):
    """The shim files cannot be installed into the host directory."""
