"""Client over an in-process fake server: cache negotiation, ids, timeouts, errors."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import httpx
import numpy as np
import pytest

from kcoral import (
    Client,
    Program,
    ProtocolError,
    RequestRejected,
    ServerBusy,
    TransportError,
)
from kcoral._codec import decode_multipart, loads_json

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


def client_for(server: FakeServer, **kwargs) -> Client:
    client = Client("http://kcoral.test/", **kwargs)
    # Swap the pool for one on a mock transport, keeping the client's settings.
    settings = client._http
    client._http = httpx.Client(
        base_url=settings.base_url,
        headers=settings.headers,
        timeout=settings.timeout,
        transport=httpx.MockTransport(server),
    )
    return client


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


def test_read_timeouts():
    program, _, _ = two_blob_program()
    server = FakeServer(*[json_answer(COMPLETED)] * 2, json_answer({"status": "ok"}))
    with client_for(server, connect_timeout_seconds=3) as client:
        client.execute(program, timeout_seconds=120)
        client.execute(program)
        client.health()
    timeouts = [r.extensions["timeout"] for r in server.requests]
    assert [t["read"] for t in timeouts] == [180, None, 60]
    assert all(t["connect"] == 3 for t in timeouts)
    server = FakeServer(json_answer(COMPLETED))
    with client_for(server, read_timeout_seconds=5) as client:
        client.execute(program, timeout_seconds=120)
    assert server.requests[0].extensions["timeout"]["read"] == 5


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
