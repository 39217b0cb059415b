"""Worker starts that fail, on a real server: a memory limit below what a worker holds when
it starts stops the server at start, naming --memory-limit-bytes and what to raise it to;
workers that keep dying before they are ready get programs answered `engine` at once with
why, not 503 at the queue timeout, until one starts again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.harness import Server, descendants, pids_with, server_binary, wait_until
from e2e.programs import call
from kcoral import EngineError

from adversarial.victim import assert_serves

pytestmark = pytest.mark.slow

MiB = 1 << 20


def test_a_memory_limit_below_what_a_worker_holds_stops_the_server_at_start(tmp_path):
    started_at = time.monotonic()
    started = subprocess.run([server_binary(), "--port", "0", "--work-root", str(tmp_path / "work"),
                              "--num-workers", "1", "--memory-limit-bytes", str(64 * MiB)],
                             capture_output=True, text=True, timeout=60)
    assert started.returncode != 0, started.stderr
    assert time.monotonic() - started_at < 20  # at once, not at the queue timeout of a first program
    assert "listening" not in started.stdout
    said = re.search(r"the workers did not start: .*--memory-limit-bytes is 64 MiB, but a worker already holds "
                     r"(\d+) MiB of address space .* raise it to at least (\d+) MiB \(--memory-limit-bytes (\d+)\)",
                     started.stderr)
    assert said, started.stderr
    held, at_least, in_bytes = map(int, said.groups())
    assert 64 < held < at_least and in_bytes == at_least * MiB
    assert not pids_with(str(tmp_path / "work"))


def is_worker(pid: int) -> bool:
    """Whether `pid` is a worker: the second process of a PID namespace of its own (its
    first is the namespace's init, which must live for the zygote to fork into it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    ids = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
    return len(ids) >= 2 and ids[-1] == "2"


def children(pid: int) -> list[int]:
    """The children of `pid`, from its threads' /proc children lists: a few small reads,
    where a walk of the whole process table (descendants()) takes long enough on a busy
    machine for a fast worker to become ready between two looks."""
    found = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


@contextlib.contextmanager
def workers_killed_as_they_start(server: Server) -> Iterator[None]:
    """Kills every worker process of `server` as soon as it shows, until the block ends.
    Workers are the worker parent's children (the parent is the server's); the parent is
    looked up again every so often, in case the server replaced it."""
    stop = threading.Event()

    def kill() -> None:
        parents: list[int] = []
        looked = 0.0
        while not stop.is_set():
            if time.monotonic() - looked > 0.5:
                parents, looked = [pid for pid, _ in descendants(server.pid)], time.monotonic()
            for pid in (child for parent in parents for child in children(parent)):
                if is_worker(pid):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.0005)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    try:
        yield
    finally:
        stop.set()
        killer.join()


def test_workers_that_keep_failing_to_start_get_programs_answered_at_once_with_why(start_server, tmp_path):
    log_dir = tmp_path / "log"
    server = start_server("--num-workers", "1", "--queue-timeout-seconds", "60", "--log-dir", str(log_dir))
    with workers_killed_as_they_start(server):
        # The worker already prepared goes first, then the first start fails: from then on
        # no worker lives to take the program.
        assert wait_until(lambda: server.metric('kcoral_worker_starts_total{outcome="failed"}') >= 1, 30)
        started = time.monotonic()
        with pytest.raises(EngineError, match=r"no worker can start on this server: its last \d+ worker starts "
                                              r"failed, the latest with: a worker exited before it became ready"):
            server.execute(call("def f():\n    return 1\n", "f"))
        assert time.monotonic() - started < 15  # three starts and their back-off, not the queue timeout
        assert server.metric('kcoral_worker_starts_total{outcome="failed"}') >= 3
        assert server.metric("kcoral_worker_starts_failing") == 1
    # The next worker that starts ends it.
    assert wait_until(lambda: server.metric("kcoral_worker_starts_failing") == 0, 30)
    assert_serves(server)
    lines = [json.loads(line) for line in (log_dir / "events.jsonl").read_text().splitlines()]
    failures = [line for line in lines if line.get("event") == "worker_start_failed"]
    assert len(failures) >= 3 and max(line["failures_in_row"] for line in failures) >= 3, failures
    assert failures[0]["message"].startswith("a worker exited before it became ready"), failures[0]
    assert failures[0]["outcome"] == "failed" and failures[0]["gpu"] is None
    refused = [line for line in lines if line.get("outcome") == "error"]
    assert refused and refused[0]["http_status"] == 500 and refused[0]["error"]["kind"] == "engine", refused
    assert "failed to start (3 in a row)" in server.stderr_text()
