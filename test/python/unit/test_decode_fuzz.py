"""The answer decoder against mutated answers: only the documented exceptions come out.

A bounded, seeded version of the fuzzing the decoder had by hand (millions of inputs):
well-formed answers of every kind (every value type, a failed program, a cache miss, an
error) are mutated byte by byte and value by value, with the values a hostile server would
pick (numbers beyond a float, integers past the digit limit, deep nesting, wrong types),
and decoded, once as bodies and once through a Client, compressed, in pieces. Whatever
comes in, the result is a ProgramResult, a CacheMiss, or a KCoralError; anything else
(OverflowError, AttributeError, RecursionError...) is a bug.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from kcoral import Client, KCoralError, Program
from kcoral._codec import Part, decode_multipart, encode_multipart, sha256_hex
from kcoral._result import decode_response

SEED = 20240
INPUTS = 400
THROUGH_THE_CLIENT = 150

HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**70, 10**400, -(10**400), 0.5, 1e308, "", "x" * 300,
    "return:0", "return:1", "COMPLETED", "FAILED", "CACHE_MISS", "tensor", "file", "folder",
    "bytes", "number", "integer", "runtime", "gpu_access", "run", "float32", "bfloat16",
    [], {}, [0, 10**30], {"type": "number", "value": 10**400},
    {"type": "tensor", "dtype": "int8", "shape": [0, 10**30], "part": "return:0",
     "sha256": sha256_hex(b"")},
]  # fmt: skip
HOSTILE_TOKENS = [
    b"1e400", b"-1e400", b"1" + b"0" * 400, b"1" + b"0" * 5000, b"[" * 5000, b"]" * 3, b"{}",
    b"null", b'"\\ud800"', b"\xff\xfe", b"\r\n", b"--", b'"return:0"', b"NaN", b"\x00",
]  # fmt: skip
KEYS = ["type", "value", "part", "sha256", "size", "dtype", "shape", "files", "directories",
        "status", "kind", "message", "error", "results", "queue_ms", "missing_blobs"]  # fmt: skip


def envelope(results: dict[str, Any], **fields: Any) -> dict[str, Any]:
    document = {
        "status": "COMPLETED", "request_id": "r", "queue_ms": 0.25, "elapsed_ms": 3.5,
        "lease_wait_ms": 0.0, "lease_held_ms": 1.0, "results": results, "stdout": "out\n",
        "stderr": "", "stdout_truncated": False, "stderr_truncated": True,
    }  # fmt: skip
    document.update(fields)
    return document


def as_multipart(document: dict[str, Any], blobs: list[bytes]) -> tuple[int, str, bytes]:
    parts = [Part("result", "application/json", json.dumps(document).encode())]
    parts += [Part(f"return:{i}", "application/octet-stream", b) for i, b in enumerate(blobs)]
    content_type, body = encode_multipart(parts)
    return 200, content_type, body


def seeds() -> list[tuple[int, str, bytes]]:
    """Well-formed answers of every kind, as the server encodes them."""
    tensor = np.arange(12, dtype=np.float32).tobytes()

    def node(kind: str, index: int, data: bytes, **fields: Any) -> dict[str, Any]:
        return {"type": kind, **fields, "part": f"return:{index}", "sha256": sha256_hex(data)}

    scalars = envelope({
        "n": {"type": "null"}, "b": {"type": "boolean", "value": True},
        "i": {"type": "integer", "value": 42}, "f": {"type": "number", "value": 1.5},
        "s": {"type": "string", "value": "x"},
        "a": {"type": "array", "value": [{"type": "integer", "value": 1}]},
        "o": {"type": "object", "value": {"k": {"type": "string", "value": "v"}}},
    })  # fmt: skip
    binary = envelope({
        "t": node("tensor", 0, tensor, dtype="float32", shape=[3, 4]),
        "b": node("bytes", 1, b"raw"),
        "f": node("file", 2, b"abc", size=3),
        "d": {"type": "folder", "directories": ["sub"],
              "files": {"sub/x.txt": node("file", 3, b"x", size=1)}},
    })  # fmt: skip
    error = {"kind": "gpu_access", "message": "m", "instruction_index": 2,
             "instruction_op": "run", "instruction_id": None, "traceback": "tb",
             "cuda_call": "cuMemAlloc", "location": "f.py:3", "interfered_request_id": None}
    failed = envelope({"early": {"type": "integer", "value": 1}}, status="FAILED", error=error)
    miss = {"status": "CACHE_MISS", "request_id": "r", "missing_blobs": [sha256_hex(b"x")]}
    busy = {"status": "ERROR", "request_id": "r", "error": {"kind": "busy", "message": "full"}}
    return [
        (200, "application/json", json.dumps(scalars).encode()),
        as_multipart(binary, [tensor, b"raw", b"abc", b"x"]),
        (200, "application/json", json.dumps(failed).encode()),
        (200, "application/json", json.dumps(miss).encode()),
        (503, "application/json", json.dumps(busy).encode()),
    ]


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    if depth > 2 or rng.random() < 0.6:
        return rng.choice(HOSTILE_VALUES)
    if rng.random() < 0.5:
        return [hostile_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(KEYS): hostile_value(rng, depth + 1) for _ in range(rng.randrange(3))}


def mutate_tree(rng: random.Random, value: Any) -> Any:
    """``value`` with one node, picked by a random walk from the root, replaced or dropped."""
    if isinstance(value, dict) and value and rng.random() < 0.85:
        key = rng.choice(list(value))
        changed = dict(value)
        roll = rng.random()
        if roll < 0.6:
            changed[key] = mutate_tree(rng, value[key])
        elif roll < 0.8:
            changed[key] = hostile_value(rng)
        elif roll < 0.9:
            del changed[key]
        else:
            changed[rng.choice(KEYS)] = hostile_value(rng)
        return changed
    if isinstance(value, list) and value and rng.random() < 0.85:
        changed = list(value)
        index = rng.randrange(len(changed))
        changed[index] = mutate_tree(rng, changed[index])
        return changed
    return hostile_value(rng)


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    mutated = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        at = rng.randrange(len(mutated) + 1)
        roll = rng.randrange(4)
        if roll == 0 and mutated:
            mutated[min(at, len(mutated) - 1)] = rng.randrange(256)
        elif roll == 1:
            mutated[at:at] = rng.choice(HOSTILE_TOKENS)
        elif roll == 2:
            del mutated[at : at + rng.randrange(1, 64)]
        else:
            start = rng.randrange(len(mutated) + 1)
            mutated[at:at] = mutated[start : start + rng.randrange(1, 200)]
    return bytes(mutated)


def mutated_answers(rng: random.Random, count: int) -> Iterator[tuple[int, str, bytes]]:
    corpus = seeds()
    for _ in range(count):
        status, content_type, body = rng.choice(corpus)
        parts = decode_multipart(content_type, body) if content_type.startswith("multi") else None
        roll = rng.random()
        if roll < 0.6:
            document = json.loads(bytes(parts[0].data) if parts else body)
            text = json.dumps(mutate_tree(rng, mutate_tree(rng, document))).encode()
            if parts:
                content_type, body = encode_multipart([Part("result", "application/json", text),
                                                       *parts[1:]])
            else:
                body = text
        elif roll < 0.9:
            body = mutate_bytes(rng, body)
        else:
            content_type = rng.choice(["text/html", "multipart/form-data", 'multipart/mixed; b="',
                                       content_type + "; charset=\xff", content_type.upper()])
        if rng.random() < 0.05:
            status = rng.choice([200, 400, 418, 500, 503, 504])
        yield status, content_type, body


def test_mutated_answers_raise_only_documented_exceptions():
    rng = random.Random(SEED)
    outcomes = {"decoded": 0, "refused": 0}
    for status, content_type, body in mutated_answers(rng, INPUTS):
        try:
            decode_response(status, content_type, body, lambda name: None)
            outcomes["decoded"] += 1
        except KCoralError:
            outcomes["refused"] += 1
    # Both occur: the mutations neither all miss nor all break the answers.
    assert outcomes["decoded"] > 10 and outcomes["refused"] > 200, outcomes


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_mutated_compressed_answers_through_the_client_raise_only_documented_exceptions(coding):
    rng = random.Random(SEED + 1)
    program = Program()
    program.return_(key="x", value=program.upload(kind="bytes", value=b"x"))
    for status, content_type, body in mutated_answers(rng, THROUGH_THE_CLIENT):
        data = zlib.compress(body, wbits=31 if coding == "gzip" else 15)
        if rng.random() < 0.3:
            data = mutate_bytes(rng, data)
        pieces = [data[i : i + 997] for i in range(0, len(data), 997)]
        headers = [(b"content-type", content_type.encode("latin-1", "replace")),
                   (b"content-encoding", coding.encode())]

        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(status, headers=headers, stream=httpx.ByteStream(b"")
                                  if not pieces else Pieces(pieces))

        limit = rng.choice([64, 4096, 1 << 20])
        with Client("http://kcoral.test", transport=httpx.MockTransport(answer),
                    max_response_bytes=limit) as client:
            try:
                client.execute(program)
            except KCoralError:
                pass


class Pieces(httpx.SyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    def __iter__(self) -> Iterator[bytes]:
        yield from self._pieces
