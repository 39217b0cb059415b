"""The exception tree and the single kind -> class table, walked kind by kind."""

import pytest

from kcoral import (
    CompileFailed,
    CorrectnessFailed,
    EngineError,
    EngineFailed,
    ExecutionTimeout,
    GpuAccessViolation,
    KCoralError,
    ParseFailed,
    ProgramFailed,
    ProgramResult,
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
from kcoral._errors import ERROR_KINDS, PROGRAM_ERROR_KINDS, program_failed, server_error

SERVER_KINDS = {
    "parse": (400, RequestRejected),
    "request_too_large": (413, RequestTooLarge),
    "busy": (503, ServerBusy),
    "timeout": (504, ExecutionTimeout),
    "engine": (500, EngineError),
    "response_too_large": (500, ResponseTooLarge),
    "unauthorized": (401, Unauthorized),
}
PROGRAM_KINDS = {
    "parse": ParseFailed,
    "compile": CompileFailed,
    "runtime": RuntimeFailed,
    "gpu_access": GpuAccessViolation,
    "correctness": CorrectnessFailed,
    "serialization": SerializationFailed,
    "unavailable": Unavailable,
    "engine": EngineFailed,
}


def failed_result(kind: str, **extra: object) -> ProgramResult:
    error = {
        "kind": kind,
        "message": "AssertionError: boom",
        "instruction_index": 3,
        "instruction_op": "run",
        "instruction_id": "check",
        "traceback": "Traceback ...",
        **extra,
    }
    return ProgramResult("FAILED", "rid", 0.0, 1.0, 0.0, 0.5, {}, "", "", False, False, error)


def test_table_covers_exactly_the_protocol_kinds():
    assert {k for k, (cls, _) in ERROR_KINDS.items() if cls} == set(SERVER_KINDS)
    assert set(PROGRAM_ERROR_KINDS) == set(PROGRAM_KINDS)
    assert set(ERROR_KINDS) == set(SERVER_KINDS) | set(PROGRAM_KINDS)


@pytest.mark.parametrize("kind", sorted(SERVER_KINDS))
def test_every_server_kind_maps_to_its_class(kind):
    status, cls = SERVER_KINDS[kind]
    error = server_error(status, kind, "went wrong", "rid-1")
    assert type(error) is cls
    assert isinstance(error, ServerError) and isinstance(error, KCoralError)
    assert (error.status_code, error.kind, error.message, error.request_id) == (
        status,
        kind,
        "went wrong",
        "rid-1",
    )
    assert str(error) == f"HTTP {status} {kind}: went wrong"


def test_unknown_or_missing_server_kind_is_plain_server_error():
    error = server_error(418, "teapot", "short and stout")
    assert type(error) is ServerError
    assert str(error) == "HTTP 418 teapot: short and stout"
    assert type(server_error(502, None, "bad gateway")) is ServerError
    assert str(server_error(502, None, "bad gateway")) == "HTTP 502: bad gateway"


def test_server_busy_carries_retry_after():
    error = server_error(503, "busy", "saturated", "rid", 1.0)
    assert isinstance(error, ServerBusy)
    assert error.retry_after_seconds == 1.0
    assert server_error(503, "busy", "saturated").retry_after_seconds is None


@pytest.mark.parametrize("kind", sorted(PROGRAM_KINDS))
def test_every_program_kind_maps_to_its_class(kind):
    extra = {}
    if kind == "gpu_access":
        extra = {"cuda_call": "cuMemAlloc", "location": "m.py:3", "interfered_request_id": None}
    result = failed_result(kind, **extra)
    error = program_failed(result)
    assert type(error) is PROGRAM_KINDS[kind]
    assert isinstance(error, ProgramFailed) and isinstance(error, KCoralError)
    assert error.result is result
    assert error.kind == kind
    assert error.message == "AssertionError: boom"
    assert (error.instruction_index, error.instruction_op, error.instruction_id) == (
        3,
        "run",
        "check",
    )
    assert error.traceback == "Traceback ..."
    assert "instruction 3" in str(error) and "boom" in str(error)
    with pytest.raises(PROGRAM_KINDS[kind]):
        result.raise_for_error()


def test_gpu_access_violation_details():
    result = failed_result(
        "gpu_access", cuda_call="cudaMalloc", location="m.py:7", interfered_request_id="other"
    )
    error = program_failed(result)
    assert isinstance(error, GpuAccessViolation)
    assert (error.cuda_call, error.location, error.interfered_request_id) == (
        "cudaMalloc",
        "m.py:7",
        "other",
    )


def test_raise_for_error_returns_a_completed_result():
    result = ProgramResult("COMPLETED", "rid", 0.0, 1.0, 0.0, 0.5, {"k": 1}, "", "", False, False)
    assert result.raise_for_error() is result


def test_family_roots():
    for cls in (TransportError, ProtocolError, ServerError, ProgramFailed):
        assert issubclass(cls, KCoralError)
    assert issubclass(KCoralError, Exception)
