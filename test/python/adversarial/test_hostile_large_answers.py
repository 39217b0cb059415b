"""A hostile server's large answers: received into one buffer of their declared length,
their rest past httpx's layers (what follows them on the connection never read), their
parts hashed while they arrive where the client has the cores. Each comes back whole, or
ends in one of the client's documented exceptions.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

import kcoral._body
import kcoral._result
from adversarial.hostile_server import (
    MALFORMED,
    Exchange,
    MiB,
    answer_with,
    bytes_answer,
    completed,
    executed,
    head,
    multipart,
    program,
    run_within,
)
from kcoral import Client, DeadlineExceeded, Program, ProtocolError, TransportError
from kcoral._codec import sha256_hex

# -- received into one buffer, past httpx's layers --------------------------------------------


def test_a_large_answer_of_declared_length_comes_back_whole(hostile):
    data, body, content_type = bytes_answer(48)
    server = hostile(answer_with(body, content_type))
    result, error, _ = executed(server, 60)
    assert error is None, repr(error)
    assert type(result["b"]) is bytes and result["b"] == data


def test_a_large_answer_is_received_past_h11_and_what_follows_it_is_never_read(hostile, monkeypatch):
    # The rest of a large plain answer is received straight into its buffer, and its
    # connection is then closed: bytes sent after its declared length (here a forged answer
    # to the next request) are never taken for anything, and the next call connects anew.
    direct: list[int] = []
    real = kcoral._body._receive_rest
    monkeypatch.setattr(
        kcoral._body, "_receive_rest", lambda *args: direct.append(args[2]) or real(*args)
    )
    data, large, large_type = bytes_answer(24)
    forged = json.dumps(completed({"x": {"type": "string", "value": "forged"}})).encode()
    honest = json.dumps(completed({"x": {"type": "string", "value": "honest"}})).encode()
    connections: list[socket.socket] = []

    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        connections.append(exchange.conn)
        if exchange.number == 0:
            forged_answer = head(Content_Type="application/json", Content_Length=len(forged)) + forged
            exchange.send(head(Content_Type=large_type, Content_Length=len(large)) + large + forged_answer)
        else:
            exchange.send(head(Content_Type="application/json", Content_Length=len(honest)) + honest)
        return True

    server = hostile(answer)
    with Client(server.url) as client:
        result, error, _ = run_within(60, lambda: client.execute(program()))
        assert error is None, repr(error)
        assert result["b"] == data
        second, error, _ = run_within(20, lambda: client.execute(program()))
    assert error is None, repr(error)
    assert second["x"] == "honest"
    assert len(direct) == 1 and direct[0] < 24 * MiB  # most of it came past h11
    assert connections[0] is not connections[1]


def test_a_large_chunked_answer_that_declares_a_length_too_is_read_as_chunks(hostile):
    # HTTP reads a body by its chunks where it has both: the length must not make the
    # client take the chunks' framing for the body's bytes.
    data, body, content_type = bytes_answer(24)
    step = 3 * MiB
    chunked = b"".join(
        b"%x\r\n" % len(body[at : at + step]) + body[at : at + step] + b"\r\n"
        for at in range(0, len(body), step)
    ) + b"0\r\n\r\n"

    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        exchange.send(
            head(Content_Type=content_type, Content_Length=len(body), Transfer_Encoding="chunked") + chunked
        )
        return True

    server = hostile(answer)
    result, error, _ = executed(server, 60)
    assert error is None, repr(error)
    assert result["b"] == data



# -- answers hashed while they arrive ----------------------------------------------------------
#
# Where the client may use several cores, a large multipart answer's parts are hashed while
# it arrives (kcoral._part_hasher), whatever the body says of itself: forced on here.


@pytest.fixture
def hashed_while_received(monkeypatch):
    monkeypatch.setattr(kcoral._body, "HASH_WHILE_RECEIVING_CORES", 1)
    yield
    hashers = [thread for thread in threading.enumerate() if thread.name == "kcoral-part-hasher"]
    assert not hashers, "the hasher's thread outlived the call"


def hashed_after_receiving(monkeypatch) -> list[int]:
    """The sizes of what the client's decoder hashes itself, after the answer arrived."""
    hashed: list[int] = []
    real = kcoral._result.sha256_hex
    monkeypatch.setattr(kcoral._result, "sha256_hex", lambda b: hashed.append(len(b)) or real(b))
    return hashed


@pytest.mark.parametrize("name", [name for name in MALFORMED if "mapped" in name])
def test_a_malformed_answer_hashed_while_it_arrives_is_a_protocol_error(
    hostile, hashed_while_received, name
):
    body, content_type = MALFORMED[name]
    server = hostile(answer_with(body, content_type))
    _, error, _ = executed(server, 20)
    assert isinstance(error, ProtocolError), repr(error)
    if "sha256" in name:
        assert "does not match its sha256" in str(error), str(error)


def test_a_large_answer_hashed_while_it_arrives_is_checked_by_that_hash(
    hostile, hashed_while_received, monkeypatch
):
    data = bytes(range(256)) * (24 * MiB // 256)
    node = {"type": "bytes", "part": "return:0", "sha256": sha256_hex(data)}
    body, content_type = multipart(completed({"b": node, "c": {**node, "part": "return:1"}}), data, data)
    hashed_after = hashed_after_receiving(monkeypatch)
    server = hostile(answer_with(body, content_type))
    result, error, _ = executed(server, 60)
    assert error is None, repr(error)
    assert result["b"] == data and result["c"] == data
    assert hashed_after == []  # both parts' digests came from the receiving


def test_a_preamble_dressed_as_a_part_is_hashed_but_never_taken(hostile, hashed_while_received):
    """A preamble holding "--boundary" and a blank line: the hasher takes it for a part and
    hashes it; the decoder, which skips a preamble up to the first delimiter after CRLF,
    never sees that part, and the real one comes back as it was sent."""
    data, body, content_type = bytes_answer(5)
    boundary = content_type.split("boundary=")[1].encode()
    body = b"x--" + boundary + b"\r\n\r\n" + bytes(MiB) + b"\r\n" + body
    server = hostile(answer_with(body, content_type))
    result, error, _ = executed(server, 60)
    assert error is None, repr(error)
    assert result["b"] == data


def test_an_answer_that_stops_midway_while_hashed_ends_at_the_deadline(hostile, hashed_while_received):
    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        exchange.send(head(Content_Type="multipart/form-data; boundary=b", Content_Length=64 * MiB))
        exchange.send(b'--b\r\nContent-Disposition: form-data; name="result"\r\n\r\n' + bytes(8 * MiB))
        time.sleep(10)
        return False

    server = hostile(answer)
    _, error, _ = executed(server, 20, deadline_seconds=2)
    assert isinstance(error, (DeadlineExceeded, TransportError)), repr(error)


def test_a_large_answer_received_into_a_bytearray_is_hashed_while_it_arrives_too(
    hostile, hashed_while_received, monkeypatch
):
    """Where Python has no madvise (macOS, say) a large body goes into a bytearray."""
    monkeypatch.setattr(kcoral._body, "_receive_buffer", bytearray)
    data, body, content_type = bytes_answer(6)
    hashed_after = hashed_after_receiving(monkeypatch)
    server = hostile(answer_with(body, content_type))
    result, error, _ = executed(server, 60)
    assert error is None, repr(error)
    assert result["b"] == data and hashed_after == []


# -- the program's own upload coming back --------------------------------------------------
#
# A part that names the digest of one of the program's uploads is compared with the
# caller's bytes (while it arrives, or while decoding) and decodes to them: a server cannot
# pass other bytes off as them.


@pytest.mark.parametrize("while_arriving", [False, True])
@pytest.mark.parametrize("change", [None, 0, -1, "shorter"])
def test_an_answer_naming_the_callers_upload_is_its_bytes_or_refused(hostile, monkeypatch, while_arriving, change):
    if while_arriving:
        monkeypatch.setattr(kcoral._body, "HASH_WHILE_RECEIVING_CORES", 1)
    upload = bytes(range(256)) * (24 * MiB // 256)
    sent = bytearray(upload)
    if change == "shorter":
        del sent[-1]
    elif change is not None:
        sent[change] ^= 1
    node = {"type": "bytes", "part": "return:0", "sha256": sha256_hex(upload)}
    body, content_type = multipart(completed({"b": node}), bytes(sent))
    server = hostile(answer_with(body, content_type))
    built = Program()
    built.return_(key="b", value=built.upload(kind="bytes", value=upload))
    with Client(server.url) as client:
        result, error, _ = run_within(60, lambda: client.execute(built))
    if change is None:
        assert error is None, repr(error)
        assert result["b"] is upload
    else:
        assert isinstance(error, ProtocolError) and "does not match its sha256" in str(error), repr(error)
