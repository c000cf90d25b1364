"""The control plane's exceptions: each says what went wrong and, where it can, what to do."""


class ControlError(Exception):
    """Base of hami-control's errors."""


class ConfigError(ControlError):
    """A setting that cannot be used; `key` names the flag to fix."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


class BadRequest(ControlError):
    """A request body that cannot be understood: answered with a 4xx and this message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class NotLeader(ControlError):
    """This replica does not hold the lease, so it must not place or bind."""


class BindError(ControlError):
    """A bind that did not happen; the pod stays unbound and kube-scheduler retries it."""


class LockError(BindError):
    """The node's bind lock is held by another pod, or could not be taken."""
