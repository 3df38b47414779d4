"""Typed errors mirroring kgym-env's one error envelope.

Every protocol error the server sends is ``{"error": {"code", "message", "retryable", "details"}}``
with an HTTP status (README, "The HTTP API"). The client turns each into one exception whose class
says what the caller can do about it, and whose attributes keep everything the server said:

====================  ========================================================================
class                 when
====================  ========================================================================
``BadRequest``        400, 403, 405, 413, 422 and any other 4xx below: the request itself is
                      wrong (fix it; retrying the same request cannot help)
``NotFound``          404: no such route, episode, task or file
``Conflict``          409: the episode's state refuses the request (``EPISODE_BUSY``: a step
                      in flight, retryable; ``EPISODE_TERMINATED``: reset or delete;
                      ``IDEMPOTENCY_KEY_REUSED``)
``Gone``              410, a ``Conflict``: the episode was closed, expired or ended by a restart
``CapacityError``     429 ``CAPACITY_REACHED``, 503 ``DRAINING`` / ``BASELINES_UNAVAILABLE``:
                      the server is full or going away; retry later (``retry_after``)
``ServerError``       500 and other 5xx: the server failed (``retryable`` says if a retry may
                      help)
``TransportError``    no HTTP answer at all: connection refused or reset, a timeout, a
                      malformed response (``status`` is None)
====================  ========================================================================

Tool failures (a missing file, an edit with no match, an unknown tool) are *not* errors: they come
back as observations with ``is_error: true`` (the agent is meant to see them).
"""
from typing import Any, Dict, Optional

__all__ = [
    "KgymError", "BadRequest", "NotFound", "Conflict", "Gone", "CapacityError", "ServerError",
    "TransportError", "ERROR_CODES", "error_from_response",
]


class KgymError(Exception):
    """Any failure of a kgym-env request.

    Attributes: ``status`` (HTTP status, None for transport failures), ``code`` (the envelope's
    code, e.g. ``"EPISODE_NOT_FOUND"``), ``message``, ``retryable`` (the server's own verdict),
    ``retry_after`` (seconds from the ``Retry-After`` header, or None), ``details`` (dict),
    ``method`` and ``path`` of the request.
    """

    def __init__(self, message: str, status: Optional[int] = None, code: str = "ERROR",
                 retryable: bool = False, retry_after: Optional[float] = None,
                 details: Optional[Dict[str, Any]] = None, method: Optional[str] = None,
                 path: Optional[str] = None):
        self.status = status
        self.code = code
        self.message = message
        self.retryable = bool(retryable)
        self.retry_after = retry_after
        self.details = dict(details or {})
        self.method = method
        self.path = path
        where = f" ({method} {path})" if method and path else ""
        head = f"{status} {code}" if status is not None else code
        super().__init__(f"{head}: {message}{where}")


class BadRequest(KgymError):
    """The request is wrong (400, 403, 405, 413, 422): fix it, do not retry it."""


class NotFound(KgymError):
    """404: no such route, episode, task or file."""


class Conflict(KgymError):
    """409: the episode's state refuses the request (busy, terminated, key reused)."""


class Gone(Conflict):
    """410: the episode was closed, expired (idle too long) or ended by a server restart."""


class CapacityError(KgymError):
    """429/503: the server is full, draining or cannot measure now; retry after ``retry_after``."""


class ServerError(KgymError):
    """500 and other 5xx: the server failed; ``retryable`` says whether a retry may help."""


class TransportError(KgymError):
    """No HTTP answer: refused, reset, timed out or malformed. ``status`` is None."""

    def __init__(self, message: str, code: str = "TRANSPORT_ERROR", method: Optional[str] = None,
                 path: Optional[str] = None, timeout: bool = False):
        super().__init__(message, status=None, code=code, retryable=True, method=method,
                         path=path)
        self.timeout = timeout


# Every code kgym-env sends in an envelope (grep api_fail / api_error_set in env/), with its
# status and the class it maps to. The class is chosen by status (below), so a code the server
# adds later still lands in the right class; this table documents and tests the mapping.
ERROR_CODES = {
    "INVALID_JSON": (400, BadRequest),
    "BAD_REQUEST": (400, BadRequest),
    "INVALID_PATH": (400, BadRequest),
    "IS_DIRECTORY": (400, BadRequest),
    "NOT_A_DIRECTORY": (400, BadRequest),
    "NOT_A_REGULAR_FILE": (400, BadRequest),
    "PATH_OUTSIDE_WORKSPACE": (403, BadRequest),
    "READ_ONLY_FILE": (403, BadRequest),
    "NOT_FOUND": (404, NotFound),
    "EPISODE_NOT_FOUND": (404, NotFound),
    "TASK_NOT_FOUND": (404, NotFound),
    "FILE_NOT_FOUND": (404, NotFound),
    "METHOD_NOT_ALLOWED": (405, BadRequest),
    "EPISODE_BUSY": (409, Conflict),
    "EPISODE_TERMINATED": (409, Conflict),
    "IDEMPOTENCY_KEY_REUSED": (409, Conflict),
    "EPISODE_CLOSED": (410, Gone),
    "EPISODE_EXPIRED": (410, Gone),
    "EPISODE_ENDED": (410, Gone),
    "PAYLOAD_TOO_LARGE": (413, BadRequest),
    "FILE_TOO_LARGE": (413, BadRequest),
    "DISK_QUOTA_EXCEEDED": (413, BadRequest),
    "VALIDATION_ERROR": (422, BadRequest),
    "CAPACITY_REACHED": (429, CapacityError),
    "TRAJECTORY_WRITE_FAILED": (500, ServerError),
    "WORKSPACE_FAILED": (500, ServerError),
    "STATE_WRITE_FAILED": (500, ServerError),
    "IO_ERROR": (500, ServerError),
    "INTERNAL": (500, ServerError),
    "DRAINING": (503, CapacityError),
    "BASELINES_UNAVAILABLE": (503, CapacityError),
}


def class_for_status(status: int) -> type:
    """The exception class of an HTTP error status."""
    if status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status == 410:
        return Gone
    if status in (429, 503):
        return CapacityError
    if status >= 500:
        return ServerError
    return BadRequest


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header (kgym-env sends delta-seconds); None if absent or not a
    number (an HTTP-date is not worth a date parser here: the caller's backoff applies)."""
    if value is None:
        return None
    try:
        secs = float(value.strip())
    except ValueError:
        return None
    return secs if secs >= 0 else None


def error_from_response(status: int, body: bytes, retry_after: Optional[str] = None,
                        method: Optional[str] = None, path: Optional[str] = None) -> KgymError:
    """Builds the typed error of a non-2xx response (envelope or not)."""
    import json

    code, message, retryable, details = f"HTTP_{status}", "", status in (429, 503), {}
    try:
        doc = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, UnicodeDecodeError):
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        code = str(err.get("code") or code)
        message = str(err.get("message") or "")
        retryable = bool(err.get("retryable", retryable))
        if isinstance(err.get("details"), dict):
            details = err["details"]
    elif isinstance(doc, dict) and status == 503 and doc.get("status") == "draining":
        # /v1/health answers 503 with its normal body while the server drains
        code, message, retryable = "DRAINING", "the server is draining", True
    if not message:
        text = body[:300].decode("utf-8", "replace") if body else ""
        message = f"HTTP {status} without an error envelope" + (f": {text}" if text else "")
    cls = class_for_status(status)
    return cls(message, status=status, code=code, retryable=retryable,
               retry_after=parse_retry_after(retry_after), details=details, method=method,
               path=path)
