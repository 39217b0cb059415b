"""kcoral: build programs that compile, check and time GPU kernels, and run them remotely.

A :class:`Program` is an ordered list of instructions (upload, get_function, run,
return); :meth:`Client.execute` sends it to a kcoral server and returns a
:class:`ProgramResult`; :func:`run_local` runs it in this process instead. Importing
this package loads neither torch nor any server or native code, and the HTTP stack only
when :class:`Client` is first named: a server's workers import kcoral for its builtins,
and every fresh worker forked from a parent that holds fewer modules costs less to make
and to tear down.
"""

import importlib
from typing import TYPE_CHECKING, Any

from kcoral._errors import (
    CompileFailed,
    CorrectnessFailed,
    DeadlineExceeded,
    EngineError,
    EngineFailed,
    ExecutionTimeout,
    GpuAccessViolation,
    KCoralError,
    ParseFailed,
    ProgramFailed,
    ProtocolError,
    RequestRejected,
    RequestTooLarge,
    ResponseTooLarge,
    RuntimeFailed,
    SerializationFailed,
    ServerBusy,
    ServerError,
    TransportError,
    Unauthorized,
    Unavailable,
)
from kcoral._files import ReturnedFile, ReturnedFolder
from kcoral._local import run_local
from kcoral._program import Program, Register
from kcoral._result import ProgramResult

if TYPE_CHECKING:
    from kcoral._client import Client
    from kcoral._remote import RemoteFunction

    __version__: str

# Loaded when first named (PEP 562): the client and its HTTP stack, RemoteFunction (ast,
# inspect), and the installed version (importlib.metadata).
_LAZY = {"Client": "kcoral._client", "RemoteFunction": "kcoral._remote"}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: Any = version("kcoral")
        except PackageNotFoundError:  # running from a source tree that was never installed
            value = "0+unknown"
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'kcoral' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})

__all__ = [
    "Client",
    "CompileFailed",
    "CorrectnessFailed",
    "DeadlineExceeded",
    "EngineError",
    "EngineFailed",
    "ExecutionTimeout",
    "GpuAccessViolation",
    "KCoralError",
    "ParseFailed",
    "Program",
    "ProgramFailed",
    "ProgramResult",
    "ProtocolError",
    "Register",
    "RemoteFunction",
    "RequestRejected",
    "RequestTooLarge",
    "ResponseTooLarge",
    "ReturnedFile",
    "ReturnedFolder",
    "RuntimeFailed",
    "SerializationFailed",
    "ServerBusy",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "run_local",
]
