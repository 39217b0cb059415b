"""Running a case with either client, and reducing what it gave to comparable JSON.

Shared by the in-process suite (our client) and ``reference_driver.py`` (the reference
client, run by the reference venv's Python), so both sides normalize in exactly the same
way. Neither client is imported here: the caller passes its ``Program`` class and a
``Client`` factory, and results are read by duck typing (both clients decode tensors to
numpy arrays and files to objects with ``read_bytes``).

A normalized outcome of ``execute`` is ``{"status", "results", "error", "stdout",
"stderr", "stdout_truncated", "stderr_truncated"}``, or ``{"raised", "status_code",
"kind"}`` when the call raised. Values are tagged where JSON alone would blur them:
``{"float": repr}``, ``{"object": {...}}``, ``{"bytes": hex}``, ``{"file": hex}`` (over
4 KiB: ``{"size", "sha256"}`` instead of hex),
``{"folder": {"files", "directories"}}``, ``{"tensor": {"dtype", "shape", "values"}}``.
Timings, request ids and tracebacks are dropped: they differ on every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np

from cases import CASES_BY_NAME, make_context  # type: ignore[import-not-found]
from programs import TIMEOUT_SECONDS, Case  # type: ignore[import-not-found]

ERROR_FIELDS = ("kind", "message", "instruction_index", "instruction_op", "instruction_id")
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def normalize_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        return [normalize_value(item) for item in value]
    if isinstance(value, dict):
        return {"object": {str(key): normalize_value(item) for key, item in value.items()}}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": _binary(bytes(value))}
    if isinstance(value, np.ndarray):
        return {"tensor": {"dtype": str(value.dtype), "shape": list(value.shape),
                           "values": value.tolist()}}
    if hasattr(value, "files") and hasattr(value, "directories"):
        return {"folder": {"files": {path: _binary(file.read_bytes())
                                     for path, file in value.files.items()},
                           "directories": list(value.directories)}}
    if hasattr(value, "read_bytes"):
        return {"file": _binary(value.read_bytes())}
    return {"unknown": type(value).__name__}


def _binary(data: bytes) -> Any:
    """Hex, or for more than 4 KiB its size and SHA-256 (keeps failure reports legible)."""
    if len(data) <= 4096:
        return data.hex()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def normalize_result(result: Any) -> dict[str, Any]:
    error = None
    if result.error is not None:
        error = {field: result.error.get(field) for field in ERROR_FIELDS}
        error["traceback_is_str"] = isinstance(result.error.get("traceback"), str)
    return {
        "status": result.status,
        "results": {key: normalize_value(value) for key, value in result.results.items()},
        "error": error,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "stdout_truncated": result.stdout_truncated,
        "stderr_truncated": result.stderr_truncated,
    }


def normalize_exception(error: BaseException) -> dict[str, Any]:
    """Both clients' HTTP errors carry status_code and kind; the class names differ
    (ours: a ServerError subclass per kind; the reference: KCoralError)."""
    if hasattr(error, "status_code"):
        return {"raised": "ServerError", "status_code": error.status_code,
                "kind": getattr(error, "kind", None)}
    return {"raised": type(error).__name__}


def normalize_health(health: dict[str, Any]) -> dict[str, Any]:
    load = health.get("load")
    versions = health.get("versions")
    return {
        "keys": sorted(health),
        "status": health.get("status"),
        "gpu_count": health.get("gpu_count"),
        "target": health.get("target"),
        "load_keys": sorted(load) if isinstance(load, dict) else None,
        "load_values_are_ints": isinstance(load, dict) and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in load.values()),
        "versions_are_strings": isinstance(versions, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in versions.items()),
        "instance_id_is_uuid4": _is_uuid4(health.get("instance_id")),
        "started_at_is_rfc3339_utc": isinstance(health.get("started_at"), str)
        and RFC3339_UTC.fullmatch(health["started_at"]) is not None,
    }


def _is_uuid4(value: Any) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value \
            and uuid.UUID(value).version == 4
    except ValueError:
        return False


def wire(program: Any) -> dict[str, Any]:
    """What the builder puts on the wire: instructions and blob names."""
    blobs = program.blobs if hasattr(program, "blobs") else program._blobs
    return {"instructions": program.instructions, "blobs": sorted(blobs)}


class _Tee(httpx.SyncByteStream):
    """A response's byte stream that hands what passed through it to `done` at its end."""

    def __init__(self, stream: Any, done: Any) -> None:
        self._stream, self._done, self._chunks = stream, done, []

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            self._chunks.append(chunk)
            yield chunk
        self._done(b"".join(self._chunks))

    def close(self) -> None:
        self._stream.close()


@contextlib.contextmanager
def http_trace() -> Iterator[list[dict[str, Any]]]:
    """Record every POST /execute this process sends through httpx while active.

    Patches ``httpx.Client.send``, which both clients use; not thread-safe, so only one
    traced case may run at a time in a process. A response the client streams (ours reads
    its answers as they arrive, bounded) is recorded as the client reads it.
    """
    attempts: list[dict[str, Any]] = []
    original = httpx.Client.send

    def send(self: httpx.Client, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        response = original(self, request, **kwargs)
        if request.url.path == "/execute":
            body = request.read()
            attempt = {"blob_parts": body.count(b'name="blob:'), "http_status": response.status_code,
                       "status": None, "missing": None}
            attempts.append(attempt)

            def record(content: bytes) -> None:
                if response.headers.get("content-type", "").startswith("application/json"):
                    document = json.loads(content)
                    attempt["status"] = document.get("status")
                    if attempt["status"] == "CACHE_MISS":
                        attempt["missing"] = len(document.get("missing_blobs", []))
                elif response.status_code == 200:
                    attempt["status"] = "multipart"

            if kwargs.get("stream"):
                response.stream = _Tee(response.stream, record)
            else:
                record(response.content)
        return response

    httpx.Client.send = send  # type: ignore[method-assign]
    try:
        yield attempts
    finally:
        httpx.Client.send = original  # type: ignore[method-assign]


def run_case(case: Case, program_class: Any, make_client: Callable[[str], Any], url: str,
             nonce: str) -> dict[str, Any]:
    """The normalized outcome of one case against the server at ``url``."""
    with tempfile.TemporaryDirectory(prefix="kcoral-compat-") as scratch:
        ctx = make_context(nonce, scratch)
        with make_client(url) as client:
            if case.action == "health":
                return normalize_health(client.health())
            if case.action == "target":
                try:
                    return {"returned": client.target()}
                except Exception as error:  # noqa: BLE001 - the class is the outcome
                    return normalize_exception(error)
            assert case.build is not None, f"case {case.name} has no program"
            try:
                program = case.build(program_class, ctx)
            except Exception as error:  # noqa: BLE001
                return {"builder_raised": type(error).__name__, "message": str(error)}
            outcomes = []
            for _ in range(case.executions):
                with http_trace() as attempts:
                    try:
                        outcome = normalize_result(client.execute(program, **_options(case)))
                    except Exception as error:  # noqa: BLE001
                        outcome = normalize_exception(error)
                if case.trace:
                    outcome["attempts"] = attempts
                outcomes.append(outcome)
    return outcomes[0] if case.executions == 1 else {"executions": outcomes}


def _options(case: Case) -> dict[str, Any]:
    return {"timeout_seconds": TIMEOUT_SECONDS, **case.options}


def build_wire(name: str, program_class: Any, nonce: str) -> dict[str, Any]:
    """The wire of a case's program, or what its builder raised."""
    case = CASES_BY_NAME[name]
    if case.build is None:
        return {"no_program": True}
    with tempfile.TemporaryDirectory(prefix="kcoral-compat-") as scratch:
        try:
            return wire(case.build(program_class, make_context(nonce, scratch)))
        except Exception as error:  # noqa: BLE001
            return {"builder_raised": type(error).__name__}
