"""The front under abuse: descriptors, memory, slow clients and shutdown are bounded.

Each test plays one abusive client against a real server with small limits, then checks
that the server refused it the documented way and went on serving everyone else:

- many blobs take few descriptors (one memfd per request; the cache bounded in files and
  blobs), and under a low descriptor limit the server lowers its own bounds and keeps
  answering /health; out of descriptors altogether, accept waits instead of spinning and
  serves what waited once descriptors are free;
- past --max-connections, /health still answers and /execute gets 503;
- a chunked body is refused as soon as it passes --max-request-bytes;
- the in-flight byte budget turns away what does not fit with 503 and Retry-After;
- large uploads given up half-way leave none of their hashing threads behind;
- slow senders: an idle connection, a header and a body under the minimum rate are cut;
- a client that goes away has its program dropped from the queue, or killed if it runs;
- shutdown: running programs are killed and answered 503 after the grace, and a second
  signal stops the server at once;
- with --token-file, requests without a token are refused on their header (401), /health
  stays open, and the client sends its token.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import threading
import time

import pytest
from kcoral import Program, Unauthorized

from e2e.harness import wait_until
from e2e.programs import call

MiB = 1 << 20


def many_blobs(count: int, tag: str) -> Program:
    """A program that uploads `count` distinct small byte blobs and returns the last."""
    program = Program()
    value = None
    for i in range(count):
        value = program.upload(kind="bytes", value=f"{tag} blob {i}".encode())
    program.return_(key="out", value=value)
    return program


def connect(server, timeout_s: float = 10) -> socket.socket:
    return socket.create_connection((server.host, server.port), timeout=timeout_s)


def read_response(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed `sock` (reading whatever it sent), or None."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return None
    return time.monotonic() - started


# -- descriptors ------------------------------------------------------------------------------


def test_many_blobs_take_few_descriptors_and_the_cache_keeps_its_file_budget(start_server):
    server = start_server("--num-workers", "2", "--blob-cache-max-files", "8", "--blob-cache-max-blobs", "3000")
    baseline = server.metric("kcoral_open_descriptors")
    for tag in ("first", "second", "third"):  # 6,000 blobs in all
        assert server.execute(many_blobs(2000, tag)).raise_for_error()["out"] == f"{tag} blob 1999".encode()
    for i in range(30):  # one file per request
        assert server.execute(many_blobs(1, f"single {i}")).raise_for_error()["out"] == f"single {i} blob 0".encode()
    assert server.metric("kcoral_blob_cache_files") <= 8
    assert server.metric("kcoral_blob_cache_blobs") <= 3000
    assert server.metric("kcoral_blob_cache_max_files") == 8
    assert server.metric("kcoral_open_descriptors") < baseline + 40
    # A program that names cached blobs of a request it shares only in part still runs.
    result = server.execute(many_blobs(2000, "third"))
    assert result.raise_for_error()["out"] == b"third blob 1999"


def test_a_low_descriptor_limit_lowers_the_bounds_and_health_keeps_answering(start_server):
    server = start_server("--num-workers", "2", descriptor_limit=400)
    assert "lowered --max-connections" in server.stderr_text()
    limit = server.metric("kcoral_descriptor_limit")
    max_connections = server.metric("kcoral_connections_max")
    assert limit == 400 and 16 <= max_connections < 200
    # More blobs than the process has descriptors, in a few requests.
    for tag in ("a", "b", "c"):
        assert server.execute(many_blobs(600, tag)).raise_for_error()["out"] == f"{tag} blob 599".encode()
    # More idle connections than it serves: the rest are answered 503 or closed, and once
    # they go, everything is served again.
    idle = [connect(server) for _ in range(int(max_connections) + 100)]
    time.sleep(0.5)
    assert len(os.listdir(f"/proc/{server.pid}/fd")) < limit
    for sock in idle:
        sock.close()
    assert wait_until(lambda: server.get("/health").status_code == 200, 10)
    assert server.metric("kcoral_guard_events_total{event=\"over_connection_limit\"}") >= 1
    assert server.execute(call("def f():\n    return 7\n", "f")).raise_for_error()["out"] == 7


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_out_of_descriptors_the_listener_waits_then_serves_what_waited(start_server):
    server = start_server("--num-workers", "1")
    soft, hard = resource.prlimit(server.pid, resource.RLIMIT_NOFILE)
    waiting = []
    # A program that ends while descriptors are out: its worker is replaced then, and the
    # new one's channel cannot come through (the worker parent is restarted, later).
    running, outcome = run_in_background(server, call("import time\ndef f():\n    time.sleep(1)\n    return 1\n", "f"))
    try:
        # No descriptor left for accept: it fails with EMFILE, and must not spin.
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{server.pid}/fd")), hard))
        for _ in range(5):
            sock = connect(server)  # the kernel's backlog takes it
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            waiting.append(sock)
        before = cpu_seconds(server.pid)
        time.sleep(2)
        assert cpu_seconds(server.pid) - before < 0.5
    finally:
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (soft, hard))
    for sock in waiting:
        assert status_of(read_response(sock)) == 200
        sock.close()
    running.join(30)
    assert outcome["response"].status_code == 200
    assert server.metric('kcoral_guard_events_total{event="accept_backoff"}') >= 1
    assert server.execute(call("def f():\n    return 9\n", "f")).raise_for_error()["out"] == 9


def test_past_the_connection_limit_health_answers_and_execute_gets_503(start_server):
    server = start_server("--num-workers", "1", "--max-connections", "16")
    idle = [connect(server) for _ in range(16)]
    try:
        assert wait_until(lambda: server.metric("kcoral_connections") >= 17, 10)  # they and this one
        health = server.get("/health")
        assert health.status_code == 200 and health.headers["connection"] == "close"
        content_type, body = call("def f():\n    return 1\n", "f").to_request()
        busy = server.post(content_type, body)
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        assert "too many connections" in busy.json()["error"]["message"]
    finally:
        for sock in idle:
            sock.close()
    assert wait_until(lambda: server.metric("kcoral_connections") <= 1, 10)
    assert server.execute(call("def f():\n    return 2\n", "f")).raise_for_error()["out"] == 2


# -- request bodies ---------------------------------------------------------------------------


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(start_server):
    server = start_server("--num-workers", "1", "--max-request-bytes", str(MiB))
    sock = connect(server)
    sock.sendall(b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * (64 << 10)
    sent = 0
    response = b""
    try:
        while sent < 64 * MiB:
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            sent += len(chunk)
            sock.settimeout(0.001)
            try:
                response += sock.recv(65536)
            except TimeoutError:
                pass
            sock.settimeout(10)
            if response:
                break
    except (BrokenPipeError, ConnectionResetError):
        pass
    response += read_response(sock)
    sock.close()
    assert status_of(response) == 413, response[:200]
    assert b"request_too_large" in response
    # Refused near the limit, not after the whole upload (the socket buffers hold a few MiB).
    assert sent < 16 * MiB
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 0, 10)


def test_the_inflight_budget_turns_away_what_does_not_fit(start_server):
    server = start_server("--num-workers", "1", "--max-request-bytes", str(MiB),
                          "--max-inflight-bytes", str(2 * MiB))
    head = (b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
            b"Content-Length: %d\r\n\r\n" % MiB)
    holders = [connect(server) for _ in range(2)]
    for sock in holders:
        sock.sendall(head + b"x" * 1000)  # declared 1 MiB each: the whole budget
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 2 * MiB, 10)
    third = connect(server)
    third.sendall(head)
    response = read_response(third)
    assert status_of(response) == 503, response[:300]
    assert b"Retry-After: 1" in response and b"busy" in response
    chunked = connect(server)
    chunked.sendall(head.replace(b"Content-Length: %d" % MiB, b"Transfer-Encoding: chunked") + b"10\r\n" + b"y" * 16)
    assert status_of(read_response(chunked)) == 503
    assert server.metric("kcoral_guard_events_total{event=\"inflight_full\"}") == 2
    for sock in holders:
        sock.close()
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 0, 10)
    assert server.execute(call("def f():\n    return 3\n", "f")).raise_for_error()["out"] == 3


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def test_large_uploads_given_up_half_way_leave_no_hashing_thread_behind(start_server):
    # Each body of declared length from 1 MiB is hashed on a thread of its own while it
    # comes: 40 clients that send half of one and go away must not leave 40 threads (nor
    # memory files) behind, and the server goes on.
    server = start_server("--num-workers", "1", "--max-request-bytes", str(4 * MiB))
    head = (b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
            b"Content-Length: %d\r\n\r\n" % (2 * MiB))
    part = b'--b\r\nContent-Disposition: form-data; name="blob:x"\r\nContent-Type: application/octet-stream\r\n\r\n'
    before = threads_of(server.pid)
    for _ in range(2):
        clients = [connect(server) for _ in range(20)]
        for sock in clients:
            sock.sendall(head + part + b"z" * MiB)
        assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 20 * 2 * MiB, 10)
        assert threads_of(server.pid) >= before + 20  # their hashers, waiting for the rest
        for sock in clients:
            sock.close()
        assert wait_until(lambda: threads_of(server.pid) == before, 10), (threads_of(server.pid), before)
        assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 0, 10)
    assert server.execute(call("def f():\n    return 5\n", "f")).raise_for_error()["out"] == 5


# -- slow clients -----------------------------------------------------------------------------


@pytest.mark.slow
def test_slow_clients_are_cut_and_a_steady_one_is_served(start_server):
    server = start_server("--num-workers", "1", "--idle-timeout-seconds", "1", "--header-timeout-seconds", "1",
                          "--min-body-bytes-per-second", "2000", "--body-rate-window-seconds", "1")
    idle = connect(server)
    assert (closed_within(idle, 5) or 99) < 3
    half_header = connect(server)
    half_header.sendall(b"POST /execute HTTP/1.1\r\nHost: x\r\n")
    assert (closed_within(half_header, 5) or 99) < 3

    content_type, body = call("def f():\n    return 4\n", "f").to_request()
    head = (f"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()

    trickle = connect(server)  # 20 bytes/s, under the minimum of 2000
    trickle.sendall(head)
    started = time.monotonic()
    response = b""
    for i in range(0, len(body), 10):
        try:
            trickle.sendall(body[i:i + 10])
        except (BrokenPipeError, ConnectionResetError):
            break
        time.sleep(0.5)
        if time.monotonic() - started > 5:
            break
    response = read_response(trickle)
    assert status_of(response) == 408, response[:300]
    assert b"slower than the server's minimum" in response
    assert time.monotonic() - started < 5

    stalled = connect(server)
    stalled.sendall(head + body[:100])
    assert status_of(read_response(stalled)) == 408

    padded = call("def f():\n    return 4\n", "f")
    padded.upload(kind="bytes", value=b"z" * 30000)
    content_type, body = padded.to_request()
    head = (f"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    steady = connect(server)  # about 10 KB/s over three seconds: over the minimum
    steady.sendall(head)
    step = max(1, len(body) // 12)
    for i in range(0, len(body), step):
        steady.sendall(body[i:i + step])
        time.sleep(0.25)
    response = read_response(steady)
    assert status_of(response) == 200 and b'"COMPLETED"' in response, response[:300]
    assert server.metric("kcoral_guard_events_total{event=\"slow_body\"}") == 2
    assert server.metric("kcoral_guard_events_total{event=\"header_timeout\"}") == 1
    assert server.metric("kcoral_guard_events_total{event=\"idle_timeout\"}") >= 1


# -- clients that go away ---------------------------------------------------------------------


def test_a_client_that_goes_away_has_its_program_dropped_or_killed(start_server):
    server = start_server("--num-workers", "1")

    def load() -> dict:
        return server.get("/health").json()["load"]

    def send_and_leave(program: Program) -> socket.socket:
        content_type, body = program.to_request()
        sock = connect(server)
        sock.sendall((f"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        return sock

    running = send_and_leave(call(SLEEPER, "f"))
    assert wait_until(lambda: load()["requests_in_progress"] == 1, 10)
    queued = send_and_leave(call("def f():\n    return 1\n", "f"))
    assert wait_until(lambda: load()["requests_waiting"] == 1, 10)
    queued.close()  # taken from the queue
    assert wait_until(lambda: load()["requests_waiting"] == 0, 5)
    assert load()["requests_in_progress"] == 1
    running.close()  # killed
    assert wait_until(lambda: load()["requests_in_progress"] == 0, 5)
    assert wait_until(lambda: server.metric("kcoral_execute_requests_total{outcome=\"abandoned\"}") == 2, 5)
    assert server.execute(call("def f():\n    return 5\n", "f")).raise_for_error()["out"] == 5


def test_a_request_sent_ahead_while_a_program_runs_is_served_after_it(start_server):
    server = start_server("--num-workers", "1")
    first = call("import time\ndef f():\n    time.sleep(0.5)\n    return 'first'\n", "f")
    requests = b""
    for program in (first, call("def f():\n    return 'second'\n", "f")):
        content_type, body = program.to_request()
        requests += (f"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    sock = connect(server, timeout_s=30)
    sock.sendall(requests[:len(requests) // 2])
    time.sleep(0.2)
    sock.sendall(requests[len(requests) // 2:] + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answers = read_response(sock)
    sock.close()
    assert answers.count(b"HTTP/1.1 200") == 3
    assert answers.index(b'"first"') < answers.index(b'"second"')


# -- shutdown ---------------------------------------------------------------------------------

SLEEPER = "import time\ndef f():\n    time.sleep(60)\n    return 'late'\n"


def run_in_background(server, program: Program) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        outcome["response"] = server.post(*program.to_request(), timeout_s=90)
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    assert wait_until(lambda: server.get("/health").json()["load"]["requests_in_progress"] == 1, 10)
    return thread, outcome


@pytest.mark.slow
def test_after_the_grace_running_programs_are_killed_and_answered_503(start_server):
    server = start_server("--num-workers", "1", "--shutdown-grace-seconds", "1")
    thread, outcome = run_in_background(server, call(SLEEPER, "f"))
    signalled = time.monotonic()
    server.signal(signal.SIGTERM)
    thread.join(30)
    response = outcome["response"]
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["kind"] == "busy" and "shutdown grace of 1 s" in error["message"]
    assert 0.9 < outcome["at"] - signalled < 10
    assert server.wait(30) == 0
    assert "grace is over" in server.stderr_text()


@pytest.mark.slow
def test_a_second_signal_stops_at_once(start_server):
    server = start_server("--num-workers", "1", "--shutdown-grace-seconds", "120")
    thread, outcome = run_in_background(server, call(SLEEPER, "f"))
    server.signal(signal.SIGTERM)
    time.sleep(0.5)
    signalled = time.monotonic()
    server.signal(signal.SIGINT)
    assert server.wait(10) == 0
    assert time.monotonic() - signalled < 5
    thread.join(30)
    response = outcome["response"]
    assert response.status_code == 503
    assert "second signal" in response.json()["error"]["message"]
    assert "again: stopping now" in server.stderr_text()


# -- access control ---------------------------------------------------------------------------


def test_a_token_file_closes_everything_but_health_to_requests_without_the_token(start_server, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("first-secret\n\n  second-secret  \n")
    tokens.chmod(0o600)
    server = start_server("--num-workers", "1", "--token-file", str(tokens))
    assert server.get("/health").status_code == 200
    program = call("def f():\n    return 6\n", "f")
    content_type, body = program.to_request()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic Zmlyc3Q="},
                    {"Authorization": "Bearer"}):
        refused = server.post(content_type, body, headers=headers)
        assert refused.status_code == 401, headers
        assert refused.json()["error"]["kind"] == "unauthorized"
        assert refused.headers["www-authenticate"].startswith("Bearer")
    assert server.request("GET", "/metrics").status_code == 401
    # Refused on the header, before a large body is read.
    sock = connect(server)
    sock.sendall(b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                 b"Content-Length: 200000000\r\n\r\n")
    assert status_of(read_response(sock)) == 401
    with pytest.raises(Unauthorized):
        server.execute(program)
    for token in ("first-secret", "second-secret"):
        with server.client(token=token) as client:
            assert client.execute(program).raise_for_error()["out"] == 6
    assert server.request("GET", "/metrics", headers={"Authorization": "Bearer first-secret"}).status_code == 200


def test_the_client_takes_its_token_from_kcoral_token(start_server, tmp_path, monkeypatch):
    tokens = tmp_path / "tokens"
    tokens.write_text("from-the-environment\n")
    tokens.chmod(0o644)
    server = start_server("--num-workers", "1", "--token-file", str(tokens))
    assert "readable by other users" in server.stderr_text()
    monkeypatch.setenv("KCORAL_TOKEN", "from-the-environment")
    assert server.execute(call("def f():\n    return 8\n", "f")).raise_for_error()["out"] == 8
