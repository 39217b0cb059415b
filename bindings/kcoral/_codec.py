"""The byte-level wire codec: strict JSON, multipart/form-data framing, SHA-256 names.

These functions know nothing of programs or results; they raise ``ValueError`` on malformed
input and leave it to callers to say which protocol rule was broken.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import re
import reprlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# An answer's body as the client holds it: a large one in a private memory mapping
# (kcoral._body), others in bytes or a bytearray.
Body = bytes | bytearray | mmap.mmap

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# The longest JSON integer read: Python's default for int() of a string. Reading longer
# ones takes time quadratic in their length; the limit is the client's own, whatever
# sys.set_int_max_str_digits says for the rest of the process.
MAX_JSON_INTEGER_DIGITS = 4300
# Error messages quote what a peer sent; this keeps a quote short however large or deeply
# nested the value (a plain repr of a list nested 900 deep raises RecursionError).
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = 80
# A header parameter: name=token or name="quoted string" (backslash escapes allowed).
_PARAM = re.compile(r';\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;\s]*)\s*')


def shown(value: object) -> str:
    """A short repr of ``value`` for an error message, whatever its size or depth."""
    try:
        return _SHORT_REPR.repr(value)
    except ValueError:  # an int too long for repr
        return f"<{type(value).__name__}>"


def sha256_hex(data: bytes | bytearray | memoryview) -> str:
    """The lowercase hex SHA-256 of ``data``: the name of a blob on the wire."""
    return hashlib.sha256(data).hexdigest()


def is_sha256_hex(value: object) -> bool:
    return isinstance(value, str) and _SHA256_HEX.fullmatch(value) is not None


def dumps_json(value: Any) -> bytes:
    """Compact UTF-8 JSON; NaN and Infinity are refused since the server rejects them."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def loads_json(data: Body | memoryview | str) -> Any:
    """Parse JSON strictly; ValueError for what the wire does not allow.

    Refused: duplicate object keys, NaN and Infinity, numbers beyond a float (``1e400``),
    integers of more than MAX_JSON_INTEGER_DIGITS digits, nesting deeper than the
    interpreter's recursion limit, and bytes that are not UTF-8.
    """

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                raise ValueError(f"duplicate JSON key {key!r}")
            obj[key] = value
        return obj

    def no_constants(name: str) -> Any:
        raise ValueError(f"non-finite JSON number {name}")

    def integer(text: str) -> int:
        digits = len(text) - text.startswith("-")
        if digits > MAX_JSON_INTEGER_DIGITS:
            raise ValueError(
                f"a JSON integer of {digits} digits (more than {MAX_JSON_INTEGER_DIGITS})"
            )
        return int(text)

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"the JSON number {text[:40]}{'...' if len(text) > 40 else ''} "
                             "is beyond a float")
        return value

    text = data if isinstance(data, str) else str(data, "utf-8")
    # json.JSONDecodeError and UnicodeDecodeError are both ValueErrors.
    try:
        return json.loads(
            text,
            object_pairs_hook=unique_keys,
            parse_constant=no_constants,
            parse_int=integer,
            parse_float=finite,
        )
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def json_copy(value: Any, where: str) -> Any:
    """A fresh copy of ``value`` in plain JSON types; TypeError/ValueError if it is not JSON.

    Copying snapshots mutable containers, so later edits by the caller change nothing, and
    it turns tuples into lists and int/float subclasses into plain numbers.
    """
    return _json_copy(value, where, set())


def _json_copy(value: Any, where: str, active: set[int]) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} holds a non-finite float, which JSON cannot carry")
        return float(value)
    if not isinstance(value, (list, tuple, dict)):
        raise TypeError(
            f"{where} holds a {type(value).__name__}, which is not JSON (only a top-level "
            "argument may be a Register; convert numpy scalars with .item())"
        )
    if id(value) in active:
        raise ValueError(f"{where} contains itself")
    active.add(id(value))
    try:
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                raise TypeError(f"{where} has a dict key that is not a str")
            return {key: _json_copy(item, where, active) for key, item in value.items()}
        return [_json_copy(item, where, active) for item in value]
    finally:
        active.discard(id(value))


@dataclass(frozen=True)
class Part:
    """One multipart/form-data part: its form name, media type and payload, and the
    payload's SHA-256 where it was computed already (while the body was received)."""

    name: str
    content_type: str
    data: bytes | memoryview
    sha256: str | None = None


def parse_header_value(value: str) -> tuple[str, dict[str, str]]:
    """Split ``type/subtype; a=1; b="x"`` into the lowercased main value and its parameters."""
    main, _, rest = value.partition(";")
    params: dict[str, str] = {}
    rest = ";" + rest if rest else ""
    position = 0
    while position < len(rest):
        match = _PARAM.match(rest, position)
        if match is None:
            raise ValueError(f"malformed header parameters in {shown(value)}")
        raw = match.group(2)
        if raw.startswith('"'):
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        params[match.group(1).lower()] = raw
        position = match.end()
    return main.strip().lower(), params


# Parts up to this size are searched for the boundary before it is used. A larger one is
# not (searching costs about 0.35 ms a MiB): 128 random bits occur in 64 MiB with a chance
# of about 2**-102, and where a blob's bytes held them anyway, the receiver, which checks
# each blob against its SHA-256 name, would refuse the body rather than misread it.
SEARCHED_PART_BYTES = 1 << 20


def encode_multipart(parts: list[Part]) -> tuple[str, bytes]:
    """Frame ``parts`` as multipart/form-data; returns (Content-Type header, body)."""
    content_type, chunks = multipart_chunks(parts)
    return content_type, b"".join(chunks)


# The most bytes of a payload in one piece of a body. The HTTP stack copies each piece once
# (h11 joins what it frames) and, where the socket takes part of it, copies the rest again
# (httpcore slices what is left): bounded pieces keep both copies small, where one 64 MiB
# piece was copied over and over, the whole upload at a fifth of the link's pace.
BODY_PIECE_BYTES = 1 << 20


def multipart_chunks(parts: list[Part]) -> tuple[str, list[bytes | memoryview]]:
    """(Content-Type header, the body's pieces in order) of ``parts`` as multipart/form-data.

    The payloads are among the pieces themselves, as views of at most BODY_PIECE_BYTES, not
    copies: a body of large blobs goes to the socket as they are.
    """
    for part in parts:
        if not part.name or any(c in part.name for c in '"\\\r\n'):
            raise ValueError(f"invalid multipart part name {part.name!r}")
    while True:
        boundary = "kcoral-" + secrets.token_hex(16)
        if all(
            boundary.encode() not in bytes(part.data)  # bytes of bytes is the same object
            for part in parts
            if len(part.data) <= SEARCHED_PART_BYTES
        ):
            break
    chunks: list[bytes | memoryview] = []
    for part in parts:
        chunks.append(
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{part.name}"\r\n'
            f"Content-Type: {part.content_type}\r\n\r\n".encode()
        )
        if len(part.data) <= BODY_PIECE_BYTES:
            chunks.append(part.data)
        else:
            view = memoryview(part.data).cast("B")
            chunks += [view[at : at + BODY_PIECE_BYTES] for at in range(0, len(view), BODY_PIECE_BYTES)]
        chunks.append(b"\r\n")
    chunks.append(f"--{boundary}--\r\n".encode())
    return f"multipart/form-data; boundary={boundary}", chunks


def decode_multipart(
    content_type: str, body: Body, digests: Mapping[tuple[int, int], str] | None = None
) -> list[Part]:
    """Parse a multipart/form-data body with CRLF framing; ValueError when malformed.

    Every part must carry exactly one ``Content-Disposition: form-data; name=...`` and one
    ``Content-Type``. A preamble and an epilogue are ignored, as RFC 2046 asks. Each part's
    data is a view of ``body``, not a copy: its reader copies out what it keeps.
    ``digests`` are SHA-256 computed beforehand by (start, end) offset in ``body``, by a
    search of the same body (kcoral._part_hasher) that found ``end`` to be the first
    delimiter from ``start`` on: a payload starting there ends there without a second
    search, and carries that digest as its ``sha256``.
    """
    media_type, params = parse_header_value(content_type)
    boundary = params.get("boundary", "")
    if media_type != "multipart/form-data" or not boundary:
        raise ValueError(f"not a multipart/form-data content type: {shown(content_type)}")
    delimiter = b"--" + boundary.encode("latin-1")
    ends = dict(digests.keys()) if digests else {}  # each key is (start, end)
    if body[: len(delimiter)] == delimiter:  # an mmap has no startswith
        position = len(delimiter)
    else:
        found = body.find(b"\r\n" + delimiter)
        if found < 0:
            raise ValueError("multipart body has no opening boundary")
        position = found + 2 + len(delimiter)
    parts: list[Part] = []
    while True:
        if body[position : position + 2] == b"--":
            break
        line_end = body.find(b"\r\n", position)
        if line_end < 0 or body[position:line_end].strip(b" \t"):
            raise ValueError("malformed multipart boundary line")
        headers_end = body.find(b"\r\n\r\n", line_end)
        if headers_end < 0:
            raise ValueError("multipart part headers are not terminated")
        # headers_end == line_end means an empty header block.
        header_block = body[line_end + 2 : headers_end] if headers_end > line_end else b""
        payload_start = headers_end + 4
        payload_end = ends.get(payload_start, -1)
        if payload_end < 0:
            payload_end = body.find(b"\r\n" + delimiter, payload_start)
        if payload_end < 0:
            raise ValueError("multipart part is not terminated by a boundary")
        payload = memoryview(body)[payload_start:payload_end]
        digest = digests.get((payload_start, payload_end)) if digests else None
        parts.append(_make_part(bytes(header_block), payload, digest))
        position = payload_end + 2 + len(delimiter)
    if not parts:
        raise ValueError("multipart body has no parts")
    return parts


def _make_part(header_block: bytes, data: memoryview, sha256: str | None) -> Part:
    headers: dict[str, str] = {}
    for line in header_block.decode("utf-8").split("\r\n") if header_block else []:
        name, colon, value = line.partition(":")
        name = name.strip().lower()
        if not colon or not name:
            raise ValueError(f"malformed multipart header line {shown(line)}")
        if name in headers:
            raise ValueError(f"repeated multipart header {shown(name)}")
        headers[name] = value.strip()
    disposition, params = parse_header_value(headers.get("content-disposition", ""))
    if disposition != "form-data" or not params.get("name"):
        raise ValueError("multipart part lacks 'Content-Disposition: form-data; name=...'")
    if "content-type" not in headers:
        raise ValueError(f"multipart part {shown(params['name'])} lacks a Content-Type")
    encoding = headers.get("content-transfer-encoding", "binary").lower()
    if encoding not in ("binary", "8bit"):
        raise ValueError(f"unsupported Content-Transfer-Encoding {shown(encoding)}")
    content_type, _ = parse_header_value(headers["content-type"])
    return Part(params["name"], content_type, data, sha256)
