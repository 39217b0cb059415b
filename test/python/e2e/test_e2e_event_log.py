"""The event log: one JSON line per POST /execute under --log-dir, rotated by size.

Every kind of answer is logged once with its request id: a completed and a failed
program, a cache miss, a malformed request, a body over the limit (refused before the
router), and a program whose client went away. Rotation keeps --log-files files. With
--token-file, requests that show no accepted token are logged to anonymous.jsonl, rotated
on its own, so that they cannot push the clients' lines out of events.jsonl. Lines are
ASCII: a client's U+2028, U+2029 or U+0085 cannot split one for a line-oriented reader.
"""

from __future__ import annotations

import json
import socket
import time
import uuid

from kcoral import Program

from e2e.harness import wait_until
from e2e.programs import call


def events(directory) -> list[dict]:
    lines = []
    for path in sorted(directory.glob("events.jsonl*"), reverse=True):
        lines += [json.loads(line) for line in path.read_text().splitlines()]
    return lines


def post(server, program: Program, **options) -> tuple[str, int]:
    request_id = str(uuid.uuid4())
    content_type, body = program.to_request(**options)
    response = server.post(content_type, body, headers={"X-Request-ID": request_id})
    return request_id, response.status_code


def test_each_request_is_one_line_with_its_outcome_shape_and_timings(start_server, tmp_path):
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", "1", "--log-dir", str(log_dir), "--max-request-bytes", "100000")
    completed, _ = post(server, call("def f(x):\n    return x + 1\n", "f", 1))
    failed, _ = post(server, call("def f():\n    raise ValueError('no')\n", "f"))
    blob = Program()
    blob.return_(key="b", value=blob.upload(kind="bytes", value=b"never sent before"))
    request_id = str(uuid.uuid4())
    content_type, body = blob.to_request(set())
    assert server.post(content_type, body, headers={"X-Request-ID": request_id}).json()["status"] == "CACHE_MISS"
    rejected = str(uuid.uuid4())
    assert server.post("multipart/form-data; boundary=x", b"nonsense",
                       headers={"X-Request-ID": rejected}).status_code == 400
    too_large = str(uuid.uuid4())
    big = Program()
    big.return_(key="b", value=big.upload(kind="bytes", value=b"x" * 200_000))
    assert server.post(*big.to_request(), headers={"X-Request-ID": too_large}).status_code == 413

    sock = socket.create_connection((server.host, server.port))
    content_type, body = call("import time\ndef f():\n    time.sleep(30)\n", "f").to_request()
    sock.sendall((f"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    assert wait_until(lambda: server.get("/health").json()["load"]["requests_in_progress"] == 1, 10)
    sock.close()

    assert wait_until(lambda: len(events(log_dir)) == 6, 10), events(log_dir)
    by_id = {event["request_id"]: event for event in events(log_dir)}
    assert by_id[completed]["outcome"] == "completed" and by_id[completed]["error"] is None
    assert by_id[completed]["program"]["ops"] == {"upload": 1, "get_function": 1, "run": 1, "return": 1}
    assert by_id[completed]["timings"]["elapsed_ms"] > 0
    assert by_id[failed]["outcome"] == "failed" and by_id[failed]["error"]["kind"] == "runtime"
    assert "no" in by_id[failed]["error"]["message"]
    assert by_id[request_id]["outcome"] == "cache_miss" and by_id[request_id]["program"]["blobs"] == 1
    assert by_id[rejected]["outcome"] == "rejected" and by_id[rejected]["program"] is None
    assert by_id[too_large]["outcome"] == "too_large" and by_id[too_large]["http_status"] == 413
    abandoned = [e for e in by_id.values() if e["outcome"] == "abandoned"]
    assert len(abandoned) == 1 and abandoned[0]["client"].startswith("127.0.0.1:")
    for event in by_id.values():
        assert event["time"].endswith("Z") and event["request_bytes"] >= 0


def test_the_log_rotates_by_size_and_keeps_its_files(start_server, tmp_path):
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", "1", "--log-dir", str(log_dir), "--log-max-bytes", "1500",
                          "--log-files", "3")
    sent = [post(server, call("def f():\n    return 1\n", "f"))[0] for _ in range(20)]
    time.sleep(0.2)
    files = sorted(path.name for path in log_dir.iterdir())
    assert files == ["events.jsonl", "events.jsonl.1", "events.jsonl.2"]
    for path in log_dir.iterdir():
        assert path.stat().st_size <= 1500
    logged = [event["request_id"] for event in events(log_dir)]
    assert logged == sent[-len(logged):]  # the newest, in order, none twice


def lines_of(directory, name: str) -> list[bytes]:
    """The lines of every file of one log, oldest first, split on newlines alone."""
    lines = []
    for path in sorted(directory.glob(f"{name}*"), reverse=True):
        lines += path.read_bytes().split(b"\n")[:-1]
    return lines


def test_requests_without_an_accepted_token_cannot_rotate_the_clients_lines_away(start_server, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("the-secret\n")
    tokens.chmod(0o600)
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", "1", "--token-file", str(tokens), "--log-dir", str(log_dir),
                          "--log-max-bytes", "4000", "--log-files", "2")
    authorized = {"Authorization": "Bearer the-secret"}
    content_type, body = call("def f():\n    return 1\n", "f").to_request()

    def real_client() -> str:
        request_id = str(uuid.uuid4())
        response = server.post(content_type, body, headers={"X-Request-ID": request_id, **authorized})
        assert response.json()["status"] == "COMPLETED"
        return request_id

    first = real_client()
    for i in range(800):
        if i % 4 == 3:  # malformed before any token is looked at
            with socket.create_connection((server.host, server.port), timeout=10) as sock:
                sock.sendall(b"POST /execute HTTP/1.1\r\nHost: x\r\nno colon in this field\r\n\r\n")
                assert sock.recv(100).startswith(b"HTTP/1.1 400")
        else:
            headers = [{}, {"Authorization": "Bearer a-guess"}, {"Authorization": "Basic eDp5"}][i % 4]
            assert server.post(content_type, body, headers=headers).status_code == 401
    last = real_client()

    logged = [json.loads(line) for line in lines_of(log_dir, "events.jsonl")]
    logged_ids = [event["request_id"] for event in logged]
    assert first in logged_ids, f"the client's line was rotated out; events.jsonl holds {len(logged_ids)} lines"
    assert logged_ids == [first, last]
    assert not (log_dir / "events.jsonl.1").exists()
    anonymous = [json.loads(line) for line in lines_of(log_dir, "anonymous.jsonl")]
    assert anonymous and {event["outcome"] for event in anonymous} == {"unauthorized", "rejected"}
    assert sorted(path.name for path in log_dir.iterdir()) == [
        "anonymous.jsonl", "anonymous.jsonl.1", "events.jsonl"]
    assert all(path.stat().st_size <= 4000 for path in log_dir.iterdir())
    metrics = server.request("GET", "/metrics", headers=authorized).text
    assert 'kcoral_execute_requests_total{outcome="unauthorized"} 600' in metrics


def test_line_separators_in_a_clients_text_are_escaped_and_each_line_is_json(start_server, tmp_path):
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", "1", "--log-dir", str(log_dir))
    separators = "a\u2028b\u2029c\u0085d"
    # The failure's message is the client's text, written into the line.
    failed, _ = post(server, call(f"def f():\n    raise ValueError({separators!r})\n", "f"))
    assert wait_until(lambda: (log_dir / "events.jsonl").exists() and
                      (log_dir / "events.jsonl").stat().st_size > 0, 10)
    raw = (log_dir / "events.jsonl").read_bytes()
    for encoded in ("\u2028", "\u2029", "\u0085"):
        assert encoded.encode() not in raw, f"{encoded!r} written raw"
    assert raw.isascii()
    lines = raw.split(b"\n")[:-1]
    assert len(raw.decode().splitlines()) == len(lines) == 1  # no reader finds more lines
    event = json.loads(lines[0])
    assert event["request_id"] == failed and event["outcome"] == "failed"
    assert separators in event["error"]["message"]
