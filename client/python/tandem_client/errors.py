"""The exceptions tandem_client raises: the daemon's error replies, connection failures, timeouts."""
from __future__ import annotations

from typing import Optional


class TandemError(Exception):
    """Base of every error this package raises about talking to tandemd (bad arguments are plain
    ValueError/TypeError, raised before anything is sent)."""


class TandemConnectionError(TandemError, ConnectionError):
    """The socket could not be opened, or broke: every request in flight on that connection fails
    with it (and the daemon cancels them, as it does for any closed connection). The next call on
    the client opens a new connection."""


class ProtocolError(TandemConnectionError):
    """tandemd sent something this client cannot read: a frame that is not a msgpack map, an
    unknown protocol version (the connection is dropped: its stream position is lost), or a
    well-framed reply of the wrong shape (only that request fails)."""


class TandemTimeoutError(TandemError, TimeoutError):
    """No reply within the client's timeout. The connection stays usable; a generation that timed
    out in generate()/chat() was cancelled, a stream can be read on or cancelled."""


class DaemonError(TandemError):
    """An error reply {id, error: {code, message}} from tandemd. `code` is the daemon's code
    (tandem-protocol(7), REPLIES); each known code has its own subclass below."""

    code: str = ""

    def __init__(self, code: str, message: str, request_id: Optional[int] = None):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.request_id = request_id

    def __reduce__(self):  # pickling (and copy) rebuild from the fields, not from str(self)
        return (type(self), (self.code, self.message, self.request_id))


class BadFrameError(DaemonError):
    """bad_frame: the daemon could not decode a frame."""


class BadRequestError(DaemonError):
    """bad_request: a field is missing, of the wrong type or out of range."""


class UnknownOpError(DaemonError):
    """unknown_op: the daemon does not know the op."""


class DuplicateIdError(DaemonError):
    """duplicate_id: an in-flight request on this connection already uses the id."""


class NotFoundError(DaemonError):
    """not_found: no model with that alias (or no model loaded at all)."""


class ExistsError(DaemonError):
    """exists: load of an alias that is already taken."""


class BusyError(DaemonError):
    """busy: the model's queue is full (retry later), or the daemon refused the connection."""


class LoadFailedError(DaemonError):
    """load_failed: load/swap could not load the file; an old model keeps serving."""


class ForbiddenError(DaemonError):
    """forbidden: the daemon does not allow this user or group."""


class ShuttingDownError(DaemonError):
    """shutting_down: the daemon is draining and accepts no new work."""


class EngineError(DaemonError):
    """engine_error: the engine failed while running the request."""


class InternalError(DaemonError):
    """internal: a bug in tandemd."""


_BY_CODE = {
    "bad_frame": BadFrameError,
    "bad_request": BadRequestError,
    "unknown_op": UnknownOpError,
    "duplicate_id": DuplicateIdError,
    "not_found": NotFoundError,
    "exists": ExistsError,
    "busy": BusyError,
    "load_failed": LoadFailedError,
    "forbidden": ForbiddenError,
    "shutting_down": ShuttingDownError,
    "engine_error": EngineError,
    "internal": InternalError,
}


def daemon_error(error: object, request_id: Optional[int]) -> DaemonError:
    """The exception for an `error` map of a reply; a code this version does not know still
    becomes a DaemonError carrying it, so a newer daemon's codes reach the caller."""
    if not isinstance(error, dict):
        return DaemonError("", "malformed error reply: %r" % (error,), request_id)
    code = str(error.get("code", ""))
    message = str(error.get("message", ""))
    return _BY_CODE.get(code, DaemonError)(code, message, request_id)
