"""decode_response: hand-built /execute responses, every value type, and every refusal."""

from __future__ import annotations

import copy
import json
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kcoral import (
    EngineError,
    ProtocolError,
    RequestRejected,
    ReturnedFile,
    ReturnedFolder,
    ServerBusy,
    ServerError,
)
from kcoral._codec import Part, encode_multipart, sha256_hex
from kcoral._result import CacheMiss, ProgramResult, decode_response

HEADERS: dict[str, str] = {}


def no_headers(name: str) -> str | None:
    return HEADERS.get(name.lower())


def envelope(results: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    document = {
        "status": "COMPLETED",
        "request_id": "0b5c3a52-5a8c-4b8e-9d32-3f6c1c4c9a10",
        "queue_ms": 0.4,
        "elapsed_ms": 812.6,
        "lease_wait_ms": 0.0,
        "lease_held_ms": 1.4,
        "results": {} if results is None else results,
        "stdout": "out",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": True,
    }
    document.update(overrides)
    return document


def binary(kind: str, index: int, data: bytes, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields, "part": f"return:{index}", "sha256": sha256_hex(data)}


def respond(document: dict[str, Any], blobs: list[bytes] = (), status: int = 200):
    """Encode like the server: JSON alone, or 'result' then 'return:N' parts."""
    body = json.dumps(document).encode()
    if not blobs:
        return decode_response(status, "application/json", body, no_headers)
    parts = [Part("result", "application/json", body)]
    parts += [Part(f"return:{i}", "application/octet-stream", b) for i, b in enumerate(blobs)]
    content_type, multipart = encode_multipart(parts)
    return decode_response(status, content_type, multipart, no_headers)


def test_completed_scalars_and_containers():
    result = respond(
        envelope(
            {
                "n": {"type": "null"},
                "b": {"type": "boolean", "value": True},
                "i": {"type": "integer", "value": 42},
                "f": {"type": "number", "value": 1},
                "s": {"type": "string", "value": "x"},
                "a": {"type": "array", "value": [{"type": "integer", "value": 1}]},
                "o": {"type": "object", "value": {"k": {"type": "string", "value": "v"}}},
            }
        )
    )
    assert isinstance(result, ProgramResult) and result.completed
    assert result.results == {
        "n": None,
        "b": True,
        "i": 42,
        "f": 1.0,
        "s": "x",
        "a": [1],
        "o": {"k": "v"},
    }
    assert type(result["f"]) is float
    assert (result.queue_ms, result.elapsed_ms, result.lease_wait_ms, result.lease_held_ms) == (
        0.4,
        812.6,
        0.0,
        1.4,
    )
    assert (result.stdout, result.stderr, result.stdout_truncated, result.stderr_truncated) == (
        "out",
        "",
        False,
        True,
    )
    assert result.error is None and result.request_id.startswith("0b5c")
    with pytest.raises(KeyError):
        result["absent"]


@pytest.mark.parametrize(
    ("dtype", "numpy_dtype"),
    [
        ("bool", np.bool_),
        ("uint8", np.uint8),
        ("int8", np.int8),
        ("float8_e4m3fn", ml_dtypes.float8_e4m3fn),
        ("float8_e5m2", ml_dtypes.float8_e5m2),
        ("int16", np.int16),
        ("float16", np.float16),
        ("bfloat16", ml_dtypes.bfloat16),
        ("int32", np.int32),
        ("float32", np.float32),
        ("int64", np.int64),
        ("float64", np.float64),
    ],
)
def test_tensor_of_every_dtype_is_a_writable_copy(dtype, numpy_dtype):
    expected = (np.arange(6) % 2).astype(numpy_dtype).reshape(3, 2)
    data = expected.tobytes()
    result = respond(envelope({"t": binary("tensor", 0, data, dtype=dtype, shape=[3, 2])}), [data])
    tensor = result["t"]
    assert tensor.dtype == np.dtype(numpy_dtype) and tensor.shape == (3, 2)
    assert tensor.tobytes() == data
    assert tensor.flags.writeable and tensor.flags.owndata
    tensor[...] = 0


def test_bytes_file_and_folder():
    folder = {
        "type": "folder",
        "files": {
            ".hidden": binary("file", 2, b"h", size=1),
            "a/b.txt": binary("file", 3, b"bb", size=2),
        },
        "directories": ["a", "a/empty", "c"],
    }
    document = envelope(
        {
            "bytes": binary("bytes", 0, b"raw"),
            "file": binary("file", 1, b"", size=0),
            "folder": folder,
        }
    )
    result = respond(document, [b"raw", b"", b"h", b"bb"])
    assert result["bytes"] == b"raw"
    assert isinstance(result["file"], ReturnedFile) and result["file"].read_bytes() == b""
    returned = result["folder"]
    assert isinstance(returned, ReturnedFolder)
    assert {k: v.read_bytes() for k, v in returned.files.items()} == {
        ".hidden": b"h",
        "a/b.txt": b"bb",
    }
    assert returned.directories == ("a", "a/empty", "c")


def test_parts_are_numbered_depth_first_across_results():
    nested = {
        "type": "array",
        "value": [
            binary("bytes", 0, b"0"),
            {"type": "object", "value": {"x": binary("bytes", 1, b"1")}},
        ],
    }
    result = respond(
        envelope({"first": nested, "second": binary("bytes", 2, b"2")}), [b"0", b"1", b"2"]
    )
    assert result["first"] == [b"0", {"x": b"1"}] and result["second"] == b"2"


def test_failed_result_keeps_earlier_returns():
    error = {
        "kind": "correctness",
        "message": "AssertionError: Tensor-likes are not close!",
        "instruction_index": 5,
        "instruction_op": "run",
        "instruction_id": "check",
        "traceback": "Traceback (most recent call last): ...",
    }
    result = respond(
        envelope({"early": {"type": "integer", "value": 1}}, status="FAILED", error=error)
    )
    assert not result.completed and result.status == "FAILED"
    assert result.error == error and result["early"] == 1


def test_gpu_access_error_has_its_extra_fields():
    error = {
        "kind": "gpu_access",
        "message": "cpu_only function called cudaMalloc",
        "instruction_index": 2,
        "instruction_op": "run",
        "instruction_id": None,
        "traceback": "",
        "cuda_call": "cudaMalloc",
        "location": "m.py:3",
        "interfered_request_id": None,
    }
    assert respond(envelope(status="FAILED", error=error)).error == error
    missing = {k: v for k, v in error.items() if k != "location"}
    with pytest.raises(ProtocolError):
        respond(envelope(status="FAILED", error=missing))


def test_unknown_top_level_fields_are_ignored():
    result = respond(envelope(node="gpu-7", worker={"pid": 12}))
    assert result.completed


def test_gpu_ids_come_with_their_count_or_not_at_all():
    assert respond(envelope(gpu_ids=[2, 5], gpu_count=2)).gpu_ids == (2, 5)
    assert respond(envelope()).gpu_ids == ()
    for broken_gpus in ({"gpu_ids": [0]}, {"gpu_count": 1}, {"gpu_ids": [0], "gpu_count": 2},
                        {"gpu_ids": [True], "gpu_count": 1}, {"gpu_ids": [-1], "gpu_count": 1},
                        {"gpu_ids": "0", "gpu_count": 1}, {"gpu_ids": [0.0], "gpu_count": 1},
                        {"gpu_ids": [0], "gpu_count": True}):
        with pytest.raises(ProtocolError):
            respond(envelope(**broken_gpus))


GOOD_ERROR = {
    "kind": "runtime",
    "message": "ValueError: x",
    "instruction_index": 0,
    "instruction_op": "run",
    "instruction_id": "r",
    "traceback": "",
}


def broken(**changes: Any) -> dict[str, Any]:
    error = copy.deepcopy(GOOD_ERROR)
    error.update(changes)
    return envelope(status="FAILED", error={k: v for k, v in error.items() if v is not ...})


@pytest.mark.parametrize(
    "document",
    [
        envelope(status="RUNNING"),
        envelope(status="ERROR"),
        envelope(queue_ms="1"),
        envelope(elapsed_ms=True),
        envelope(stdout=None),
        envelope(stdout_truncated=0),
        envelope(results=[]),
        {k: v for k, v in envelope().items() if k != "lease_held_ms"},
        {k: v for k, v in envelope().items() if k != "request_id"},
        envelope(error=GOOD_ERROR),
        envelope(status="FAILED"),
        broken(kind="mystery"),
        broken(kind="busy"),
        broken(instruction_index=-1),
        broken(instruction_index=True),
        broken(instruction_op="jump"),
        broken(instruction_id=3),
        broken(message=None),
        broken(traceback=...),
        broken(extra="field"),
        envelope({"x": {"type": "integer", "value": True}}),
        envelope({"x": {"type": "integer", "value": 1.5}}),
        envelope({"x": {"type": "number", "value": False}}),
        envelope({"x": {"type": "boolean", "value": 1}}),
        envelope({"x": {"type": "string", "value": 1}}),
        envelope({"x": {"type": "array", "value": {}}}),
        envelope({"x": {"type": "object", "value": []}}),
        envelope({"x": {"type": "null", "value": None}}),
        envelope({"x": {"type": "integer", "value": 1, "extra": 2}}),
        envelope({"x": {"type": "set", "value": []}}),
        envelope({"x": {"value": 1}}),
        envelope({"x": 1}),
    ],
)
def test_malformed_documents_are_protocol_errors(document):
    with pytest.raises(ProtocolError):
        respond(document)


@pytest.mark.parametrize(
    ("good", "overflowing"),
    [('"queue_ms": 0.4', '"queue_ms": 1e999'), ('"value": 0.5', '"value": -1e999')],
)
def test_numbers_that_overflow_to_infinity_are_refused(good, overflowing):
    text = json.dumps(envelope({"x": {"type": "number", "value": 0.5}}))
    decode_response(200, "application/json", text.encode(), no_headers)
    with pytest.raises(ProtocolError):
        decode_response(
            200, "application/json", text.replace(good, overflowing).encode(), no_headers
        )


@pytest.mark.parametrize(
    ("results", "blobs"),
    [
        ({"b": binary("bytes", 1, b"x")}, [b"y", b"x"]),  # not numbered from 0
        ({"a": binary("bytes", 1, b"1"), "b": binary("bytes", 0, b"0")}, [b"0", b"1"]),
        ({"a": binary("bytes", 0, b"0"), "b": binary("bytes", 0, b"0")}, [b"0"]),  # reused
        ({"a": binary("bytes", 0, b"0")}, [b"0", b"unreferenced"]),
        ({"a": binary("bytes", 0, b"0")}, [b"tampered"]),
        ({"a": {**binary("bytes", 0, b"0"), "sha256": "00" * 32}}, [b"0"]),
        ({"a": {**binary("bytes", 0, b"0"), "sha256": sha256_hex(b"0").upper()}}, [b"0"]),
        ({"a": {**binary("bytes", 0, b"0"), "part": "blob:0"}}, [b"0"]),
        ({"f": binary("file", 0, b"abc", size=2)}, [b"abc"]),
        ({"f": binary("file", 0, b"abc", size=True)}, [b"abc"]),
        ({"f": binary("file", 0, b"abc")}, [b"abc"]),
        ({"t": binary("tensor", 0, b"abc", dtype="int16", shape=[2])}, [b"abc"]),
        ({"t": binary("tensor", 0, b"ab", dtype="int17", shape=[1])}, [b"ab"]),
        ({"t": binary("tensor", 0, b"ab", dtype="int16", shape=[-1])}, [b"ab"]),
        ({"t": binary("tensor", 0, b"ab", dtype="int16", shape=1)}, [b"ab"]),
    ],
)
def test_binary_part_rules(results, blobs):
    with pytest.raises(ProtocolError):
        respond(envelope(results), blobs)


def test_missing_part_is_a_protocol_error():
    body = json.dumps(envelope({"a": binary("bytes", 0, b"0")})).encode()
    with pytest.raises(ProtocolError):
        decode_response(200, "application/json", body, no_headers)


def folder_with(files: dict[str, Any], directories: list[str]) -> dict[str, Any]:
    return envelope({"d": {"type": "folder", "files": files, "directories": directories}})


@pytest.mark.parametrize(
    ("files", "directories"),
    [
        ({"b": binary("file", 0, b"", size=0), "a": binary("file", 1, b"", size=0)}, []),
        ({}, ["b", "a"]),
        ({"a/x": binary("file", 0, b"", size=0)}, []),  # parent not listed
        ({"a": binary("file", 0, b"", size=0)}, ["a"]),  # both file and directory
        ({"./a": binary("file", 0, b"", size=0)}, []),
        ({"../a": binary("file", 0, b"", size=0)}, []),
        ({"a": binary("bytes", 0, b"")}, []),
        ({}, ["a/b"]),
    ],
)
def test_folder_manifest_rules(files, directories):
    with pytest.raises(ProtocolError):
        respond(folder_with(files, directories), [b""] * len(files))


def test_multipart_framing_rules():
    result = json.dumps(envelope({"a": binary("bytes", 0, b"0")})).encode()

    def decode(parts):
        content_type, body = encode_multipart(parts)
        return decode_response(200, content_type, body, no_headers)

    ok = [
        Part("result", "application/json", result),
        Part("return:0", "application/octet-stream", b"0"),
    ]
    assert decode(ok)["a"] == b"0"
    with pytest.raises(ProtocolError):
        decode(ok[::-1])
    with pytest.raises(ProtocolError):
        decode([ok[0], Part("return:0", "text/plain", b"0")])
    with pytest.raises(ProtocolError):
        decode([ok[0], Part("return:1", "application/octet-stream", b"0")])
    with pytest.raises(ProtocolError):
        decode([Part("result", "text/plain", result), ok[1]])
    with pytest.raises(ProtocolError):
        decode_response(200, "multipart/form-data; boundary=x", b"garbage", no_headers)
    with pytest.raises(ProtocolError):
        decode_response(200, "text/html", b"<html>", no_headers)
    with pytest.raises(ProtocolError):
        decode_response(200, None, b"{}", no_headers)
    with pytest.raises(ProtocolError):
        decode_response(
            200, "application/json", b'{"status": "COMPLETED", "status": 1}', no_headers
        )
    with pytest.raises(ProtocolError):
        decode_response(200, "application/json", b"[]", no_headers)


def test_cache_miss():
    digests = [sha256_hex(b"a"), sha256_hex(b"b")]
    miss = respond({"status": "CACHE_MISS", "request_id": "r", "missing_blobs": digests})
    assert miss == CacheMiss("r", frozenset(digests))
    for bad in ([], [digests[0], digests[0]], ["nothex"], None):
        with pytest.raises(ProtocolError):
            respond({"status": "CACHE_MISS", "request_id": "r", "missing_blobs": bad})
    with pytest.raises(ProtocolError):
        respond({"status": "CACHE_MISS", "missing_blobs": digests})
    with pytest.raises(ProtocolError):
        respond({"status": "CACHE_MISS", "request_id": "r", "missing_blobs": digests}, [b"x"])


def error_body(kind: str, message: str = "nope") -> bytes:
    document = {
        "status": "ERROR",
        "request_id": "rid-9",
        "error": {"kind": kind, "message": message},
    }
    return json.dumps(document).encode()


def test_http_errors_raise_server_errors():
    with pytest.raises(RequestRejected) as info:
        decode_response(400, "application/json", error_body("parse", "bad ref"), no_headers)
    assert (info.value.status_code, info.value.kind, info.value.message, info.value.request_id) == (
        400,
        "parse",
        "bad ref",
        "rid-9",
    )
    assert str(info.value) == "HTTP 400 parse: bad ref"
    with pytest.raises(EngineError):
        decode_response(500, "application/json", error_body("engine"), no_headers)


def test_busy_reads_retry_after(monkeypatch):
    monkeypatch.setitem(HEADERS, "retry-after", "1")
    with pytest.raises(ServerBusy) as info:
        decode_response(503, "application/json", error_body("busy"), no_headers)
    assert info.value.retry_after_seconds == 1.0
    monkeypatch.setitem(HEADERS, "retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")
    with pytest.raises(ServerBusy) as info:
        decode_response(503, "application/json", error_body("busy"), no_headers)
    assert info.value.retry_after_seconds is None


def test_foreign_error_bodies_still_raise_server_error(monkeypatch):
    monkeypatch.setitem(HEADERS, "x-request-id", "from-header")
    with pytest.raises(ServerError) as info:
        decode_response(502, "text/html", b"<h1>Bad Gateway</h1>", no_headers)
    assert type(info.value) is ServerError
    assert (info.value.kind, info.value.request_id) == (None, "from-header")
    assert "Bad Gateway" in info.value.message
    with pytest.raises(ServerError) as info:
        decode_response(404, "application/json", b"", no_headers)
    assert info.value.status_code == 404


@pytest.mark.parametrize("depth", [600, 100_000])
def test_deeply_nested_values_are_protocol_errors(depth):
    node = '{"type":"array","value":[' * depth + '{"type":"null"}' + "]}" * depth
    text = json.dumps(envelope({"deep": None})).replace('{"deep": null}', '{"deep": ' + node + "}")
    with pytest.raises(ProtocolError):
        decode_response(200, "application/json", text.encode(), no_headers)


@pytest.mark.parametrize(
    ("good", "beyond_a_float"),
    [('"queue_ms": 0.4', '"queue_ms": 1' + "0" * 400),
     ('"value": 0.5', '"value": -1' + "0" * 400)],
)
def test_integers_beyond_a_float_where_numbers_are_due_are_refused(good, beyond_a_float):
    text = json.dumps(envelope({"x": {"type": "number", "value": 0.5}}))
    with pytest.raises(ProtocolError, match="finite number|'number' value"):
        decode_response(
            200, "application/json", text.replace(good, beyond_a_float).encode(), no_headers
        )


def test_integers_of_any_size_within_the_digit_limit_are_kept():
    big = 10**4000
    result = respond(envelope({"i": {"type": "integer", "value": big}}))
    assert result["i"] == big


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e400"])
def test_a_retry_after_no_caller_can_sleep_is_none(monkeypatch, value):
    monkeypatch.setitem(HEADERS, "retry-after", value)
    with pytest.raises(ServerBusy) as info:
        decode_response(503, "application/json", error_body("busy"), no_headers)
    assert info.value.retry_after_seconds is None


def test_an_error_message_that_is_not_a_string_is_not_used():
    body = json.dumps({"error": {"kind": "busy", "message": [[[]]] * 3}}).encode()
    with pytest.raises(ServerBusy) as info:
        decode_response(503, "application/json", body, no_headers)
    assert info.value.message == "HTTP status 503"


@pytest.mark.parametrize(
    "document",
    [
        {"status": "x" * 1_000_000},
        {"status": json.loads("[" * 900 + "]" * 900)},
        envelope({"x": {"type": "y" * 1_000_000}}),
        envelope({"x": {"type": "null", **{f"k{i}": i for i in range(100_000)}}}),
        envelope({"x": {"type": "tensor", "dtype": "float32", "shape": list(range(100_000)),
                        "part": "return:0", "sha256": sha256_hex(b"")}}),
    ],
    ids=["long-status", "deep-status", "long-type", "many-fields", "long-shape"],
)
def test_protocol_errors_quote_the_answer_briefly(document):
    with pytest.raises(ProtocolError) as info:
        respond(document, [b""] if "x" in document.get("results", {}) else [])
    assert len(str(info.value)) < 1000


# -- digests computed while the answer arrived (kcoral._part_hasher) -----------------------


def encoded(data: bytes) -> tuple[str, bytes, tuple[int, int]]:
    """(content type, multipart body, the payload's range) of one bytes value ``data``."""
    document = json.dumps(envelope({"b": binary("bytes", 0, data)})).encode()
    content_type, body = encode_multipart([
        Part("result", "application/json", document),
        Part("return:0", "application/octet-stream", data),
    ])
    start = body.index(data)
    return content_type, body, (start, start + len(data))


@pytest.fixture
def hashes_after(monkeypatch) -> list[int]:
    """The sizes of what the decoder itself hashes."""
    import kcoral._result

    hashed: list[int] = []
    real = kcoral._result.sha256_hex
    monkeypatch.setattr(kcoral._result, "sha256_hex", lambda data: hashed.append(len(data)) or real(data))
    return hashed


@pytest.mark.parametrize("size", [10, 3 << 20])
def test_a_digest_for_exactly_the_parts_range_is_taken_without_hashing_again(hashes_after, size):
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    content_type, body, span = encoded(data)
    result = decode_response(200, content_type, body, no_headers, {span: sha256_hex(data)})
    assert result["b"] == data and hashes_after == []


def test_digests_of_other_ranges_are_ignored(hashes_after):
    data = b"payload"
    content_type, body, (start, end) = encoded(data)
    others = {(start + 1, end): sha256_hex(data[1:]), (start - 1, end): sha256_hex(data)}
    assert decode_response(200, content_type, body, no_headers, others)["b"] == data
    assert hashes_after == [len(data)]


def test_a_wrong_digest_for_the_parts_range_is_a_mismatch_never_a_pass():
    data = b"payload"
    content_type, body, span = encoded(data)
    with pytest.raises(ProtocolError, match="does not match its sha256"):
        decode_response(200, content_type, body, no_headers, {span: sha256_hex(b"other")})


def test_a_payload_ends_where_the_hashers_search_found_its_delimiter(monkeypatch):
    """The receiving's search found where the payload ends; the decoder does not search
    64 MiB again (its range is still checked against the digest's)."""
    data = bytes(5 << 20)
    content_type, body, span = encoded(data)
    searched_from: list[int] = []

    class Body(bytes):
        def find(self, sub, start=0, *args):  # type: ignore[override]
            searched_from.append(start)
            return super().find(sub, start, *args)

    result = decode_response(200, content_type, Body(body), no_headers, {span: sha256_hex(data)})
    assert result["b"] == data
    assert span[0] not in searched_from  # nothing searched from the payload's start on
    result = decode_response(200, content_type, Body(body), no_headers)
    assert span[0] in searched_from  # as it is without the receiving's digests


# -- the program's own uploads coming back ---------------------------------------------------


def encoded_as(data: bytes, named: bytes) -> tuple[str, bytes]:
    """A body whose bytes value ``b`` carries ``data`` and names the digest of ``named``."""
    node = {"type": "bytes", "part": "return:0", "sha256": sha256_hex(named)}
    document = json.dumps(envelope({"b": node})).encode()
    return encode_multipart([
        Part("result", "application/json", document),
        Part("return:0", "application/octet-stream", data),
    ])


@pytest.mark.parametrize("size", [10, 3 << 20])
def test_an_upload_coming_back_is_compared_not_hashed_and_decodes_to_the_callers_bytes(
    hashes_after, size
):
    upload = bytes(range(256)) * (size // 256) + b"u" * (size % 256)
    content_type, body = encoded_as(upload, upload)
    result = decode_response(200, content_type, body, no_headers, uploads={sha256_hex(upload): upload})
    assert result["b"] is upload and hashes_after == []


def test_an_upload_whose_digest_was_found_while_arriving_decodes_to_the_callers_bytes(hashes_after):
    upload = b"u" * (3 << 20)
    content_type, body, span = encoded(upload)
    digest = sha256_hex(upload)
    result = decode_response(200, content_type, body, no_headers, {span: digest}, {digest: upload})
    assert result["b"] is upload and hashes_after == []


@pytest.mark.parametrize(
    "change",
    [lambda b: b[:-1] + b"v", lambda b: b"v" + b[1:], lambda b: b[:-1], lambda b: b + b"u"],
    ids=["last-byte", "first-byte", "shorter", "longer"],
)
def test_an_answer_naming_an_upload_with_other_bytes_is_a_mismatch(hashes_after, change):
    """A hostile server cannot pass other bytes off as the caller's upload: they are
    compared, then hashed, and refused."""
    upload = b"u" * (2 << 20)
    content_type, body = encoded_as(change(upload), upload)
    with pytest.raises(ProtocolError, match="does not match its sha256"):
        decode_response(200, content_type, body, no_headers, uploads={sha256_hex(upload): upload})
    assert hashes_after == [len(change(upload))]


def test_a_tensor_from_an_upload_is_a_writable_array_of_its_own():
    upload = np.arange(12, dtype=np.float32).tobytes()
    node = binary("tensor", 0, upload, dtype="float32", shape=[3, 4])
    document = json.dumps(envelope({"t": node})).encode()
    content_type, body = encode_multipart([
        Part("result", "application/json", document),
        Part("return:0", "application/octet-stream", upload),
    ])
    array = decode_response(200, content_type, body, no_headers, uploads={sha256_hex(upload): upload})["t"]
    assert array.flags.writeable and array.tolist() == np.arange(12).reshape(3, 4).tolist()
    array[0, 0] = 99
    assert upload == np.arange(12, dtype=np.float32).tobytes()
