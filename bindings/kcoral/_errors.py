"""The exception tree of the kcoral client, and the table that maps wire error kinds to it.

Everything the package raises on purpose derives from :class:`KCoralError`. Three
families sit under it:

- :class:`TransportError` (with :class:`DeadlineExceeded`) and :class:`ProtocolError`: no
  usable HTTP exchange;
- :class:`ServerError`: the server answered with an HTTP error (the request itself failed);
- :class:`ProgramFailed`: the request ran but the program failed. ``Client.execute`` returns
  a failed program as data; only :meth:`ProgramResult.raise_for_error` raises this family.

The wire names some kinds in both families (``parse``, ``engine``), so the table below keys
each row by kind and gives one column per family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kcoral._result import ProgramResult


class KCoralError(Exception):
    """Base of every exception the kcoral package raises on purpose."""


class TransportError(KCoralError):
    """The request produced no HTTP response (connection refused, reset, timed out)."""


class DeadlineExceeded(TransportError):
    """The call's deadline passed before its answer was complete.

    The deadline bounds a whole call (every attempt of the blob negotiation and every
    byte of every answer), where the read timeout bounds each wait for a byte alone: a
    server sending one byte every few seconds is cut by the deadline only. See
    ``Client(deadline_seconds=...)``.
    """


class ProtocolError(KCoralError):
    """The response does not follow the KCoral wire protocol."""


class ServerError(KCoralError):
    """The server answered with an HTTP error instead of running the program.

    Attributes: ``status_code`` (HTTP status), ``kind`` (the error kind from the body, or
    ``None`` when the body had none, e.g. from a proxy), ``message`` and ``request_id``.
    Subclasses are chosen by ``kind``; an unknown kind yields a plain ``ServerError``.
    """

    def __init__(
        self,
        status_code: int,
        kind: str | None,
        message: str,
        request_id: str | None = None,
    ) -> None:
        label = f"HTTP {status_code} {kind}" if kind else f"HTTP {status_code}"
        super().__init__(f"{label}: {message}")
        self.status_code = status_code
        self.kind = kind
        self.message = message
        self.request_id = request_id


class RequestRejected(ServerError):
    """HTTP 400 ``parse``: malformed multipart, JSON or program."""


class Unauthorized(ServerError):
    """HTTP 401 ``unauthorized``: the server needs a bearer token (``Client(token=...)`` or
    ``KCORAL_TOKEN``), or does not accept the one sent."""


class RequestTooLarge(ServerError):
    """HTTP 413 ``request_too_large``: the body is over the server's request limit."""


class ServerBusy(ServerError):
    """HTTP 503 ``busy``: no worker in time, shutting down, or GPU unavailable.

    ``retry_after_seconds`` holds the ``Retry-After`` header when it was a number of
    seconds, else ``None``.
    """

    def __init__(
        self,
        status_code: int,
        kind: str | None,
        message: str,
        request_id: str | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(status_code, kind, message, request_id)
        self.retry_after_seconds = retry_after_seconds


class ExecutionTimeout(ServerError):
    """HTTP 504 ``timeout``: the execution deadline passed and the worker was killed."""


class EngineError(ServerError):
    """HTTP 500 ``engine``: a worker failure the server could not attribute to the program."""


class ResponseTooLarge(ServerError):
    """HTTP 500 ``response_too_large``: the program's results exceed the response limit."""


class ProgramFailed(KCoralError):
    """A program ran and failed; raised by :meth:`ProgramResult.raise_for_error` (and so by
    a remote function's call, see :meth:`Client.function`).

    Attributes: ``result`` (the whole :class:`ProgramResult`, with partial results and
    captured output), ``kind``, ``message``, ``instruction_index``, ``instruction_op``,
    ``instruction_id`` and ``traceback`` (the remote one, as text).
    """

    def __init__(self, result: ProgramResult) -> None:
        error: dict[str, Any] = result.error or {}
        self.result = result
        self.kind: str = error.get("kind", "")
        self.message: str = error.get("message", "")
        self.instruction_index: int | None = error.get("instruction_index")
        self.instruction_op: str | None = error.get("instruction_op")
        self.instruction_id: str | None = error.get("instruction_id")
        self.traceback: str = error.get("traceback", "")
        where = f"instruction {self.instruction_index} ({self.instruction_op}"
        where += f" {self.instruction_id!r})" if self.instruction_id else ")"
        super().__init__(f"{self.kind} at {where}: {self.message}")


class ParseFailed(ProgramFailed):
    """``parse``: uploaded Python failed to parse or run at top level, or lacks a name."""


class CompileFailed(ProgramFailed):
    """``compile``: a library failed to load or lacks the selected function."""


class RuntimeFailed(ProgramFailed):
    """``runtime``: an exception escaped uploaded code, or the worker died running it."""


class GpuAccessViolation(ProgramFailed):
    """``gpu_access``: a ``cpu_only`` function called CUDA.

    Adds ``cuda_call``, ``location`` and ``interfered_request_id`` (the request that held
    the GPU at the time, if any and if it was your own tenant's: another's is never named).
    """

    def __init__(self, result: ProgramResult) -> None:
        super().__init__(result)
        error: dict[str, Any] = result.error or {}
        self.cuda_call: str | None = error.get("cuda_call")
        self.location: str | None = error.get("location")
        self.interfered_request_id: str | None = error.get("interfered_request_id")


class CorrectnessFailed(ProgramFailed):
    """``correctness``: an assertion in uploaded code failed (e.g. ``assert_close``)."""


class SerializationFailed(ProgramFailed):
    """``serialization``: a returned value, file or folder could not be sent back."""


class Unavailable(ProgramFailed):
    """``unavailable``: the instruction needs something this server lacks (e.g. a GPU)."""


class EngineFailed(ProgramFailed):
    """``engine``: the server failed while running the program; not the program's fault."""


# kind -> (ServerError subclass, ProgramFailed subclass); None where the kind does not
# occur in that family. The HTTP status of each server kind is in its class docstring.
ERROR_KINDS: dict[str, tuple[type[ServerError] | None, type[ProgramFailed] | None]] = {
    "parse": (RequestRejected, ParseFailed),
    "request_too_large": (RequestTooLarge, None),
    "unauthorized": (Unauthorized, None),
    "busy": (ServerBusy, None),
    "timeout": (ExecutionTimeout, None),
    "engine": (EngineError, EngineFailed),
    "response_too_large": (ResponseTooLarge, None),
    "compile": (None, CompileFailed),
    "runtime": (None, RuntimeFailed),
    "gpu_access": (None, GpuAccessViolation),
    "correctness": (None, CorrectnessFailed),
    "serialization": (None, SerializationFailed),
    "unavailable": (None, Unavailable),
}

PROGRAM_ERROR_KINDS = frozenset(kind for kind, (_, failed) in ERROR_KINDS.items() if failed)


def server_error(
    status_code: int,
    kind: str | None,
    message: str,
    request_id: str | None = None,
    retry_after_seconds: float | None = None,
) -> ServerError:
    """Build the ServerError subclass the table gives for ``kind``."""
    cls = (ERROR_KINDS.get(kind or "") or (None, None))[0] or ServerError
    if issubclass(cls, ServerBusy):
        return cls(status_code, kind, message, request_id, retry_after_seconds)
    return cls(status_code, kind, message, request_id)


def program_failed(result: ProgramResult) -> ProgramFailed:
    """Build the ProgramFailed subclass the table gives for the result's error kind."""
    kind = (result.error or {}).get("kind", "")
    cls = (ERROR_KINDS.get(kind) or (None, None))[1] or ProgramFailed
    return cls(result)
