"""API errors and the `Status` bodies the real API server answers with."""
from __future__ import annotations


class ApiError(Exception):
    """An error answered to the client as a `Status` object with an HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        """The `Status` body for this error."""
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


def success_status(code: int = 200, details: dict | None = None) -> dict:
    """A `Status` reporting success (what binding and collection deletes answer)."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "code": code}
    if details:
        body["details"] = details
    return body


def _details(resource: str, name: str, group: str = "") -> dict:
    details = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return details


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """404 for a missing object."""
    return ApiError(404, "NotFound", f'{_qualified(resource, group)} "{name}" not found',
                    _details(resource, name, group))


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    """409 AlreadyExists for a create of an existing name."""
    return ApiError(409, "AlreadyExists",
                    f'{_qualified(resource, group)} "{name}" already exists',
                    _details(resource, name, group))


def conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    """409 Conflict, e.g. for a stale resourceVersion."""
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on '
                    f'{_qualified(resource, group)} "{name}": {why}',
                    _details(resource, name, group))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> ApiError:
    """422 Invalid; causes are (field, reason, message) triples."""
    text = "; ".join(f"{field}: {msg}" for field, _, msg in causes)
    details = {"name": name, "kind": kind,
               "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{kind}.{group} "{name}" is invalid: {text}' if group
                    else f'{kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the "
                       "requested resource") -> ApiError:
    """405 MethodNotAllowed."""
    return ApiError(405, "MethodNotAllowed", message)


def gone(message: str) -> ApiError:
    """410 Expired: a resourceVersion older than the watch history."""
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    """500 InternalError (only ever injected, or a bug)."""
    return ApiError(500, "InternalError", message,
                    {"causes": [{"message": message}]})
