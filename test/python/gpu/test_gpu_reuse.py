"""Reused workers on a GPU server, checked between programs (--programs-per-worker N with
--reuse-check state, the default): a program that times a kernel with benchmark() leaves
its worker as it found it, so the next program of the tenant runs in the same worker. The
thread CUPTI starts in a worker's first benchmark(), for good, is benchmark()'s and not
counted as left behind. Each timing sees its kernel (0.5 ms long: a shorter one can fall
out of its call's window, benchmarks/gpu/results/2026-12-05-h100-timing-windows.md). Needs a GPU
(KCORAL_GPU_URL says there is one) and starts a server of its own (KCORAL_SERVER).
"""

from __future__ import annotations

import os
import sys

import pytest

from e2e.programs import call

pytestmark = pytest.mark.skipif(not os.environ.get("KCORAL_GPU_URL"), reason="needs a GPU: set KCORAL_GPU_URL")

PROGRAMS = """
import builtins

import torch
from kcoral.builtins import benchmark


def mark():
    seen = getattr(builtins, "kcoral_test_mark", 0)
    builtins.kcoral_test_mark = seen + 1
    return seen


def timed():
    seen = mark()
    report = benchmark(lambda: torch.cuda._sleep(1_000_000), {"warmup": 2, "repeat": 10})
    return [seen, report["activities"]]


def tensors():
    seen = mark()
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    return [seen, float((x * 2).sum().item())]
"""


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--device", "gpu", "--gpus", "0", "--workers-per-gpu", "1",
                               "--programs-per-worker", "100", "--python", sys.executable,
                               "--program-env", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}")


def retired(server) -> dict[str, float]:
    return {changed: server.metric(f'kcoral_workers_retired_total{{changed="{changed}"}}')
            for changed in ("threads", "descriptors", "environment", "imported modules", "GPU memory", "other")}


@pytest.mark.timeout(300)
def test_programs_that_time_kernels_share_their_worker(server):
    first = server.execute(call(PROGRAMS, "mark"), read_timeout_s=120).raise_for_error()["out"]
    before = retired(server)
    seen = [first]
    for name in ("timed", "timed", "tensors", "timed", "tensors"):
        answer = server.execute(call(PROGRAMS, name), read_timeout_s=120)
        assert answer.completed, (name, answer.error, answer.stderr)
        out = answer.results["out"]
        if name == "timed":
            assert out[1], out  # the kernel was seen
        seen.append(out[0])
    assert retired(server) == before, (retired(server), server.stderr_text()[-3000:])
    assert seen == list(range(first, first + 6)), seen  # one worker took them all


SHORT = """
import torch
from kcoral.builtins import benchmark


def short():
    report = benchmark(lambda: torch.cuda._sleep(20_000), {"warmup": 2, "repeat": 10})
    return [report["activities_per_call"], report["calls_with_other_activities"], report["latency_ms_median"],
            report["calls_told_apart_by"]]
"""


@pytest.mark.timeout(300)
def test_a_10_us_kernel_is_timed_alone_in_every_call_program_after_program(server):
    # Calls are told apart by the fences' marks on the GPU's timeline: neither the L2 flush
    # before a call nor the loss of its kernel, whatever the offset between CUPTI's records
    # and its clock in this worker (benchmarks/gpu/results/2026-12-05-h100-timing-windows.md).
    for _ in range(6):
        out = server.execute(call(SHORT, "short"), read_timeout_s=120).raise_for_error()["out"]
        assert out[:2] == [1, 0] and out[2] < 0.02 and out[3] == "marks", out
