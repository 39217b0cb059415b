"""Tenants kept apart: attacks of one tenant on another, against a real server whose token
file names two, alice and bob. Each attack runs while the other tenant's program runs
beside it and must complete with its own result.

- Bob names alice's digest without sending the blob: CACHE_MISS, and his program never
  runs with her bytes. The CACHE_MISS is no oracle: of 10,000 guesses at alice's PIN, all
  are missing alike, the right one too; so after a restart on the same --disk-cache-dir,
  where alice's blob is still hers. A bare token's blobs are its token's, not its line's:
  revoked, and its line taken by another token, they are still no one else's.
- Alice queues ten programs of 5 s: bob's trivial program starts when the next worker
  comes free, not after all of them.
- Past --max-queued-per-tenant and --max-inflight-bytes-per-tenant, a tenant's next request
  is 503 busy with Retry-After and a message saying what to do; the other tenant is served.
- A tenant keeping idle connections holds at most half of --max-connections; the other
  tenant still connects and is served.
- /metrics and the event log name each tenant as the token file does, and never show a
  token; neither does the server's own output.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import secrets
import threading
import time
from pathlib import Path

import pytest
from e2e.harness import Server, wait_until
from e2e.programs import call, response_document
from kcoral import Program

from adversarial.victim import victim_beside

pytestmark = pytest.mark.slow

MiB = 1 << 20
ALICE = secrets.token_urlsafe(24)
BOB = secrets.token_urlsafe(24)

SLEEP = r'''
import time

def sleep(seconds, data=b""):
    time.sleep(seconds)
    return len(data)
'''


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tenants") / "tokens"
    path.write_text(f"alice {ALICE}\nbob\t{BOB}\n")
    path.chmod(0o600)
    return path


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def metric(server: Server, name: str, token: str = ALICE) -> float:
    """One sample of /metrics, read with `token` (alice's)."""
    for line in server.request("GET", "/metrics", headers=auth(token)).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def tenant_metric(server: Server, name: str, tenant: str) -> float:
    return metric(server, f'{name}{{tenant="{tenant}"}}')


def sleeping(seconds: float, data: bytes = b"") -> Program:
    program = Program()
    module = program.upload(id="m", kind="module", source=SLEEP)
    fn = program.get_function(id="f", module=module, name="sleep")
    args: list = [seconds]
    if data:
        args.append(program.upload(id="data", kind="bytes", value=data))
    program.return_(key="out", value=program.run(id="r", fn=fn, args=args))
    return program


def echo(data: bytes) -> Program:
    program = Program()
    program.return_(key="data", value=program.upload(id="data", kind="bytes", value=data))
    return program


def pin_guesses() -> tuple[Program, list[str]]:
    """Bob's program naming 10,000 blobs, one per PIN alice may have uploaded, and their
    digests in its order; it is sent without them."""
    program = Program()
    digests = []
    for pin in range(10_000):
        guess = f"alice's PIN: {pin:04d}".encode()
        program.upload(id=f"g{pin}", kind="bytes", value=guess)
        digests.append(hashlib.sha256(guess).hexdigest())
    return program, digests


def assert_guesses_all_miss(server: Server) -> None:
    program, digests = pin_guesses()
    content_type, body = program.to_request(set())
    started = time.monotonic()
    response = server.post(content_type, body, headers=auth(BOB))
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["status"] == "CACHE_MISS"
    # Every guess is missing, in the program's order: the right one tells nothing apart.
    assert document["missing_blobs"] == digests
    assert time.monotonic() - started < 30


def assert_names_not_tokens(server: Server, log_dir: Path, names: set[str]) -> None:
    """/metrics, the event log and the server's output show tenant names, never a token."""
    metrics = server.request("GET", "/metrics", headers=auth(BOB)).text
    for name in names:
        assert f'kcoral_tenant_execute_requests_total{{tenant="{name}",outcome="completed"}}' in metrics
    logged = {json.loads(line)["tenant"] for path in log_dir.glob("events.jsonl*")
              for line in path.read_text().splitlines()}
    assert names <= logged, logged
    assert logged <= {"alice", "bob"}, logged
    for text in [metrics, server.stderr_text(), "".join(server.stdout_lines),
                 *(path.read_text() for path in log_dir.iterdir() if path.is_file())]:
        assert ALICE not in text and BOB not in text


def test_another_tenants_digest_is_a_cache_miss_and_no_oracle_across_a_restart(start_server, token_file,
                                                                              tmp_path):
    cache, log_dir = tmp_path / "blobs", tmp_path / "log"
    flags = ("--num-workers", "2", "--token-file", str(token_file), "--disk-cache-dir", str(cache),
             "--log-dir", str(log_dir))
    secret = f"alice's PIN: {secrets.randbelow(10_000):04d}".encode()
    digest = hashlib.sha256(secret).hexdigest()
    first = start_server(*flags)
    with first.client(token=ALICE) as alice:
        assert alice.execute(echo(secret)).raise_for_error()["data"] == secret
    with victim_beside(first, token=ALICE):
        # Bob names her digest alone, without the blob: asked for it, nothing ran.
        content_type, body = echo(secret).to_request(set())
        answer = first.post(content_type, body, headers=auth(BOB)).json()
        assert (answer["status"], answer["missing_blobs"]) == ("CACHE_MISS", [digest])
        assert_guesses_all_miss(first)
    assert wait_until(lambda: metric(first, "kcoral_disk_cache_blobs") >= 2, 10)  # hers, and the victim's
    assert_names_not_tokens(first, log_dir, {"alice"})
    assert first.stop() == 0

    second = start_server(*flags)
    with victim_beside(second, token=ALICE):
        assert_guesses_all_miss(second)
    # Alice's blob survived the restart as hers: sent without it, her program runs.
    content_type, body = echo(secret).to_request(set())
    document, parts = response_document(second.post(content_type, body, headers=auth(ALICE)))
    assert document["status"] == "COMPLETED"
    assert parts[document["results"]["data"]["part"]] == secret
    assert metric(second, 'kcoral_tenant_execute_requests_total{tenant="bob",outcome="cache_miss"}') == 1
    # Bob's own upload of the same bytes runs, as his.
    with second.client(token=BOB) as bob:
        assert bob.execute(echo(secret)).raise_for_error()["data"] == secret


def test_a_revoked_bare_tokens_blobs_go_to_no_tenant_that_takes_its_line(start_server, tmp_path):
    """Bare tokens' tenants are shown by their lines (tenant-1, tenant-2), which move when a
    line is removed; their blobs on disk are kept under their tokens. The first token is
    revoked and the server restarted on the same --disk-cache-dir: the second, now on line
    1, names the first one's digest and gets CACHE_MISS. (Kept under tenant-1, it used to
    get the revoked tenant's bytes.)"""
    first_token, second_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    tokens, cache = tmp_path / "tokens", tmp_path / "blobs"
    tokens.write_text(f"{first_token}\n{second_token}\n")
    tokens.chmod(0o600)
    flags = ("--num-workers", "1", "--token-file", str(tokens), "--disk-cache-dir", str(cache))
    secret = f"the first tenant's PIN: {secrets.randbelow(10_000):04d}".encode()
    before = start_server(*flags)
    with before.client(token=first_token) as first:
        assert first.execute(echo(secret)).raise_for_error()["data"] == secret
    assert wait_until(lambda: metric(before, "kcoral_disk_cache_blobs", first_token) >= 1, 10)
    assert before.stop() == 0

    tokens.write_text(f"{second_token}\n")  # the first revoked: the second is on line 1
    after = start_server(*flags)
    content_type, body = echo(secret).to_request(set())
    answer = after.post(content_type, body, headers=auth(second_token)).json()
    assert (answer["status"], answer["missing_blobs"]) == ("CACHE_MISS", [hashlib.sha256(secret).hexdigest()])
    with after.client(token=second_token) as second:  # its own upload of the same bytes runs
        assert second.execute(echo(secret)).raise_for_error()["data"] == secret


ALICE_PROGRAMS = 10
ALICE_SECONDS = 5.0
WORKERS = 3


def test_one_tenants_ten_queued_programs_do_not_make_the_other_wait_behind_them(start_server, token_file,
                                                                               tmp_path):
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", str(WORKERS), "--token-file", str(token_file),
                          "--queue-timeout-seconds", "120", "--log-dir", str(log_dir))
    results: list = []

    def alice_runs() -> None:
        with server.client(120, token=ALICE) as alice:
            results.append(alice.execute(sleeping(ALICE_SECONDS)))

    threads = [threading.Thread(target=alice_runs) for _ in range(ALICE_PROGRAMS)]
    for thread in threads:
        thread.start()
    waiting = ALICE_PROGRAMS - WORKERS
    assert wait_until(lambda: tenant_metric(server, "kcoral_tenant_queue_depth", "alice") == waiting, 20)
    with victim_beside(server, token=BOB):
        with server.client(120, token=BOB) as bob:
            trivial = bob.execute(call("def f():\n    return 'mine'\n", "f"))
        assert trivial.raise_for_error()["out"] == "mine"
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == ALICE_PROGRAMS and all(r.status == "COMPLETED" for r in results)
    # Alice's programs take 10 x 5 s / 3 workers to run; bob's waited for one worker to come
    # free (behind his own victim's turn), not for them (first come, first served: ~14 s).
    alices_ms = ALICE_PROGRAMS * ALICE_SECONDS * 1000 / WORKERS
    assert trivial.queue_ms < ALICE_SECONDS * 1000 + 3000 < alices_ms / 2, trivial.queue_ms
    assert max(r.queue_ms for r in results) > ALICE_SECONDS * 1000  # hers did wait for each other
    waited = {name: tenant_metric(server, "kcoral_tenant_queue_wait_seconds_total", name) for name in ("alice", "bob")}
    assert waited["bob"] < waited["alice"] / 2, waited
    assert_names_not_tokens(server, log_dir, {"alice", "bob"})


def test_a_tenant_past_its_queued_programs_is_refused_503_and_the_other_is_served(start_server, token_file,
                                                                                 tmp_path):
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", "1", "--token-file", str(token_file), "--max-queued-per-tenant", "2",
                          "--log-dir", str(log_dir))
    done: list = []

    def alice_runs(seconds: float) -> None:
        with server.client(120, token=ALICE) as alice:
            done.append(alice.execute(sleeping(seconds)))

    threads = [threading.Thread(target=alice_runs, args=(seconds,)) for seconds in (4, 0, 0)]
    for thread in threads:
        thread.start()
        time.sleep(0.2)
    assert wait_until(lambda: tenant_metric(server, "kcoral_tenant_queue_depth", "alice") == 2, 10)
    with victim_beside(server, seconds=1, token=BOB):
        content_type, body = sleeping(0).to_request()
        refused = server.post(content_type, body, headers=auth(ALICE))
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"
        error = refused.json()["error"]
        assert error["kind"] == "busy"
        assert "you have 2 programs waiting" in error["message"]
        assert "--max-queued-per-tenant" in error["message"]
    for thread in threads:
        thread.join(timeout=60)
    assert len(done) == 3 and all(r.status == "COMPLETED" for r in done)
    assert metric(server, 'kcoral_guard_events_total{event="tenant_queue_full"}') == 1
    assert metric(server, 'kcoral_tenant_execute_requests_total{tenant="alice",outcome="busy"}') == 1
    assert metric(server, 'kcoral_tenant_execute_requests_total{tenant="bob",outcome="busy"}') == 0
    assert_names_not_tokens(server, log_dir, {"alice", "bob"})


def test_a_tenant_past_its_inflight_bytes_is_refused_503_and_the_other_is_served(start_server, token_file,
                                                                                tmp_path):
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", "3", "--token-file", str(token_file),
                          "--max-request-bytes", str(16 * MiB), "--max-inflight-bytes", str(64 * MiB),
                          "--max-inflight-bytes-per-tenant", str(20 * MiB), "--log-dir", str(log_dir))
    held: list = []

    def alice_holds() -> None:  # 12 MiB held while her program sleeps
        content_type, body = sleeping(4, os.urandom(12 * MiB)).to_request()
        held.append(server.post(content_type, body, headers=auth(ALICE), timeout_s=60))

    holder = threading.Thread(target=alice_holds)
    holder.start()
    assert wait_until(lambda: tenant_metric(server, "kcoral_tenant_inflight_bytes", "alice") >= 12 * MiB, 20)
    with victim_beside(server, seconds=2, token=BOB):
        content_type, body = sleeping(0, os.urandom(12 * MiB)).to_request()
        refused = server.post(content_type, body, headers=auth(ALICE))
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert "--max-inflight-bytes-per-tenant" in refused.json()["error"]["message"]
        # Bob's as large request fits his own part, and the server's budget.
        content_type, body = sleeping(0, os.urandom(12 * MiB)).to_request()
        served = server.post(content_type, body, headers=auth(BOB))
        assert served.status_code == 200, served.text
    holder.join(timeout=60)
    assert held and held[0].status_code == 200
    assert metric(server, 'kcoral_guard_events_total{event="tenant_inflight_full"}') == 1
    assert wait_until(lambda: tenant_metric(server, "kcoral_tenant_inflight_bytes", "alice") == 0, 10)
    assert_names_not_tokens(server, log_dir, {"alice", "bob"})


def test_one_tenant_cannot_hold_every_connection(start_server, token_file):
    """Only connections without a token had limits of their own: alice, keeping 16 idle
    keep-alive connections after one request each, held every slot of a server of 16, and
    bob's program was refused 503 "too many connections" until her idle timeout. A tenant
    now holds at most half of them (with two or more tenants)."""
    server = start_server("--num-workers", "1", "--token-file", str(token_file), "--max-connections", "16")
    held: list[http.client.HTTPConnection] = []
    refused: list[str] = []
    try:
        for _ in range(16):
            connection = http.client.HTTPConnection(server.host, server.port, timeout=30)
            connection.request("GET", "/metrics", headers=auth(ALICE))
            answer = connection.getresponse()
            text = answer.read().decode()
            if answer.status == 200:
                held.append(connection)
                continue
            assert answer.status == 503, text
            refused.append(json.loads(text)["error"]["message"])
            connection.close()
        assert len(held) == 8
        assert len(refused) == 8 and all("--max-connections-per-tenant" in message for message in refused)
        with server.client(token=BOB) as bob:
            assert bob.execute(sleeping(0, b"bob's")).raise_for_error()["out"] == 5
        assert metric(server, 'kcoral_guard_events_total{event="tenant_connections_full"}', BOB) == 8
    finally:
        for connection in held:
            with contextlib.suppress(OSError):
                connection.close()


def test_metrics_and_the_event_log_name_tenants_and_never_show_a_token(start_server, token_file, tmp_path):
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", "2", "--token-file", str(token_file), "--log-dir", str(log_dir))
    with victim_beside(server, token=BOB):
        with server.client(token=ALICE) as alice:
            assert alice.execute(echo(b"alice's")).raise_for_error()["data"] == b"alice's"
        assert server.post(*echo(b"x").to_request(), headers=auth("a guess")).status_code == 401
    assert wait_until(lambda: len(list((log_dir / "events.jsonl").read_text().splitlines())) >= 3, 10)
    lines = [json.loads(line) for line in (log_dir / "events.jsonl").read_text().splitlines()]
    assert {line["tenant"] for line in lines} == {"alice", "bob"}
    anonymous = [json.loads(line) for line in (log_dir / "anonymous.jsonl").read_text().splitlines()]
    assert [line["tenant"] for line in anonymous] == [None]
    assert metric(server, 'kcoral_tenant_execute_requests_total{tenant="alice",outcome="completed"}') == 1
    assert metric(server, 'kcoral_tenant_execute_requests_total{tenant="bob",outcome="completed"}') == 1
    assert "tenants (alice, bob)" in server.stderr_text()
    assert_names_not_tokens(server, log_dir, {"alice", "bob"})
