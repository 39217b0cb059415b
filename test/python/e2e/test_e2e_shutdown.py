"""Graceful stop: on SIGTERM the running program finishes, new work is refused, exit 0.

New connections are refused once the listener closes; a request arriving on a connection
opened before gets 503 ``busy``, as does a program still waiting in the queue. The server
then exits 0 and leaves no process and no file behind (checked by the fixture's stop),
whatever connections are still open then.
"""

from __future__ import annotations

import signal
import socket
import threading
import time

import httpx
import pytest

from e2e.harness import wait_until
from e2e.programs import call

SLOW = ("import time\n"
        "def slow():\n"
        "    time.sleep(4)\n"
        "    print('finished', flush=True)\n"
        "    return 'done'\n")


def refuses_connections(server) -> bool:
    try:
        socket.create_connection((server.host, server.port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:  # caught in the backlog as the listener closed
        pass
    return False


@pytest.mark.slow
def test_sigterm_finishes_the_running_program_and_refuses_new_work(start_server):
    server = start_server("--num-workers", "1")
    early_execute, early_health = server.http(), server.http()
    assert early_execute.get("/health").status_code == 200  # connections opened before the stop
    assert early_health.get("/health").status_code == 200
    outcomes: dict = {}

    def run(name: str, program) -> None:
        outcomes[name] = server.post(*program.to_request(), timeout_s=30)

    running = threading.Thread(target=run, args=("running", call(SLOW, "slow")))
    running.start()

    def load() -> dict:
        return server.get("/health").json()["load"]

    assert wait_until(lambda: load()["requests_in_progress"] == 1, 10)
    queued = threading.Thread(target=run, args=("queued", call("def f():\n    return 1\n", "f")))
    queued.start()
    assert wait_until(lambda: load()["requests_waiting"] == 1, 10)

    stopped_at = time.monotonic()
    server.signal(signal.SIGTERM)
    assert wait_until(lambda: refuses_connections(server), 5)

    late = early_execute.post("/execute", content=call("def f():\n    return 2\n", "f")
                              .to_request()[1], headers={"Content-Type": "multipart/form-data"})
    assert late.status_code == 503
    assert late.json()["error"]["kind"] == "busy" and late.headers["retry-after"] == "1"
    assert "shutting down" in late.json()["error"]["message"]
    health = early_health.get("/health")
    assert health.status_code == 503 and health.json()["status"] != "ok"

    queued.join(30)
    assert outcomes["queued"].status_code == 503
    assert outcomes["queued"].json()["error"]["kind"] == "busy"
    running.join(30)
    document = outcomes["running"].json()
    assert outcomes["running"].status_code == 200
    assert document["status"] == "COMPLETED", document
    assert document["results"]["out"] == {"type": "string", "value": "done"}
    assert document["stdout"] == "finished\n"

    assert server.wait(30) == 0
    assert time.monotonic() - stopped_at < 20
    assert "SIGTERM" in server.stderr_text()
    early_execute.close()
    early_health.close()
    with pytest.raises(httpx.ConnectError):
        server.get("/health", timeout_s=5)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_idle_server_stops_promptly_with_status_zero(start_server, signum):
    server = start_server("--num-workers", "2")
    assert server.execute(call("def f():\n    return 1\n", "f")).raise_for_error()["out"] == 1
    started = time.monotonic()
    server.signal(signum)
    assert server.wait(30) == 0
    assert time.monotonic() - started < 10


def _answered_health(server, token: str | None) -> socket.socket:
    """A connection kept alive after one GET /health (anonymous, or showing `token`)."""
    connection = socket.create_connection((server.host, server.port), timeout=10)
    authorization = b"" if token is None else b"Authorization: Bearer " + token.encode() + b"\r\n"
    connection.sendall(b"GET /health HTTP/1.1\r\nHost: kcoral\r\n" + authorization + b"\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
        answer += connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")
    return connection


@pytest.mark.slow
@pytest.mark.parametrize("tokens", [False, True], ids=["no-tokens", "token-file"])
def test_connections_still_open_at_the_stop_end_with_the_server(start_server, tmp_path, tokens):
    """Kept-alive connections, idle or halfway through a request's header, with a token and
    without: still open when the server stops, they end with it and it exits 0. (Their
    sessions used to end after the server's state, when the I/O context did, and with a
    token file the server died of SIGSEGV at its stop.)"""
    flags = ["--num-workers", "1"]
    if tokens:
        (tmp_path / "tokens").write_text("alice secret-of-alice\n")
        (tmp_path / "tokens").chmod(0o600)
        flags += ["--token-file", str(tmp_path / "tokens")]
    server = start_server(*flags)
    with server.client(token="secret-of-alice" if tokens else None) as client:
        assert client.execute(call("def f():\n    return 1\n", "f")).raise_for_error()["out"] == 1
    connections = [_answered_health(server, None) for _ in range(3)]
    if tokens:
        connections.append(_answered_health(server, "secret-of-alice"))
    halfway = socket.create_connection((server.host, server.port), timeout=10)
    halfway.sendall(b"POST /execute HTTP/1.1\r\nHost: kcoral\r\n")
    connections.append(halfway)

    server.signal(signal.SIGTERM)
    assert server.wait(30) == 0, server.stderr_text()[-2000:]
    assert server.stderr_text().rstrip().endswith("kcoral-server: stopped")
    for connection in connections:
        connection.close()
