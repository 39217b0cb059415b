"""A hostile server against the client: answers too large, in codings it did not ask for,
cut short, or malformed (numbers beyond a float, broken multipart, parts not matching
their SHA-256). Each must end in one of the client's documented exceptions, within its
memory bound. The server is the test's own (hostile_server.py); its slow answers are in
test_hostile_deadlines.py, its large ones in test_hostile_large_answers.py, its answers
to ``kcoral run`` in test_hostile_kcoral_run.py.
"""

from __future__ import annotations

import json
import socket
import tracemalloc
import zlib

import pytest

from adversarial.hostile_server import (
    MALFORMED,
    Exchange,
    MiB,
    answer_with,
    completed,
    executed,
    head,
    run_within,
)
from kcoral import Client, ProtocolError, TransportError

# -- bombs ---------------------------------------------------------------------------------


def bomb(wbits: int, inflated_mib: int) -> bytes:
    """A gzip (wbits 31) or zlib (15) stream of ``inflated_mib`` MiB of zeros, ~1 KiB per MiB.

    Each MiB is compressed after a full flush, so one compressed MiB repeats byte for byte;
    the stream never ends (no trailer), since the client must stop long before one.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(MiB)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + again * (inflated_mib - 1)


@pytest.mark.parametrize(("coding", "wbits"), [("gzip", 31), ("deflate", 15)])
def test_a_2_mb_bomb_for_2_gib_stops_at_the_limit_holding_no_more(hostile, coding, wbits):
    body = bomb(wbits, 2048)
    assert len(body) < 3 * MiB
    server = hostile(answer_with(body, Content_Encoding=coding))
    tracemalloc.start()
    try:
        _, error, elapsed = executed(server, 30, max_response_bytes=16 * MiB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(error, ProtocolError), error
    assert "16 MiB" in str(error) and "max_response_bytes" in str(error)
    assert peak < 16 * MiB + 8 * MiB, f"{peak / MiB:.0f} MiB held"


def test_a_health_bomb_stops_at_one_mib(hostile):
    server = hostile(answer_with(bomb(31, 2048), Content_Encoding="gzip"))
    tracemalloc.start()
    try:
        with Client(server.url) as client:
            _, error, _ = run_within(30, client.health)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(error, ProtocolError) and "1 MiB" in str(error), error
    assert peak < 8 * MiB, f"{peak / MiB:.0f} MiB held"


def test_a_plain_answer_over_the_limit_is_refused_by_its_declared_length(hostile):
    server = hostile(lambda exchange: exchange.send(head(Content_Length=64 * MiB)))
    _, error, elapsed = executed(server, 10, max_response_bytes=MiB)
    assert isinstance(error, ProtocolError) and "declares 67108864 bytes" in str(error), error
    assert elapsed < 5


def test_an_answer_cut_short_of_its_declared_length_is_an_error_not_a_short_body(hostile):
    # The client reads a declared length into one buffer of that size as it comes: a server
    # that promises 64 MiB, sends 1 and hangs up must not leave a zero-filled tail behind.
    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        exchange.send(head(Content_Type="application/json", Content_Length=64 * MiB) + b"{" * MiB)
        exchange.conn.shutdown(socket.SHUT_RDWR)
        return False

    server = hostile(answer)
    _, error, _ = executed(server, 20)
    assert isinstance(error, TransportError), repr(error)



@pytest.mark.parametrize("coding", ["br", "zstd", "gzip, gzip, gzip", "compress"])
def test_codings_the_client_did_not_ask_for_are_refused(hostile, coding):
    requests: list[Exchange] = []

    def answer(exchange: Exchange) -> bool:
        requests.append(exchange)
        return answer_with(b"\x0b\x02\x80{}\x03", Content_Encoding=coding)(exchange)

    server = hostile(answer)
    _, error, _ = executed(server, 10)
    assert isinstance(error, ProtocolError) and "content coding" in str(error), error
    assert requests[0].headers["accept-encoding"] == "gzip, deflate"



@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_answer_is_a_protocol_error(hostile, name):
    body, content_type = MALFORMED[name]
    server = hostile(answer_with(body, content_type))
    _, error, _ = executed(server, 20)
    assert isinstance(error, ProtocolError), repr(error)
    assert len(str(error)) < 2000
    if "sha256" in name:
        assert "does not match its sha256" in str(error), str(error)


@pytest.mark.parametrize(
    ("body", "coding"),
    [
        (zlib.compress(json.dumps(completed()).encode())[:-6], "deflate"),  # cut short
        (zlib.compress(json.dumps(completed()).encode()) + b"more", "deflate"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
    ],
    ids=["truncated", "trailing-data", "garbage"],
)
def test_an_undecodable_coded_answer_is_a_protocol_error(hostile, body, coding):
    server = hostile(answer_with(body, Content_Encoding=coding))
    _, error, _ = executed(server, 20)
    assert isinstance(error, ProtocolError) and "undecodable" in str(error), repr(error)


def test_a_gzip_answer_in_several_members_is_read(hostile):
    text = json.dumps(completed({"x": {"type": "integer", "value": 7}})).encode()
    members = b"".join(zlib.compress(text[i : i + 10], wbits=31) for i in range(0, len(text), 10))
    server = hostile(answer_with(members, Content_Encoding="gzip"))
    result, error, _ = executed(server, 20)
    assert error is None and result["x"] == 7
