"""A hostile server that answers slowly: answers dribbled a byte at a time (the head, the
body, on a fresh connection or a kept-alive one), endless ``100 Continue`` heads, an
upload read at a trickle. Each must end in DeadlineExceeded at the call's deadline.
"""

from __future__ import annotations

import json
import time

import pytest

import kcoral._client
from adversarial.hostile_server import Exchange, MiB, head, program, run_within
from kcoral import Client, DeadlineExceeded, Program
from kcoral._codec import sha256_hex

# -- slow answers and the deadline ---------------------------------------------------------


def dribble(exchange: Exchange, data: bytes, interval: float) -> None:
    for index in range(len(data)):
        exchange.send(data[index : index + 1])
        time.sleep(interval)


def endless_body(interval: float, length: int = 10 * MiB):
    def answer(exchange: Exchange) -> None:
        exchange.read_body()
        exchange.send(head(Content_Type="application/json", Content_Length=length))
        dribble(exchange, b" " * length, interval)

    return answer


def endless_head(interval: float, after_a_cache_miss: bool = False):
    digest = sha256_hex(b"x")

    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        if after_a_cache_miss and exchange.number == 0:
            miss = json.dumps({"status": "CACHE_MISS", "request_id": "r",
                               "missing_blobs": [digest]}).encode()
            exchange.send(head(Content_Type="application/json", Content_Length=len(miss)) + miss)
            return True  # the next request comes on this kept-alive connection
        dribble(exchange, b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"a" * (100 << 10), interval)
        return False

    return answer


def endless_continue(exchange: Exchange) -> None:
    exchange.read_body()
    while True:
        exchange.send(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("attack", "interval"),
    [
        (endless_body, 0.2),
        (endless_body, 1.5),
        (endless_head, 0.2),
        (lambda interval: endless_head(interval, after_a_cache_miss=True), 0.2),
        (lambda interval: endless_continue, 0),
    ],
    ids=["body-0.2s", "body-1.5s", "head", "head-on-a-kept-connection", "100-continue"],
)
def test_an_answer_that_never_ends_is_cut_at_the_deadline(hostile, attack, interval):
    server = hostile(attack(interval))
    with Client(server.url, deadline_seconds=3) as client:
        _, error, elapsed = run_within(20, lambda: client.execute(program(), timeout_seconds=1))
    assert isinstance(error, DeadlineExceeded), error
    assert "deadline of 3 s" in str(error)
    assert 2.9 < elapsed < 4.5


@pytest.mark.slow
def test_the_default_deadline_follows_the_timeout(hostile, monkeypatch):
    # timeout_seconds + both margins: 1 + 1 + 1 seconds here.
    monkeypatch.setattr(kcoral._client, "READ_TIMEOUT_MARGIN_SECONDS", 1.0)
    monkeypatch.setattr(kcoral._client, "DEADLINE_MARGIN_SECONDS", 1.0)
    server = hostile(endless_body(0.2))
    with Client(server.url) as client:
        _, error, elapsed = run_within(20, lambda: client.execute(program(), timeout_seconds=1))
    assert isinstance(error, DeadlineExceeded) and "deadline of 3 s" in str(error), error
    assert 2.9 < elapsed < 4.5


@pytest.mark.slow
def test_health_is_cut_at_its_deadline(hostile):
    server = hostile(endless_body(0.5, length=1000))
    with Client(server.url, deadline_seconds=2) as client:
        _, error, elapsed = run_within(20, client.health)
    assert isinstance(error, DeadlineExceeded), error
    assert 1.9 < elapsed < 3.5


@pytest.mark.slow
def test_an_upload_read_at_a_trickle_is_cut_at_the_deadline(hostile):
    """The server asks for the blob, then reads 16 KiB every 0.1 s: every send moves on, so
    only the deadline, not a write timeout, can end it."""
    blob = bytes(64 * MiB)
    digest = sha256_hex(blob)
    built = Program()
    built.return_(key="x", value=built.upload(kind="bytes", value=blob))

    def answer(exchange: Exchange) -> bool:
        if exchange.number == 0:
            exchange.read_body()
            miss = json.dumps({"status": "CACHE_MISS", "request_id": "r",
                               "missing_blobs": [digest]}).encode()
            exchange.send(head(Content_Type="application/json", Content_Length=len(miss)) + miss)
            return True
        while exchange.conn.recv(16 << 10):
            time.sleep(0.1)
        return False

    server = hostile(answer)
    with Client(server.url, deadline_seconds=3) as client:
        _, error, elapsed = run_within(30, lambda: client.execute(built))
    assert isinstance(error, DeadlineExceeded), error
    assert 2.9 < elapsed < 4.5
