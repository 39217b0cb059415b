"""Content-addressed blobs: CACHE_MISS negotiation, seen raw on the wire and through Client.

A program sent without its blob parts gets ``CACHE_MISS`` naming exactly the blobs the
server lacks, and no instruction runs; blobs sent once are cached, so later requests
need not carry them. The Client's negotiation gives the right results either way.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
from corpus.cases import MULTIPART, multipart, part, sha
from kcoral import Program



def unique_program(witness) -> tuple[Program, bytes, bytes]:
    """A program with two fresh blobs whose module appends a line to ``witness`` on load."""
    first, second = uuid.uuid4().bytes * 100, uuid.uuid4().bytes * 50
    program = Program()
    module = program.upload(id="m", kind="module", source=(
        f"open({str(witness)!r}, 'a').write('ran\\n')\n"
        "def sizes(*blobs):\n    return [len(b) for b in blobs]\n"))
    a = program.upload(id="a", kind="bytes", value=first)
    b = program.upload(id="b", kind="bytes", value=second)
    program.upload_file(blob=second, path="same/blob/again.bin")
    sizes = program.get_function(id="sizes", module=module, name="sizes")
    program.return_(key="sizes", value=program.run(id="r", fn=sizes, args=[a, b]))
    return program, first, second


def post(server, program: Program, blobs: set[str], request_id: str | None = None):
    headers = {"X-Request-ID": request_id} if request_id else None
    response = server.post(*program.to_request(blobs), headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    document = json.loads(response.content)
    return document


def test_cache_miss_names_exactly_the_missing_blobs(start_server, tmp_path):
    # The witness file is how the test sees whether the module ran, and a sandboxed
    # program cannot write outside its sandbox: this server runs programs unsandboxed.
    server = start_server("--num-workers", "1", "--sandbox", "none")
    witness = tmp_path / "witness.txt"
    program, first, second = unique_program(witness)
    request_id = str(uuid.uuid4())

    miss = post(server, program, set(), request_id)
    assert miss == {"status": "CACHE_MISS", "request_id": request_id,
                    "missing_blobs": miss["missing_blobs"]}
    assert sorted(miss["missing_blobs"]) == sorted([sha(first), sha(second)])
    assert not witness.exists(), "an instruction ran although blobs were missing"

    miss = post(server, program, {sha(first)})
    assert (miss["status"], miss["missing_blobs"]) == ("CACHE_MISS", [sha(second)])
    assert not witness.exists()

    # The first blob arrived with the miss above and stayed cached.
    done = post(server, program, {sha(second)})
    assert done["status"] == "COMPLETED", done
    assert done["results"]["sizes"]["value"] == [{"type": "integer", "value": len(first)},
                                                  {"type": "integer", "value": len(second)}]
    done = post(server, program, set())
    assert done["status"] == "COMPLETED"
    assert witness.read_text() == "ran\nran\n"


def test_client_negotiates_and_reuses_cached_blobs(server):
    values = np.random.default_rng(1).standard_normal(50_000).astype(np.float32)
    program = Program()
    tensor = program.upload(id="t", kind="tensor", value=values)
    module = program.upload(id="m", kind="module",
                            source="def total(t):\n    return float(t.astype('float64').sum())\n")
    total = program.get_function(id="total", module=module, name="total")
    program.return_(key="total", value=program.run(id="r", fn=total, args=[tensor]))
    program.return_(key="t", value=tensor)

    misses = server.metric('kcoral_execute_requests_total{outcome="cache_miss"}')
    first = server.execute(program).raise_for_error()
    assert server.metric('kcoral_execute_requests_total{outcome="cache_miss"}') == misses + 1
    second = server.execute(program).raise_for_error()
    assert server.metric('kcoral_execute_requests_total{outcome="cache_miss"}') == misses + 1
    for result in (first, second):
        assert result["total"] == float(values.astype(np.float64).sum())
        np.testing.assert_array_equal(result["t"], values)
    assert server.metric("kcoral_blob_cache_blobs") >= 1


def test_cached_blob_is_checked_against_a_new_tensor_shape(server):
    data = uuid.uuid4().bytes  # 16 bytes: four float32
    program = Program()
    program.upload(id="t", kind="tensor", value=data, dtype="float32", shape=[4])
    server.execute(program).raise_for_error()
    document = {"instructions": [{"op": "upload", "id": "t", "kind": "tensor", "blob": sha(data),
                                  "dtype": "float32", "shape": [8]}]}
    body = multipart(part("program", json.dumps(document).encode()))
    response = server.post(MULTIPART, body)
    assert response.status_code == 400
    assert "declares 32 bytes" in response.json()["error"]["message"]
