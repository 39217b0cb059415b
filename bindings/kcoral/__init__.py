"""kcoral: build programs that compile, check and time GPU kernels, and run them remotely.

A :class:`Program` is an ordered list of instructions (upload, get_function, run,
return); :meth:`Client.execute` sends it to a kcoral server and returns a
:class:`ProgramResult`; :func:`run_local` runs it in this process instead. Importing
this package loads neither torch nor any server or native code.
"""

from importlib.metadata import PackageNotFoundError, version

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

try:
    __version__ = version("kcoral")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

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
