"""benchmarks/load.py: its plan, and a small run of it against the real server.

The run is the benchmark in miniature (every request class, a few connections, a short
trickle): the script must finish, and a healthy server must answer every program.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "load.py"
spec = importlib.util.spec_from_file_location("load_benchmark", SCRIPT)
assert spec is not None and spec.loader is not None
load = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = load  # dataclasses look their module up there
spec.loader.exec_module(load)


def test_plan_keeps_the_mix_and_puts_slow_senders_early() -> None:
    mix = {"hit": 55, "miss": 15, "oversize": 10, "slow": 1, "disconnect": 19}
    jobs = load.plan(1003, mix, seed=7)
    assert [job.index for job in jobs] == list(range(1003))
    counts = Counter(job.cls for job in jobs)
    assert sum(counts.values()) == 1003
    assert counts["hit"] == 552 and counts["slow"] == 10
    assert Counter(job.kind for job in jobs if job.cls == "oversize") == {
        "content-length": 50, "chunked": 50}
    last_slow = max(job.index for job in jobs if job.cls == "slow")
    assert last_slow <= 0.75 * len(jobs)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_small_run_loses_nothing(tmp_path: Path) -> None:
    result = tmp_path / "load.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--programs", "120", "--connections", "12",
         "--slow-percent", "4", "--slow-seconds", "1", "--slow-bytes-per-second", "10",
         "--max-request-bytes", "65536", "--json", str(result)],
        capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(result.read_text())
    overall = results["summary"]["overall"]
    classes = results["summary"]["classes"]
    assert overall["sent"] == 120
    assert overall["lost"] == 0 and overall["duplicated"] == 0, classes
    assert classes["hit"]["outcomes"] == {"200 COMPLETED": classes["hit"]["sent"]}
    assert classes["miss"]["outcomes"] == {
        "200 CACHE_MISS -> 200 COMPLETED": classes["miss"]["sent"]}
    assert classes["oversize"]["outcomes"] == {
        "413 request_too_large": classes["oversize"]["sent"]}
    assert results["health"]["probes"] > 0 and results["health"]["failed"] == 0
    assert results["resources"]["front_fds_peak"] > 0
    assert results["resources"]["front_vmhwm"] >= results["resources"]["front_rss_before"]
    assert "answered" in done.stdout and "/health" in done.stdout
