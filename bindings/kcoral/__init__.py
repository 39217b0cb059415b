"""kcoral: build programs that compile, check and time GPU kernels, and run them remotely.

A :class:`Program` is an ordered list of instructions (upload, get_function, run,
return); :meth:`Client.execute` sends it to a kcoral server and returns a
:class:`ProgramResult`; :func:`run_local` runs it in this process instead.

Importing this package loads nothing but itself: each name below is imported from its
module when first used (PEP 562). A server's workers import ``kcoral.builtins``, which
runs this file, and every module the worker parent holds makes each fresh worker dearer
to fork, to start (Python's own after-fork work, such as ``threading``'s) and to tear
down; so they hold none of the client (numpy, the HTTP stack, threading, dataclasses).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kcoral._client import Client
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
    from kcoral._remote import RemoteFunction
    from kcoral._result import ProgramResult

    __version__: str

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

# Where each public name lives; the errors are every other name of __all__.
_HOMES = {
    "Client": "kcoral._client",
    "Program": "kcoral._program",
    "ProgramResult": "kcoral._result",
    "Register": "kcoral._program",
    "RemoteFunction": "kcoral._remote",
    "ReturnedFile": "kcoral._files",
    "ReturnedFolder": "kcoral._files",
    "run_local": "kcoral._local",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: Any = version("kcoral")
        except PackageNotFoundError:  # running from a source tree that was never installed
            value = "0+unknown"
    elif name in __all__:
        value = getattr(importlib.import_module(_HOMES.get(name, "kcoral._errors")), name)
    else:
        raise AttributeError(f"module 'kcoral' has no attribute {name!r}")
    globals()[name] = value  # found here from now on, without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
