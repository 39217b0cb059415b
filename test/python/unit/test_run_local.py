"""run_local: the in-process path through the native module (faked here)."""

from __future__ import annotations

import json
import sys
import types

import pytest

from kcoral import KCoralError, Program, ProtocolError, RequestRejected, run_local
from kcoral._codec import decode_multipart, loads_json

COMPLETED = {
    "status": "COMPLETED",
    "request_id": "local",
    "queue_ms": 0.0,
    "elapsed_ms": 1.0,
    "lease_wait_ms": 0.0,
    "lease_held_ms": 0.0,
    "results": {"y": {"type": "integer", "value": 42}},
    "stdout": "",
    "stderr": "",
    "stdout_truncated": False,
    "stderr_truncated": False,
}


def small_program() -> Program:
    program = Program()
    program.upload(id="data", kind="bytes", value=b"payload")
    module = program.upload(kind="module", source="def f(): return 42")
    y = program.run(fn=program.get_function(module=module, name="f"))
    program.return_(key="y", value=y)
    return program


@pytest.fixture
def native(monkeypatch):
    module = types.ModuleType("kcoral._native")
    module.calls = []
    module.answer = (200, "application/json", json.dumps(COMPLETED).encode())

    def execute(content_type: str, body: bytes):
        module.calls.append((content_type, body))
        return module.answer

    module.execute = execute
    monkeypatch.setitem(sys.modules, "kcoral._native", module)
    return module


def test_run_local_sends_every_blob_and_decodes(native):
    program = small_program()
    result = run_local(program, timeout_seconds=10)
    assert result.completed and result["y"] == 42
    ((content_type, body),) = native.calls
    parts = decode_multipart(content_type, body)
    assert loads_json(parts[0].data)["options"] == {"timeout_seconds": 10}
    assert {p.name for p in parts[1:]} == {f"blob:{d}" for d in program.blobs}


def test_run_local_raises_server_errors(native):
    native.answer = (
        400,
        "application/json",
        json.dumps(
            {"status": "ERROR", "request_id": "l", "error": {"kind": "parse", "message": "x"}}
        ).encode(),
    )
    with pytest.raises(RequestRejected):
        run_local(small_program())


@pytest.mark.parametrize(
    "answer",
    [
        None,
        (200, "application/json"),
        ("200", "application/json", b"{}"),
        (
            200,
            "application/json",
            json.dumps(
                {"status": "CACHE_MISS", "request_id": "l", "missing_blobs": ["a" * 64]}
            ).encode(),
        ),
    ],
)
def test_run_local_refuses_bad_native_answers(native, answer):
    native.answer = answer
    with pytest.raises(ProtocolError):
        run_local(small_program())


def test_run_local_without_the_native_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "kcoral._native", None)  # import fails as if absent
    with pytest.raises(KCoralError, match=r"needs the server side of kcoral .*kcoral\[server\]"):
        run_local(small_program())
