"""run_local: execute a program in this process through the native module, without HTTP.

The native module runs the same executor the server does and speaks the same body format,
so a local run builds the complete request (every blob: there is no cache to negotiate
with) and decodes the answer with the very decoder the HTTP client uses.
"""

from __future__ import annotations

import importlib
from typing import Any

from kcoral._errors import KCoralError, ProtocolError
from kcoral._program import Program
from kcoral._result import CacheMiss, ProgramResult, decode_response


def run_local(
    program: Program,
    *,
    timeout_seconds: float | None = None,
    output_limit_bytes: int | None = None,
) -> ProgramResult:
    """Run ``program`` in this process and return its result, as ``Client.execute`` would.

    Needs the native module ``kcoral._native``; it is imported on first use, so that
    ``import kcoral`` stays light. Raises KCoralError when it is not built, and the same
    ServerError subclasses as ``Client.execute`` when the executor refuses the program.
    """
    if not isinstance(program, Program):
        raise TypeError(f"run_local takes a Program, not {type(program).__name__}")
    content_type, body = program.to_request(
        None, timeout_seconds=timeout_seconds, output_limit_bytes=output_limit_bytes
    )
    native = _native_module()
    answer: Any = native.execute(content_type, body)
    if not (
        isinstance(answer, tuple)
        and len(answer) == 3
        and isinstance(answer[0], int)
        and isinstance(answer[1], str)
        and isinstance(answer[2], (bytes, bytearray, memoryview))
    ):
        raise ProtocolError("kcoral._native.execute did not return (status, content type, body)")
    status_code, response_type, response_body = answer
    outcome = decode_response(
        status_code, response_type, bytes(response_body), lambda _: None, uploads=program.blobs
    )
    if isinstance(outcome, CacheMiss):
        raise ProtocolError("the native executor reported a cache miss for a complete request")
    return outcome


def _native_module() -> Any:
    try:
        return importlib.import_module("kcoral._native")
    except ModuleNotFoundError as error:
        if error.name != "kcoral._native":
            raise KCoralError(f"the native module cannot load: {error}") from error
        raise KCoralError(
            "run_local needs the server side of kcoral (kcoral._native is not installed): "
            "pip install 'kcoral[server]' (from a checkout: pip install ./server), or use "
            "Client against a server"
        ) from error
    except ImportError as error:
        raise KCoralError(f"the native module cannot load: {error}") from error
