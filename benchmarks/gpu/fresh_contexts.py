"""What each way of making fresh CUDA state cheaper gives, and what it costs multi-stream timing.

    python benchmarks/gpu/fresh_contexts.py --server LABEL=URL [--server LABEL=URL ...] [--json OUT]

For each GPU server (each started with other settings: CUDA's connections, contexts made at
once, ...), in the same run:
- fresh programs per second: a trivial GPU program from 8 concurrent clients (as
  gpu_checks.py's throughput), with the median lease held, elapsed and queue times;
- a two-stream benchmark(): on stream 1 kernels A1 then B1, on stream 2 A2 then B2, issued
  in that order, each kernel a ~2 ms spin of one thread (torch.cuda._sleep). With CUDA's
  eight hardware queues the streams run side by side, about 4 ms a call; with fewer
  queues, A2 waits behind B1 and the call takes longer. That is what such a setting
  changes in what a user's multi-stream code measures. Median and p90 over 5 programs.
Prints a Markdown table; --json writes the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from kcoral import Client, Program

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_checks import throughput  # noqa: E402

TWO_STREAMS = """
import torch
from kcoral.builtins import benchmark

CYCLES = 4_000_000  # about 2 ms at the H200's clock


def two_streams():
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()

    def call():
        with torch.cuda.stream(first):
            torch.cuda._sleep(CYCLES)
            torch.cuda._sleep(CYCLES)
        with torch.cuda.stream(second):
            torch.cuda._sleep(CYCLES)
            torch.cuda._sleep(CYCLES)

    def one_kernel():
        torch.cuda._sleep(CYCLES)

    return {"two_streams": benchmark(call, {"warmup": 3, "repeat": 20, "flush_l2": False}),
            "one_kernel": benchmark(one_kernel, {"warmup": 3, "repeat": 20, "flush_l2": False})}
"""


def two_stream_timing(url: str, programs: int = 5) -> dict[str, Any]:
    program = Program()
    module = program.upload(id="m", kind="module", source=TWO_STREAMS)
    function = program.get_function(id="f", module=module, name="two_streams")
    program.return_(key="out", value=program.run(id="out", fn=function))
    both, single = [], []
    with Client(url) as client:
        for _ in range(programs):
            result = client.execute(program, timeout_seconds=120).raise_for_error()
            both.append(result.results["out"]["two_streams"]["latency_ms_median"])
            single.append(result.results["out"]["one_kernel"]["latency_ms_median"])
    return {"two_streams_ms_median": statistics.median(both), "two_streams_ms_max": max(both),
            "one_kernel_ms_median": statistics.median(single),
            "ratio": statistics.median(both) / statistics.median(single)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", action="append", required=True, metavar="LABEL=URL")
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput time per server")
    parser.add_argument("--processes", type=int, default=1,
                        help="client processes of 8 threads each for the throughput (default 1)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    rows: dict[str, Any] = {}
    for entry in args.server:
        label, _, url = entry.partition("=")
        row: dict[str, Any] = {"url": url}
        try:
            row["throughput"] = throughput(url, seconds=args.seconds, processes=args.processes)
            row["streams"] = two_stream_timing(url)
        except Exception as error:  # one server's failure is a row, not the end of the run
            row["error"] = f"{type(error).__name__}: {error}"
        rows[label] = row
        print(f"{label}: {row}", file=sys.stderr, flush=True)
    print("| server | fresh programs/s | lease held ms | queue ms | two streams ms (median, max) "
          "| one kernel ms | two streams / one kernel |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, row in rows.items():
        if "error" in row:
            print(f"| {label} | {row['error']} | | | | | |")
            continue
        t, s = row["throughput"], row["streams"]
        print(f"| {label} | {t['programs_per_second']:.2f} | {t['lease_held_ms_median']:.1f} "
              f"| {t['queue_ms_median']:.1f} | {s['two_streams_ms_median']:.2f}, {s['two_streams_ms_max']:.2f} "
              f"| {s['one_kernel_ms_median']:.2f} | {s['ratio']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
