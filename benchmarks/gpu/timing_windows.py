"""Whether benchmark() sees each call's own activity, program after program, in one worker.

    python benchmarks/gpu/timing_windows.py URL LABEL

Sends ten programs in a row to the GPU server at URL (started with --workers-per-gpu 1, and
--programs-per-worker N for reused workers): timings of a ~10 us and a ~2 ms kernel
(torch.cuda._sleep), with programs that run torch kernels untimed between them. For each
timing it prints [activities per call, calls with other activities, calls, median ms, how the
calls were told apart ("marks" or "windows"; a server without marks: "windows")]. A
faithful timing of one kernel reads [1, 0, 10, ...]; a call window that lost its kernel, or
took in the L2 flush before it, shows as calls with other activities and a longer median.
"""

from __future__ import annotations

import argparse

from kcoral import Client, Program

SOURCE = r'''
import torch
from kcoral.builtins import benchmark


def summary(report):
    return [report["activities_per_call"], report["calls_with_other_activities"], report["repeat"],
            round(report["latency_ms_median"], 4), report.get("calls_told_apart_by", "windows")]


def timed(cycles, times):
    out = []
    for _ in range(times):
        try:
            out.append(summary(benchmark(lambda: torch.cuda._sleep(cycles), {"warmup": 2, "repeat": 10})))
        except Exception as error:  # a timing that saw no activity at all
            out.append(str(error)[:80])
    return out


def tensors():
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    return float((x * 2).sum().item())
'''

# (function, args...): ~10 us is 20,000 cycles, ~2 ms 4,000,000.
STEPS = [("timed", 20_000, 1), ("timed", 20_000, 1), ("tensors",), ("timed", 20_000, 1),
         ("timed", 4_000_000, 1), ("tensors",), ("timed", 20_000, 3), ("timed", 4_000_000, 2), ("tensors",),
         ("timed", 20_000, 1)]


def program(name: str, *args: int) -> Program:
    built = Program()
    module = built.upload(id="m", kind="module", source=SOURCE)
    function = built.get_function(id="f", module=module, name=name)
    built.return_(key="out", value=built.run(id="r", fn=function, args=list(args)))
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("label")
    options = parser.parse_args()
    with Client(options.url) as client:
        for name, *args in STEPS:
            result = client.execute(program(name, *args), timeout_seconds=120)
            out = result.results["out"] if result.completed else result.error.message[:100]
            print(options.label, (name, *args), out, flush=True)


if __name__ == "__main__":
    main()
