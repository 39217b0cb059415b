"""Responses of POST /execute: validation, the typed value tree, and ProgramResult.

:func:`decode_response` turns one response (status, content type, body) into a cache miss,
a :class:`ProgramResult`, or the matching :class:`ServerError`. It serves both the HTTP
client and the in-process ``run_local``, so both see exactly the same checks. A response
that breaks the protocol raises :class:`ProtocolError` rather than returning something
half-decoded.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from kcoral._body import bytes_copy
from kcoral._codec import Body, Part, decode_multipart, is_sha256_hex, loads_json, sha256_hex
from kcoral._codec import shown as _shown
from kcoral._errors import (
    PROGRAM_ERROR_KINDS,
    ProtocolError,
    ServerError,
    program_failed,
    server_error,
)
from kcoral._files import ReturnedFile, ReturnedFolder, check_manifest
from kcoral._part_hasher import NO_UPLOADS, PartDigests
from kcoral._program import DTYPE_ITEM_SIZES

_ERROR_FIELDS = {
    "kind",
    "message",
    "instruction_index",
    "instruction_op",
    "instruction_id",
    "traceback",
}
_GPU_ACCESS_FIELDS = {"cuda_call", "location", "interfered_request_id"}
_OPS = ("upload", "get_function", "run", "return")


@dataclass
class ProgramResult:
    """What one executed program produced.

    ``status`` is ``"COMPLETED"`` or ``"FAILED"``. ``results`` holds the values selected
    by ``return_``/``return_file``/``return_folder`` (for a failed program, those made
    before the failure): tensors as writable numpy arrays, bytes as ``bytes``, files and
    folders as :class:`ReturnedFile`/:class:`ReturnedFolder`, JSON-like values as they
    are. ``error`` is ``None`` or the failure: ``kind``, ``message``,
    ``instruction_index``, ``instruction_op``, ``instruction_id``, ``traceback`` (and
    for ``gpu_access``: ``cuda_call``, ``location``, ``interfered_request_id``).

    Times are in milliseconds: ``queue_ms`` waiting for a worker; ``elapsed_ms`` the
    worker's time, of which ``lease_wait_ms`` waiting for the GPU and ``lease_held_ms``
    holding it. stdout/stderr are the captured output of the whole program, cut at the
    output limit when the ``*_truncated`` flag says so. ``gpu_ids`` are the GPUs the
    program held on a GPU server (the server's indices; empty on a CPU server).
    """

    status: str
    request_id: str
    queue_ms: float
    elapsed_ms: float
    lease_wait_ms: float
    lease_held_ms: float
    results: dict[str, Any]
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    error: dict[str, Any] | None = None
    gpu_ids: tuple[int, ...] = ()

    @property
    def completed(self) -> bool:
        """Whether every instruction ran successfully."""
        return self.status == "COMPLETED"

    def __getitem__(self, key: str) -> Any:
        """``results[key]``; KeyError when the program did not return ``key``."""
        return self.results[key]

    def raise_for_error(self) -> ProgramResult:
        """Raise the :class:`ProgramFailed` subclass for a failed program; else return self."""
        if self.status == "FAILED":
            raise program_failed(self)
        return self


@dataclass(frozen=True)
class CacheMiss:
    """The server lacks these blobs and ran nothing; send the program again with them."""

    request_id: str
    missing_blobs: frozenset[str]


def decode_response(
    status_code: int,
    content_type: str | None,
    body: Body,
    headers_get: Callable[[str], str | None],
    digests: PartDigests | None = None,
    uploads: Mapping[str, bytes] = NO_UPLOADS,
) -> CacheMiss | ProgramResult:
    """Decode one /execute response; raises ServerError (HTTP errors) or ProtocolError.

    ``headers_get`` looks up a response header by lowercase name (``None`` when absent);
    it supplies ``Retry-After`` and the ``X-Request-ID`` fallback for error bodies.
    ``digests``: the SHA-256 of payloads hashed while the body arrived, by offset range.
    ``uploads``: the program's blobs by SHA-256; a returned part naming one of them is
    compared with it rather than hashed, and decodes to it.
    """
    if status_code != 200:
        raise error_from_response(status_code, body, headers_get)
    document, parts = _split_body(content_type, body, digests)
    status = document.get("status")
    if status == "CACHE_MISS":
        if parts:
            raise ProtocolError("a CACHE_MISS response carries binary parts")
        return _cache_miss(document)
    if status not in ("COMPLETED", "FAILED"):
        raise ProtocolError(f"unexpected response status {_shown(status)}")
    try:
        return _program_result(document, _Parts(parts, uploads))
    except (KeyError, TypeError, ValueError, ArithmeticError, RecursionError) as error:
        raise ProtocolError(f"malformed execution response: {error!r:.500}") from error


def error_from_response(
    status_code: int, body: Body, headers_get: Callable[[str], str | None]
) -> ServerError:
    """The ServerError for an HTTP error response, tolerating bodies not written by KCoral.

    A proxy or load balancer in front of the server may answer with HTML, so a body that
    is not the protocol's error object still yields a ServerError (with ``kind=None``).
    """
    kind: str | None = None
    message = f"HTTP status {status_code}"
    request_id = headers_get("x-request-id")
    try:
        document = loads_json(body)
    except ValueError:
        document = None
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, dict):
            kind = error.get("kind") if isinstance(error.get("kind"), str) else None
            if isinstance(error.get("message"), str):
                message = error["message"]
        if isinstance(document.get("request_id"), str) and document["request_id"]:
            request_id = document["request_id"]
    elif body:
        message = body[:200].decode("utf-8", "replace").strip() or message
    retry_after: float | None = None
    # Absent, or an HTTP date: leave the choice of delay to the caller.
    with suppress(ValueError):
        retry_after = float(headers_get("retry-after") or "")
    if retry_after is not None and not (math.isfinite(retry_after) and retry_after >= 0):
        retry_after = None  # a delay no caller can sleep: inf, nan, negative
    return server_error(status_code, kind, message, request_id, retry_after)


def _split_body(
    content_type: str | None, body: Body, digests: PartDigests | None
) -> tuple[dict[str, Any], dict[str, Part]]:
    """(result document, binary parts by name) of a 200 response."""
    media_type = (content_type or "").partition(";")[0].strip().lower()
    parts: dict[str, Part] = {}
    raw: Body | memoryview
    if media_type == "application/json":
        raw = body
    elif media_type == "multipart/form-data":
        try:
            first, *rest = decode_multipart(content_type or "", body, digests)
        except ValueError as error:
            raise ProtocolError(f"malformed multipart response: {error}") from error
        if first.name != "result" or first.content_type != "application/json":
            raise ProtocolError("a multipart response must open with the JSON part 'result'")
        raw = first.data
        for index, part in enumerate(rest):
            # Parts follow in the order the value tree numbers them.
            if part.name != f"return:{index}":
                raise ProtocolError(f"response part {_shown(part.name)} is not 'return:{index}'")
            if part.content_type != "application/octet-stream":
                raise ProtocolError(
                    f"response part {_shown(part.name)} is not application/octet-stream"
                )
            parts[part.name] = part
    else:
        raise ProtocolError(f"unexpected response content type {_shown(content_type)}")
    try:
        document = loads_json(raw)
    except ValueError as error:
        raise ProtocolError(f"response JSON is invalid: {error}") from error
    if not isinstance(document, dict):
        raise ProtocolError("the response JSON is not an object")
    return document, parts


def _cache_miss(document: dict[str, Any]) -> CacheMiss:
    missing = document.get("missing_blobs")
    request_id = document.get("request_id")
    if not isinstance(missing, list) or not missing:
        raise ProtocolError("CACHE_MISS needs a non-empty 'missing_blobs' list")
    if not all(is_sha256_hex(digest) for digest in missing) or len(set(missing)) != len(missing):
        raise ProtocolError("CACHE_MISS 'missing_blobs' must be distinct lowercase SHA-256 hex")
    if not isinstance(request_id, str):
        raise ProtocolError("CACHE_MISS lacks a request_id")
    return CacheMiss(request_id, frozenset(missing))


def _program_result(document: dict[str, Any], parts: _Parts) -> ProgramResult:
    # Top-level fields beyond the protocol's are ignored, so a server may add metadata
    # without breaking clients; everything the protocol defines is checked.
    encoded = _typed(document, "results", dict)
    results = {key: _decode_value(value, parts) for key, value in encoded.items()}
    unreferenced = parts.unreferenced()
    if unreferenced:
        raise ValueError(f"binary parts {_shown(unreferenced)} are referenced by no value")
    if document["status"] == "COMPLETED" and "error" in document:
        raise ValueError("a COMPLETED response carries an error")
    return ProgramResult(
        status=document["status"],
        request_id=_typed(document, "request_id", str),
        queue_ms=_milliseconds(document, "queue_ms"),
        elapsed_ms=_milliseconds(document, "elapsed_ms"),
        lease_wait_ms=_milliseconds(document, "lease_wait_ms"),
        lease_held_ms=_milliseconds(document, "lease_held_ms"),
        results=results,
        stdout=_typed(document, "stdout", str),
        stderr=_typed(document, "stderr", str),
        stdout_truncated=_typed(document, "stdout_truncated", bool),
        stderr_truncated=_typed(document, "stderr_truncated", bool),
        error=None if document["status"] == "COMPLETED" else _checked_error(document.get("error")),
        gpu_ids=_gpu_ids(document),
    )


def _gpu_ids(document: dict[str, Any]) -> tuple[int, ...]:
    """The GPUs the program held: ``gpu_ids`` with its ``gpu_count``, both or neither."""
    if ("gpu_ids" in document) != ("gpu_count" in document):
        raise ValueError("a response has one of gpu_ids and gpu_count without the other")
    if "gpu_ids" not in document:
        return ()
    ids = _typed(document, "gpu_ids", list)
    if not all(isinstance(gpu, int) and not isinstance(gpu, bool) and gpu >= 0 for gpu in ids):
        raise TypeError("'gpu_ids' is not a list of GPU indices")
    if _typed(document, "gpu_count", int) != len(ids):
        raise ValueError("'gpu_count' is not the number of 'gpu_ids'")
    return tuple(ids)


def _typed(document: dict[str, Any], field: str, kind: type) -> Any:
    value = document[field]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise TypeError(f"{field!r} is not a {kind.__name__}")
    return value


def _milliseconds(document: dict[str, Any], field: str) -> float:
    value = _finite_float(document[field])
    if value is None:
        raise TypeError(f"{field!r} is not a finite number")
    return value


def _finite_float(value: Any) -> float | None:
    """``value`` as a finite float; None for what is no number, or an int beyond a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of more than 308 digits
        return None
    return number if math.isfinite(number) else None


def _checked_error(error: Any) -> dict[str, Any]:
    if not isinstance(error, dict):
        raise ValueError("a FAILED response needs an 'error' object")
    kind = error.get("kind")
    if kind not in PROGRAM_ERROR_KINDS:
        raise ValueError(f"unknown program error kind {_shown(kind)}")
    expected = _ERROR_FIELDS | (_GPU_ACCESS_FIELDS if kind == "gpu_access" else set())
    if set(error) != expected:
        raise ValueError(f"error fields {_shown(sorted(error))} are not {sorted(expected)}")
    index = error["instruction_index"]
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError("error instruction_index is not a non-negative int")
    if error["instruction_op"] not in _OPS:
        raise ValueError(f"error instruction_op {_shown(error['instruction_op'])} is not an op")
    strings = ["message", "traceback"] + (["cuda_call", "location"] if kind == "gpu_access" else [])
    nullable = ["instruction_id"] + (["interfered_request_id"] if kind == "gpu_access" else [])
    if not all(isinstance(error[f], str) for f in strings):
        raise ValueError(f"error fields {strings} must be strings")
    if not all(error[f] is None or isinstance(error[f], str) for f in nullable):
        raise ValueError(f"error fields {nullable} must be strings or null")
    return error


def _fields(node: dict[str, Any], *names: str) -> None:
    if set(node) != {"type", *names}:
        raise ValueError(f"a {_shown(node['type'])} value has fields {_shown(sorted(node))}")


def _decode_value(node: Any, parts: _Parts) -> Any:
    """Decode one node of the typed value tree, taking its binary parts from ``parts``."""
    if not isinstance(node, dict) or not isinstance(node.get("type"), str):
        raise ValueError("a value is not an object with a 'type'")
    kind = node["type"]
    if kind == "null":
        _fields(node)
        return None
    if kind in ("boolean", "integer", "number", "string"):
        _fields(node, "value")
        if not _is_scalar(kind, node["value"]):
            raise ValueError(f"a {kind!r} value holds {_shown(node['value'])}")
        return _finite_float(node["value"]) if kind == "number" else node["value"]
    if kind == "array":
        _fields(node, "value")
        if not isinstance(node["value"], list):
            raise ValueError("an 'array' value is not a list")
        return [_decode_value(child, parts) for child in node["value"]]
    if kind == "object":
        _fields(node, "value")
        if not isinstance(node["value"], dict):
            raise ValueError("an 'object' value is not an object")
        return {key: _decode_value(child, parts) for key, child in node["value"].items()}
    if kind == "bytes":
        _fields(node, "part", "sha256")
        return parts.take(node, bytes_copy)
    if kind == "file":
        _fields(node, "size", "part", "sha256")
        data = parts.take(node, bytes_copy)
        size = node["size"]
        if isinstance(size, bool) or not isinstance(size, int) or size != len(data):
            raise ValueError(
                f"file size {_shown(node['size'])} does not match its {len(data)} bytes"
            )
        return ReturnedFile(data)
    if kind == "folder":
        _fields(node, "files", "directories")
        files, directories = node["files"], node["directories"]
        if not isinstance(files, dict) or not isinstance(directories, list):
            raise ValueError("a folder's 'files' is not an object or 'directories' not a list")
        check_manifest(files, directories)
        decoded = {}
        for path, child in files.items():
            if not isinstance(child, dict) or child.get("type") != "file":
                raise ValueError(f"folder entry {_shown(path)} is not a file value")
            decoded[path] = _decode_value(child, parts)
        return ReturnedFolder(decoded, directories)
    if kind == "tensor":
        _fields(node, "dtype", "shape", "part", "sha256")
        return parts.take(node, lambda data: _decode_tensor(node, data))
    raise ValueError(f"unknown value type {_shown(kind)}")


def _is_scalar(kind: str, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "integer":
        return isinstance(value, int)
    if kind == "number":
        # An integer of more than 308 digits parses, but no float holds it.
        return _finite_float(value) is not None
    return isinstance(value, str)


_Value = TypeVar("_Value")

# Parts at least this large, not hashed while the answer arrived, are hashed on a thread of
# their own while they are copied out of the response (hashlib lets go of the GIL while it
# hashes), so that the copy costs no time beside the hash.
_HASHED_ALONGSIDE_BYTES = 1 << 20


class _Parts:
    """An answer's binary parts, taken by the value tree's nodes in depth-first order."""

    def __init__(self, parts: dict[str, Part], uploads: Mapping[str, bytes]) -> None:
        self._parts = parts
        self._uploads = uploads
        self._used: list[str] = []

    def unreferenced(self) -> list[str]:
        return sorted(self._parts.keys() - set(self._used))

    def take(self, node: dict[str, Any], materialize: Callable[[bytes | memoryview], _Value]) -> _Value:
        """A binary node's value, ``materialize`` of its part, checking depth-first
        numbering, single use and digest (whose mismatch is the error, whatever
        ``materialize`` says). The part's digest is computed here unless it was while the
        answer arrived; a part that is one of the program's uploads coming back is compared
        with it instead, and ``materialize`` is given the upload (a bytes value is then the
        very ``bytes`` the caller uploaded: no copy)."""
        name = node["part"]
        # Numbering by visiting order also makes a second reference to a part impossible.
        if name != f"return:{len(self._used)}":
            raise ValueError(
                f"binary part {_shown(name)} is not numbered depth-first "
                f"(expected 'return:{len(self._used)}')"
            )
        if name not in self._parts:
            raise ValueError(f"binary part {_shown(name)} is missing from the response")
        data, known = self._parts[name].data, self._parts[name].sha256
        digest = node["sha256"]
        if not is_sha256_hex(digest):
            raise ValueError(f"binary part {_shown(name)} does not match its sha256")
        upload = self._uploads.get(digest)
        failure: ValueError | None = None
        if upload is not None and self._same(data, known, digest, upload):
            matches = True
            value = materialize(upload)
        elif known is not None or len(data) < _HASHED_ALONGSIDE_BYTES:
            matches = (known or sha256_hex(data)) == digest
            if matches:
                value = materialize(data)
        else:
            hashed: list[str] = []
            hashing = threading.Thread(target=lambda: hashed.append(sha256_hex(data)))
            hashing.start()
            try:
                value = materialize(data)
            except ValueError as error:
                failure = error
            finally:
                hashing.join()
            matches = hashed == [digest]
        if not matches:
            raise ValueError(f"binary part {_shown(name)} does not match its sha256")
        if failure is not None:
            raise failure
        self._used.append(name)
        return value

    @staticmethod
    def _same(data: bytes | memoryview, known: str | None, digest: str, upload: bytes) -> bool:
        """Whether ``data`` is ``upload``, whose SHA-256 is ``digest``: by the digest found
        while the answer arrived, else byte for byte (``memcmp``, no copy)."""
        if known is not None:
            return known == digest
        return len(data) == len(upload) and upload.startswith(data)


def _numpy_dtype(dtype: str) -> np.dtype[Any]:
    if dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        # numpy has no such types; ml_dtypes supplies them (imported only when needed).
        import ml_dtypes

        extended: np.dtype[Any] = np.dtype(getattr(ml_dtypes, dtype))
        return extended
    # '<' pins the wire's little-endian layout whatever the host's byte order.
    little_endian: np.dtype[Any] = np.dtype(dtype).newbyteorder("<")
    return little_endian


def _decode_tensor(node: dict[str, Any], data: bytes | memoryview) -> np.ndarray[Any, Any]:
    dtype, shape = node["dtype"], node["shape"]
    if dtype not in DTYPE_ITEM_SIZES:
        raise ValueError(f"unknown tensor dtype {_shown(dtype)}")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ValueError(f"tensor shape {_shown(shape)} is not a list of non-negative ints")
    if len(data) != math.prod(shape) * DTYPE_ITEM_SIZES[dtype]:
        raise ValueError(f"a {dtype} tensor of shape {_shown(shape)} cannot hold {len(data)} bytes")
    # frombuffer aliases the read-only response; the copy is writable and owns its memory.
    array: np.ndarray[Any, Any] = (
        np.frombuffer(data, dtype=_numpy_dtype(dtype)).reshape(shape).copy()
    )
    return array
