"""The exceptions of the wire codecs and of request parsing."""


class HamiFormatError(ValueError):
    """A value on the wire (annotation, quantity, lock) that cannot be decoded."""


class RequestError(ValueError):
    """A pod asks for GPU resources in a way that cannot be honoured; the message says what to fix."""
