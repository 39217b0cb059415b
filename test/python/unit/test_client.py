"""Client over an in-process fake server: cache negotiation, ids, timeouts, deadlines, answer
limits, errors. The same attacks over a real socket are in adversarial/test_hostile_*.py."""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator

import httpx
import numpy as np
import pytest

import kcoral._client
from kcoral import (
    Client,
    DeadlineExceeded,
    Program,
    ProtocolError,
    RequestRejected,
    ServerBusy,
    ServerError,
    TransportError,
)
from kcoral._codec import decode_multipart, dumps_json, loads_json
from kcoral._deadline import DeadlineTransport

COMPLETED = {
    "status": "COMPLETED",
    "request_id": "rid",
    "queue_ms": 0.0,
    "elapsed_ms": 1.0,
    "lease_wait_ms": 0.0,
    "lease_held_ms": 0.5,
    "results": {"x": {"type": "integer", "value": 7}},
    "stdout": "",
    "stderr": "",
    "stdout_truncated": False,
    "stderr_truncated": False,
}


class FakeServer:
    """Records each request and answers from a list of canned handlers."""

    def __init__(self, *answers: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.sent_blobs: list[set[str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/execute":
            parts = decode_multipart(request.headers["content-type"], request.read())
            self.sent_blobs.append({p.name.removeprefix("blob:") for p in parts[1:]})
        return self.answers.pop(0)(request)


def json_answer(document: object, status: int = 200, headers: dict | None = None):
    return lambda request: httpx.Response(status, json=document, headers=headers)


def miss(*digests: str):
    return json_answer(
        {"status": "CACHE_MISS", "request_id": "rid", "missing_blobs": list(digests)}
    )


class Streamed(httpx.SyncByteStream):
    """A body delivered piece by piece, as a network transport delivers it."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces = pieces

    def __iter__(self) -> Iterator[bytes]:
        yield from self._pieces


def streamed_answer(pieces: Iterable[bytes], **headers: str):
    return lambda request: httpx.Response(200, headers=headers, stream=Streamed(pieces))


def client_for(server: FakeServer, **kwargs) -> Client:
    return Client("http://kcoral.test/", transport=httpx.MockTransport(server), **kwargs)


def two_blob_program() -> tuple[Program, str, str]:
    program = Program()
    a = program.upload(kind="tensor", value=np.zeros(4, np.float32))
    b = program.upload(kind="bytes", value=b"b")
    program.return_(key="a", value=a)
    digest_a, digest_b = list(program.blobs)
    del b
    return program, digest_a, digest_b


def test_first_send_has_no_blobs_and_a_hit_ends_it():
    program, _, _ = two_blob_program()
    server = FakeServer(json_answer(COMPLETED))
    with client_for(server) as client:
        result = client.execute(program, timeout_seconds=30, output_limit_bytes=100)
    assert result.completed and result["x"] == 7
    assert server.sent_blobs == [set()]
    (request,) = server.requests
    program_part = decode_multipart(request.headers["content-type"], request.read())[0]
    assert loads_json(program_part.data)["options"] == {
        "timeout_seconds": 30,
        "output_limit_bytes": 100,
    }


def test_cache_miss_resends_missing_then_all_with_one_request_id():
    program, digest_a, digest_b = two_blob_program()
    server = FakeServer(miss(digest_a), miss(digest_b), json_answer(COMPLETED))
    with client_for(server) as client:
        assert client.execute(program).completed
    assert server.sent_blobs == [set(), {digest_a}, {digest_a, digest_b}]
    ids = {r.headers["x-request-id"] for r in server.requests}
    (request_id,) = ids
    assert str(uuid.UUID(request_id)) == request_id and uuid.UUID(request_id).version == 4


def test_third_miss_is_a_protocol_error():
    program, digest_a, digest_b = two_blob_program()
    server = FakeServer(miss(digest_a), miss(digest_b), miss(digest_a))
    with client_for(server) as client, pytest.raises(ProtocolError, match="every blob"):
        client.execute(program)
    assert len(server.requests) == 3


def test_a_miss_for_an_unknown_blob_is_a_protocol_error():
    program, _, _ = two_blob_program()
    server = FakeServer(miss("f" * 64))
    with client_for(server) as client, pytest.raises(ProtocolError, match="lacks"):
        client.execute(program)


def test_each_execute_gets_a_fresh_request_id():
    program, _, _ = two_blob_program()
    server = FakeServer(json_answer(COMPLETED), json_answer(COMPLETED))
    with client_for(server) as client:
        client.execute(program)
        client.execute(program)
    first, second = (r.headers["x-request-id"] for r in server.requests)
    assert first != second


def test_read_timeouts_and_deadlines():
    # Each wait is the read timeout, or the time left to the call's deadline if shorter;
    # the pool timeout, taken first, is the time left: the deadline itself.
    program, _, _ = two_blob_program()
    server = FakeServer(*[json_answer(COMPLETED)] * 2, json_answer({"status": "ok"}))
    with client_for(server, connect_timeout_seconds=3) as client:
        client.execute(program, timeout_seconds=120)
        client.execute(program)
        client.health()
    timeouts = [r.extensions["timeout"] for r in server.requests]
    assert [t["read"] for t in timeouts] == pytest.approx([180, 1020, 60], abs=0.5)
    assert [t["pool"] for t in timeouts] == pytest.approx([240, 1020, 60], abs=0.5)
    assert all(t["connect"] == 3 for t in timeouts)
    server = FakeServer(json_answer(COMPLETED), json_answer({"status": "ok"}))
    with client_for(server, read_timeout_seconds=5) as client:
        client.execute(program, timeout_seconds=120)
        client.health()
    timeouts = [r.extensions["timeout"] for r in server.requests]
    assert [(t["read"], t["pool"]) for t in timeouts] == [
        pytest.approx((5, 65), abs=0.5), pytest.approx((5, 5), abs=0.5)]
    server = FakeServer(json_answer(COMPLETED), json_answer({"status": "ok"}))
    with client_for(server, deadline_seconds=7) as client:
        client.execute(program, timeout_seconds=120)
        client.health()
    assert [r.extensions["timeout"]["pool"] for r in server.requests] == pytest.approx(
        [7, 7], abs=0.5)


def test_the_deadline_covers_every_attempt_of_the_negotiation():
    program, digest_a, _ = two_blob_program()

    def slow_miss(request: httpx.Request) -> httpx.Response:
        time.sleep(0.6)
        return miss(digest_a)(request)

    server = FakeServer(slow_miss, slow_miss, json_answer(COMPLETED))
    started = time.monotonic()
    with client_for(server, deadline_seconds=1) as client, pytest.raises(DeadlineExceeded):
        client.execute(program)
    assert len(server.requests) == 2 and time.monotonic() - started < 1.5


def test_an_answer_dribbled_past_the_deadline_is_cut():
    def dribble() -> Iterator[bytes]:
        for _ in range(50):  # 10 s, should the deadline not hold
            time.sleep(0.2)
            yield b" "

    server = FakeServer(streamed_answer(dribble(), **{"Content-Type": "application/json"}))
    started = time.monotonic()
    with client_for(server, deadline_seconds=1) as client:
        with pytest.raises(DeadlineExceeded, match="deadline of 1 s"):
            client.execute(two_blob_program()[0])
    assert time.monotonic() - started < 1.6


def test_the_default_transport_keeps_the_deadline_in_every_socket_operation():
    # It wraps httpx's connection pool; should httpx change it, this says so.
    with Client("http://kcoral.test") as client:
        transport = client._http._transport
        assert isinstance(transport, DeadlineTransport) and transport.bounds_every_operation


def test_the_client_asks_for_the_codings_it_decodes_itself():
    server = FakeServer(json_answer({"status": "ok"}))
    with client_for(server, headers={"Accept-Encoding": "br"}) as client:
        client.health()
    assert server.requests[0].headers["accept-encoding"] == "gzip, deflate"


def gzip_bomb(inflated_mib: int) -> Iterator[bytes]:
    """A gzip stream of zeros, delivered as a transport would: one compressed MiB at a time."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    for _ in range(inflated_mib):
        yield compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)


def test_a_compressed_answer_stops_at_the_limit_once_decoded():
    sent: list[bytes] = []

    def pieces() -> Iterator[bytes]:
        for piece in gzip_bomb(1024):
            sent.append(piece)
            yield piece

    server = FakeServer(streamed_answer(pieces(), **{"Content-Encoding": "gzip",
                                                     "Content-Type": "application/json"}))
    with client_for(server, max_response_bytes=2 << 20) as client:
        with pytest.raises(ProtocolError, match=r"2 MiB decoded.*max_response_bytes"):
            client.execute(two_blob_program()[0])
    assert len(sent) == 3  # reading stopped at the piece that passed the limit


def test_an_answer_within_the_limit_is_read_whatever_its_coding():
    body = dumps_json(COMPLETED)
    for coding, data in [("gzip", zlib.compress(body, wbits=31)), ("deflate", zlib.compress(body)),
                         ("identity", body), ("gzip, deflate", zlib.compress(
                             zlib.compress(body, wbits=31)))]:
        pieces = [data[i : i + 7] for i in range(0, len(data), 7)]
        server = FakeServer(streamed_answer(pieces, **{"Content-Encoding": coding,
                                                       "Content-Type": "application/json"}))
        with client_for(server, max_response_bytes=len(body)) as client:
            assert client.execute(two_blob_program()[0])["x"] == 7, coding


def test_health_answers_are_bounded_to_one_mib():
    document = dumps_json({"status": "ok", "padding": "x" * (1 << 20)})
    server = FakeServer(streamed_answer([document], **{"Content-Type": "application/json"}))
    with client_for(server) as client, pytest.raises(ProtocolError, match="1 MiB"):
        client.health()


def test_an_error_answer_is_read_up_to_a_mib_and_still_raises_its_error():
    page = b"<html>" + b"x" * (8 << 20)
    server = FakeServer(lambda request: httpx.Response(
        502, headers={"Content-Type": "text/html"}, stream=Streamed([page])))
    with client_for(server) as client, pytest.raises(ServerError) as info:
        client.execute(two_blob_program()[0])
    assert info.value.status_code == 502 and info.value.message.startswith("<html>xxx")


@pytest.mark.parametrize("limits", [{"deadline_seconds": 0}, {"deadline_seconds": float("inf")},
                                    {"max_response_bytes": 0}, {"max_response_bytes": True}])
def test_limits_are_checked(limits):
    with pytest.raises(ValueError):
        Client("http://kcoral.test", **limits)


def test_default_limits_are_documented_constants():
    assert kcoral._client.MAX_RESPONSE_BYTES == 320 << 20
    assert kcoral._client.HEALTH_MAX_RESPONSE_BYTES == 1 << 20


def test_http_errors_raise():
    program, _, _ = two_blob_program()
    busy = {"status": "ERROR", "request_id": "r", "error": {"kind": "busy", "message": "full"}}
    server = FakeServer(json_answer(busy, 503, {"Retry-After": "1"}))
    with client_for(server) as client, pytest.raises(ServerBusy) as info:
        client.execute(program)
    assert info.value.retry_after_seconds == 1.0 and info.value.request_id == "r"


def test_transport_failures_raise_transport_error():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    program, _, _ = two_blob_program()
    with client_for(FakeServer(refuse)) as client, pytest.raises(TransportError):
        client.execute(program)


def test_custom_headers_are_sent():
    server = FakeServer(json_answer({"status": "ok"}))
    with client_for(server, headers={"Authorization": "Bearer t"}) as client:
        client.health()
    assert server.requests[0].headers["authorization"] == "Bearer t"


def test_health_and_target():
    health = {"status": "ok", "gpu_count": 1, "target": {"arch": "sm_90a"}, "versions": {}}
    server = FakeServer(json_answer(health), json_answer(health))
    with client_for(server) as client:
        assert client.health() == health
        assert client.target() == {"arch": "sm_90a"}
    assert [r.url.path for r in server.requests] == ["/health", "/health"]


def test_target_on_a_cpu_server_raises():
    server = FakeServer(json_answer({"status": "ok", "gpu_count": 0, "target": {}}))
    with client_for(server) as client, pytest.raises(ProtocolError, match="arch"):
        client.target()


def test_unhealthy_answers():
    rejected = {"status": "ERROR", "request_id": "r", "error": {"kind": "parse", "message": "?"}}
    server = FakeServer(
        json_answer({"status": "starting"}),
        lambda request: httpx.Response(200, content=b"not json"),
        json_answer(rejected, 400),
    )
    with client_for(server) as client:
        with pytest.raises(ProtocolError):
            client.health()
        with pytest.raises(ProtocolError):
            client.health()
        with pytest.raises(RequestRejected):
            client.health()


def test_execute_checks_its_argument():
    with Client("http://kcoral.test") as client, pytest.raises(TypeError):
        client.execute(json.dumps({"instructions": []}))  # type: ignore[arg-type]


def test_the_default_transport_uses_the_environments_proxy_as_httpx_would(monkeypatch):
    from kcoral._deadline import environment_proxy

    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert environment_proxy(httpx.URL("http://gpu.lan:8000")) is None
    monkeypatch.setenv("HTTP_PROXY", "proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.lan")
    assert environment_proxy(httpx.URL("http://gpu.example:8000")) == "http://proxy.corp:3128"
    assert environment_proxy(httpx.URL("http://gpu.lan:8000")) is None
    assert environment_proxy(httpx.URL("https://gpu.example")) is None
    monkeypatch.setenv("ALL_PROXY", "http://all.corp:1")
    assert environment_proxy(httpx.URL("https://gpu.example")) == "http://all.corp:1"
