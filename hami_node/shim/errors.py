"""The shim's Python-side errors: one base class, so callers can catch them all."""


class ShimError(Exception):
    """Something about the shim cannot be used as asked."""


class ShimConfigError(ShimError, ValueError):
    """A setting (an environment variable or a command-line value) is malformed."""


class CacheFileError(ShimError):
    """A container's shared accounting file is missing, damaged or of another version."""
