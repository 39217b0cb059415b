"""Requests the server refuses for their size or its load: 413, 503 busy, 500 too large.

Each test starts a server with the limit it needs (a small ``--max-request-bytes``, one
worker with a short ``--queue-timeout-seconds``, a small ``--max-response-bytes``) and
checks the wire answer, the exception the client raises, and that service goes on.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from kcoral import Program, RequestRejected, RequestTooLarge, ResponseTooLarge, ServerBusy

from e2e.harness import wait_until
from e2e.programs import call, response_document

LIMIT = 4096


def assert_served(server) -> None:
    result = server.execute(call("def ok():\n    return 'ok'\n", "ok"))
    assert result.raise_for_error()["out"] == "ok"


@pytest.fixture(scope="module")
def small_server(start_module_server):
    return start_module_server("--num-workers", "1", "--max-request-bytes", str(LIMIT),
                               "--max-response-bytes", "10000")


def big_program(size: int) -> Program:
    program = Program()
    program.upload(id="big", kind="bytes", value=b"\x01" * size)
    return program


def test_oversize_body_is_413_with_a_json_error(small_server):
    content_type, body = big_program(2 * LIMIT).to_request()
    response = small_server.post(content_type, body)
    assert response.status_code == 413
    document = response.json()
    assert document["status"] == "ERROR"
    assert document["error"] == {
        "kind": "request_too_large",
        "message": f"the request body is larger than the server's limit of {LIMIT} bytes"}
    assert response.headers["x-request-id"] == document["request_id"]
    assert_served(small_server)


def test_body_at_the_limit_is_accepted(small_server):
    def request(padding: int) -> tuple[str, bytes]:
        program = Program()
        program.upload(id="m", kind="module", source="#" * padding)
        return program.to_request()

    content_type, body = request(LIMIT - len(request(0)[1]))
    assert len(body) == LIMIT
    document, _ = response_document(small_server.post(content_type, body))
    assert document["status"] == "COMPLETED"


def test_client_raises_request_too_large(small_server):
    with small_server.client() as client, pytest.raises(RequestTooLarge) as raised:
        client.execute(big_program(2 * LIMIT))
    assert raised.value.status_code == 413 and raised.value.kind == "request_too_large"
    assert str(LIMIT) in raised.value.message
    assert_served(small_server)


def test_oversize_declared_length_is_refused_before_the_body(small_server):
    with socket.create_connection((small_server.host, small_server.port), timeout=10) as sock:
        sock.sendall(b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
                     b"boundary=b\r\nContent-Length: 1000000000\r\nExpect: 100-continue\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 413 Payload Too Large", answer[:200]
    assert_served(small_server)


def test_response_over_the_limit_is_500_response_too_large(small_server):
    program = call("def big():\n    return 'x' * 20000\n", "big")
    response = small_server.post(*program.to_request())
    assert response.status_code == 500
    assert response.json()["error"]["kind"] == "response_too_large"
    with small_server.client() as client, pytest.raises(ResponseTooLarge) as raised:
        client.execute(program)
    assert "10000" in raised.value.message
    assert_served(small_server)


def test_binary_response_over_the_limit_is_500_response_too_large(small_server):
    response = small_server.post(*call("def big():\n    return b'x' * 20000\n", "big").to_request())
    assert response.status_code == 500
    assert response.json()["error"]["kind"] == "response_too_large"


@pytest.mark.parametrize("value", ["'x' * 40_000_000", "list(range(5_000_000))"])
def test_returned_text_past_the_worker_channel_is_500_response_too_large(small_server, value):
    # Text the worker's channel to the front would not carry (more than the response limit
    # plus twice the output limit): the program fails where it returns, as the front would
    # answer it, rather than the front killing its worker for an oversized message.
    with small_server.client() as client, pytest.raises(ResponseTooLarge) as raised:
        client.execute(call(f"def big():\n    return {value}\n", "big"))
    assert "past the server's response limit of 10000 bytes" in raised.value.message
    assert_served(small_server)


def test_too_deep_literal_is_rejected_through_the_client(server):
    nested: list = []
    for _ in range(100):
        nested = [nested]
    with server.client() as client, pytest.raises(RequestRejected) as raised:
        client.execute(call("def f(x):\n    return 1\n", "f", nested))
    assert raised.value.status_code == 400 and raised.value.kind == "parse"
    assert "nested deeper" in raised.value.message


@pytest.mark.slow
def test_busy_when_no_worker_frees_up_in_time(start_server):
    server = start_server("--num-workers", "1", "--queue-timeout-seconds", "1")
    slow = call("import time\ndef f():\n    time.sleep(4.5)\n    return 'slow'\n", "f")
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.update(result=server.execute(slow)))
    runner.start()

    def load() -> dict:
        return server.get("/health").json()["load"]

    assert wait_until(lambda: load()["requests_in_progress"] == 1, 10)
    waiting: dict = {}
    queued = threading.Thread(target=lambda: waiting.update(
        response=server.post(*call("def f():\n    return 1\n", "f").to_request())))
    started = time.monotonic()
    queued.start()
    assert wait_until(lambda: load()["requests_waiting"] == 1, 5)
    queued.join(30)
    elapsed = time.monotonic() - started
    response = waiting["response"]
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    document = response.json()
    assert document["error"]["kind"] == "busy"
    assert "queue timeout" in document["error"]["message"]
    assert 0.9 < elapsed < 4
    with server.client() as client, pytest.raises(ServerBusy) as raised:
        client.execute(call("def f():\n    return 1\n", "f"))
    assert raised.value.retry_after_seconds == 1.0 and raised.value.status_code == 503
    runner.join(30)
    assert outcome["result"].raise_for_error()["out"] == "slow"
    assert_served(server)


def test_gpus_asked_of_a_cpu_server_are_refused_as_parse_and_service_goes_on(server):
    program = call("def ok():\n    return 'ok'\n", "ok")
    for count in (1, 8):
        with pytest.raises(RequestRejected, match=f"'gpu_count' is {count}, but this is a CPU server: it has no GPU"):
            server.execute(program, gpu_count=count)
    # A program on a CPU server held no GPU: the response names none.
    result = server.execute(program)
    assert result.raise_for_error()["out"] == "ok"
    assert result.gpu_ids == ()
