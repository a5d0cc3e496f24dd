"""The SDK's exceptions. Every API error answer (a non-2xx status with
{"error": {"code", "message"}}) raises an ApiError subclass chosen by its status; `code` is the
API's snake_case code such as "sandbox_not_found"."""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple, Type


class BulkheadError(Exception):
    """Base of every exception the SDK raises."""


class BulkheadConnectionError(BulkheadError, ConnectionError):
    """The daemon could not be reached, or the connection broke mid-request."""


class BulkheadTimeoutError(BulkheadConnectionError, TimeoutError):
    """No answer (or no further data on a stream) within the timeout."""


class ApiError(BulkheadError):
    """The daemon answered with an error: `status` (HTTP), `code` (snake_case), `message`."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code}: {message} (HTTP {status})")
        self.status = status
        self.code = code
        self.message = message


class InvalidRequestError(ApiError):
    """400 (malformed request) or 422 (valid JSON, invalid values)."""


class AuthenticationError(ApiError):
    """401: no API key, or a wrong one."""


class ForbiddenError(ApiError):
    """403: not allowed (for example a path the sandbox's user may not read)."""


class NotFoundError(ApiError):
    """404: unknown sandbox, process, path, snapshot, volume or image."""


class ConflictError(ApiError):
    """409: the object is in the wrong state for this (for example a snapshot still in use)."""


class PayloadTooLargeError(ApiError):
    """413: the request body is too large."""


class RateLimitError(ApiError):
    """429: a quota or rate limit was reached."""


class UnavailableError(ApiError):
    """503: the daemon is overloaded or shutting down."""


class DiskFullError(ApiError):
    """507: the sandbox's (or the daemon's) disk is full."""


class ServerError(ApiError):
    """Any other 5xx: a bug in the daemon, or a failure it could not map."""


class StreamError(ApiError):
    """A stream (exec, process output, file watch) that had begun ended with an error event.
    `status` is the stream's HTTP status (200)."""


class UnsafeArchiveError(BulkheadError):
    """download_dir() refused entries of the sandbox's archive that could reach outside the local
    directory or arrive as something unsafe (each skipped, nothing written for it); the rest is
    unpacked. `refused` is a list of (name, reason), `unpacked` how many entries were made."""

    def __init__(self, refused: List[Tuple[str, str]], unpacked: int, dest: str):
        listed = "; ".join("%r: %s" % pair for pair in refused[:10])
        more = "; and %d more" % (len(refused) - 10) if len(refused) > 10 else ""
        super().__init__("refused %d unsafe archive entr%s (the rest is unpacked in %s): %s%s"
                         % (len(refused), "y" if len(refused) == 1 else "ies", dest, listed, more))
        self.refused = refused
        self.unpacked = unpacked


class CommandError(BulkheadError):
    """Raised by CommandResult.check() when a command did not exit with status 0."""

    def __init__(self, result: "object", message: str):
        super().__init__(message)
        self.result = result


_BY_STATUS: Dict[int, Type[ApiError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: InvalidRequestError,
    429: RateLimitError,
    503: UnavailableError,
    507: DiskFullError,
}


def error_class(status: int) -> Type[ApiError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return ApiError


def error_from_response(status: int, body: bytes, hint: Optional[str] = None) -> ApiError:
    """The exception for an error answer; a body that is not the API's error shape (a proxy's
    page, say) still gives an exception with a generic code and the text as message."""
    code, message = "http_%d" % status, ""
    try:
        parsed = json.loads(body.decode("utf-8"))
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict):
            code = str(error.get("code") or code)
            message = str(error.get("message") or "")
    except (ValueError, UnicodeDecodeError):
        message = body[:500].decode("utf-8", "replace").strip()
    if not message:
        message = "HTTP %d" % status
    if hint:
        message = message + "; " + hint
    return error_class(status)(status, code, message)
