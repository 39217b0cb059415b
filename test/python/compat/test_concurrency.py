"""Both clients at once on one server: every program of each still completes.

The reference client runs in a subprocess (``reference_driver.py --repeat``) while threads
of our client run the same trivial program beside it, so the server has more requests
than workers throughout. On our server the threads go on, after the reference client is
done, until a program fails or :data:`OUR_BUDGET` programs or seconds have passed: a fault
that hits one request in a few hundred then shows almost surely (at 1 in 250, the chance
of 5000 clean programs is about 2e-9).
"""

from __future__ import annotations

import collections
import json
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import kcoral
from harness import normalize_exception, normalize_result  # type: ignore[import-not-found]
from cases import CASES_BY_NAME, make_context  # type: ignore[import-not-found]

pytestmark = pytest.mark.timeout(900)

HERE = Path(__file__).resolve().parent
OUR_THREADS = 3
# Programs of the reference client; the reference server is far slower per program.
REPEATS = {"ours": 100, "reference": 15}
# Programs (all threads together) and seconds our client goes on for, at most.
OUR_BUDGET = {"ours": (1500, 120.0), "reference": (30, 300.0)}


COMPLETED = "COMPLETED None None"


def _summary(outcome: dict[str, Any]) -> str:
    if "raised" in outcome:
        return f"raised {outcome}"
    error = outcome.get("error") or {}
    return f"{outcome['status']} {error.get('kind')} {error.get('message')}"


@pytest.mark.parametrize("server", ["ours", "reference"])
def test_concurrent_clients(server: str, servers: Any, reference_python: Path) -> None:
    url, repeats = servers[server].url, REPEATS[server]
    case = CASES_BY_NAME["trivial"]
    driver = subprocess.Popen(
        [reference_python, HERE / "reference_driver.py", "--url", url,
         "--nonce", uuid.uuid4().hex, "--repeat", str(repeats), case.name],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)
    seen: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    budget, seconds = OUR_BUDGET[server]
    deadline = time.monotonic() + seconds
    sent = [0]
    failed = threading.Event()

    def our_client() -> None:
        with tempfile.TemporaryDirectory() as scratch, \
                kcoral.Client(url, read_timeout_seconds=90) as client:
            program = case.build(kcoral.Program, make_context("concurrency", scratch))
            while True:
                with lock:
                    if failed.is_set() or sent[0] >= budget or time.monotonic() > deadline:
                        return
                    sent[0] += 1
                try:
                    outcome = normalize_result(client.execute(program, timeout_seconds=30))
                except Exception as error:  # noqa: BLE001 - counted like any outcome
                    outcome = normalize_exception(error)
                summary = _summary(outcome)
                with lock:
                    seen["ours: " + summary] += 1
                if summary != COMPLETED:
                    failed.set()

    threads = [threading.Thread(target=our_client) for _ in range(OUR_THREADS)]
    for thread in threads:
        thread.start()
    try:
        stdout, stderr = driver.communicate(timeout=600)
    finally:
        for thread in threads:
            thread.join(timeout=600)
        if driver.poll() is None:
            driver.kill()
    for line in stdout.splitlines():
        seen["reference: " + _summary(json.loads(line)["outcome"])] += 1

    total = sent[0] + repeats
    if sum(seen.values()) != total:  # not the bug: the test itself went wrong
        raise RuntimeError(f"expected {total} outcomes: {dict(seen)}\n{stderr[-2000:]}")
    failures = {summary: count for summary, count in seen.items()
                if summary.split(": ", 1)[1] != COMPLETED}
    assert not failures, f"of {total} programs: {failures}"
