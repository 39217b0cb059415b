"""The event log: one JSON line per POST /execute under --log-dir, rotated by size.

Every kind of answer is logged once with its request id: a completed and a failed
program, a cache miss, a malformed request, a body over the limit (refused before the
router), and a program whose client went away. Rotation keeps --log-files files.
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
