"""The measured half of the GPU check: timing fidelity, throughput and lease handoff.

    python benchmarks/gpu/gpu_checks.py --fresh URL --reused URL [--fresh-variant LABEL=URL ...]
                                        --raw-cupti PATH --json OUT

Against a GPU server whose workers are fresh per program (--fresh) and one whose workers
run many programs (--reused), it measures:
- benchmark() medians of an add_one kernel (256 floats, and 32 Mi floats, bandwidth-bound
  at about 50 us) against the raw CUPTI duration of the same kernel measured by
  raw_cupti (benchmarks/gpu/raw_cupti.cu), each over several processes, and a call of
  three such kernels against the sum of its parts;
- programs per second for a trivial GPU program from 8 concurrent clients, on both servers
  and on fresh-worker servers with other settings (--fresh-variant);
- the lease handoff between two queued programs.
It prints a Markdown table and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import threading
import time
from typing import Any

import numpy as np

from kcoral import Client, Program

KERNEL = r"""
import tvm_ffi.cpp
from kcoral.builtins import benchmark

SOURCE = '''
__global__ void add_one_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  int n = static_cast<int>(x.numel());
  add_one_kernel<<<(n + 255) / 256, 256>>>(static_cast<const float*>(x.data_ptr()),
                                           static_cast<float*>(y.data_ptr()), n);
}
'''
add_one = tvm_ffi.cpp.load_inline(name="gpu_check_add_one", cuda_sources=SOURCE,
                                  functions="add_one", extra_cuda_cflags=["-O3"]).add_one


def time_kernel(n, kernels_per_call):
    import torch

    x = torch.zeros(n, device="cuda")
    y = torch.empty_like(x)

    def call(x, y):
        for _ in range(kernels_per_call):
            add_one(x, y)

    return benchmark(call, x, y, {"warmup_ms": 50, "repeat_ms": 300})
"""

TRIVIAL = "def add(x):\n    return x + 1\n"

HANDOFF = r"""
import time


def hold(seconds):
    import torch

    torch.ones(1, device="cuda").sum().item()
    time.sleep(seconds)
    return time.monotonic()


def off_gpu():
    return time.monotonic()
"""

# The waiting program's module: its first line runs as soon as the lease is granted (the
# module upload is the instruction that waited), after only writing and compiling it.
GRANTED = "import time\ngranted_at = time.monotonic()\n\ndef granted():\n    return granted_at\n"


CASES = (("add_one, 256 floats", 256, 1),
         ("add_one, 32 Mi floats (bandwidth-bound)", 1 << 25, 1),
         ("3 x add_one, 256 floats, one call", 256, 3))


def fidelity(url: str, raw_cupti: str, cases=CASES, processes: int = 5) -> list[dict[str, Any]]:
    """Each case timed in `processes` fresh workers and by `processes` runs of raw_cupti,
    taken in turns: one kernel's duration differs from process to process by a few 32-ns
    ticks (where its buffers landed), so one process against one other compares samples,
    not methods. The figure compared is the median of the per-process medians."""
    rows = []
    with Client(url) as client:
        for label, n, per_call in cases:
            program = Program()
            module = program.upload(id="kernel", kind="module", source=KERNEL)
            time_kernel = program.get_function(id="time_kernel", module=module, name="time_kernel")
            program.return_(key="timing", value=program.run(id="t", fn=time_kernel, args=[n, per_call]))
            timings, references, sums = [], [], []
            for _ in range(processes):
                raw = json.loads(subprocess.run([raw_cupti, str(n), str(per_call), "2000"], check=True,
                                                capture_output=True, text=True).stdout)
                references.append(raw["call_span_ms_median"] if per_call > 1 else raw["kernel_ms_median"])
                sums.append(raw["kernel_ms_median"] * per_call)
                result = client.execute(program, timeout_seconds=600)
                if not result.completed:
                    raise SystemExit(f"{label}: {result.error}")
                timings.append(result.results["timing"])
            medians = [timing["latency_ms_median"] for timing in timings]
            ours, reference = statistics.median(medians), statistics.median(references)
            difference_us = (ours - reference) * 1e3
            rows.append({
                "case": label, "benchmark_median_us": ours * 1e3, "raw_cupti_us": reference * 1e3,
                "difference_us": difference_us,
                "within_goal": abs(difference_us) <= max(0.1, 0.01 * reference * 1e3),
                "benchmark_per_process_us": [round(m * 1e3, 3) for m in medians],
                "raw_cupti_per_process_us": [round(r * 1e3, 3) for r in references],
                "sum_of_parts_us": statistics.median(sums) * 1e3,
                "repeat": [timing["repeat"] for timing in timings],
                "activities_per_call": timings[0]["activities_per_call"],
                "activities_stable": all(timing["activities_stable"] for timing in timings),
                "sm_clock_mhz": [min(t.get("sm_clock_mhz_min") or 0 for t in timings),
                                 max(t.get("sm_clock_mhz_max") or 0 for t in timings)],
            })
    return rows


def throughput(url: str, seconds: float = 10.0, clients: int = 8, processes: int = 1) -> dict[str, float]:
    """Programs per second of a trivial GPU program from `clients` threads, each sending its
    next program once its last is answered, for `seconds`; with `processes` above 1, that
    many client processes at once, `clients` threads each (one Python process's threads
    share its GIL, which caps what it can send). Medians of lease held, elapsed and queue
    times; across processes, the median of their medians."""
    if processes > 1:
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            parts = pool.starmap(throughput, [(url, seconds, clients)] * processes)
        def median_of(key: str) -> float | None:
            values = [part[key] for part in parts if part[key] is not None]
            return statistics.median(values) if values else None
        return {"programs_per_second": sum(part["programs_per_second"] for part in parts),
                "failed": sum(part["failed"] for part in parts), "clients": clients * processes,
                "processes": processes, "lease_held_ms_median": median_of("lease_held_ms_median"),
                "elapsed_ms_median": median_of("elapsed_ms_median"), "queue_ms_median": median_of("queue_ms_median")}
    program = Program()
    module = program.upload(id="m", kind="module", source=TRIVIAL)
    add = program.get_function(id="add", module=module, name="add")
    values = program.upload(id="x", kind="tensor", value=np.arange(16, dtype=np.float32))
    program.return_(key="y", value=program.run(id="y", fn=add, args=[values]))
    counts, failures = [0] * clients, [0] * clients
    held, elapsed, queued = [], [], []
    stop = time.monotonic() + seconds

    def client_loop(index: int) -> None:
        with Client(url) as client:
            while time.monotonic() < stop:
                result = client.execute(program, timeout_seconds=60)
                if result.completed:
                    counts[index] += 1
                    held.append(result.lease_held_ms)
                    elapsed.append(result.elapsed_ms)
                    queued.append(result.queue_ms)
                else:
                    failures[index] += 1

    with Client(url) as warm:  # the blob is cached and the workers prepared before timing
        warm.execute(program, timeout_seconds=60)
    started = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    return {"programs_per_second": sum(counts) / wall, "failed": sum(failures), "clients": clients,
            "lease_held_ms_median": statistics.median(held) if held else None,
            "elapsed_ms_median": statistics.median(elapsed) if elapsed else None,
            "queue_ms_median": statistics.median(queued) if queued else None}


def handoff(url: str, rounds: int = 10) -> dict[str, float]:
    """A holds the GPU, B waits for it: from the end of A's last GPU instruction to the
    first line of B's module, which ran because the lease was granted. An upper bound of
    the handoff: it also holds A draining the device before it lets go, and B starting to
    execute its module (written and compiled before B asked for the lease)."""
    latencies = []
    for _ in range(rounds):
        first = Program()
        module = first.upload(id="m", kind="module", source=HANDOFF)
        hold = first.get_function(id="hold", module=module, name="hold")
        off_gpu = first.get_function(id="off_gpu", module=module, name="off_gpu", cpu_only=True)
        held_until = first.run(id="held", fn=hold, args=[0.3])
        after = first.run(id="after", fn=off_gpu)  # the next instruction: A gives the GPU up
        first.return_(key="held_until", value=held_until)
        first.return_(key="after", value=after)
        second = Program()
        module_b = second.upload(id="m", kind="module", source=GRANTED)
        granted = second.get_function(id="granted", module=module_b, name="granted")
        second.return_(key="granted_at", value=second.run(id="g", fn=granted))
        results: dict[str, Any] = {}

        def run(name: str, program: Program) -> None:
            with Client(url) as client:
                results[name] = client.execute(program, timeout_seconds=60)

        a = threading.Thread(target=run, args=("a", first))
        b = threading.Thread(target=run, args=("b", second))
        a.start()
        time.sleep(0.1)  # B queues on the lease A holds
        b.start()
        a.join()
        b.join()
        if results["a"].completed and results["b"].completed:
            latencies.append((results["b"]["granted_at"] - results["a"]["held_until"]) * 1e3)
    return {"median_ms": statistics.median(latencies), "min_ms": min(latencies),
            "max_ms": max(latencies), "rounds": len(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", required=True, help="GPU server, a fresh worker per program")
    parser.add_argument("--reused", required=True, help="GPU server whose workers run many programs")
    parser.add_argument("--fresh-variant", action="append", default=[], metavar="LABEL=URL",
                        help="another fresh-worker GPU server (other settings) to measure throughput on")
    parser.add_argument("--churn", action="append", default=[], metavar="LABEL=URL",
                        help="also time while 6 clients churn this fresh-worker server's workers "
                             "(the timing program runs there too); --fresh is always measured so")
    parser.add_argument("--raw-cupti", required=True, help="the raw_cupti binary")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--small-kernel-processes", type=int, default=0, metavar="N",
                        help="only time the 256-float kernel, in N processes a side, on --fresh and "
                             "on each --fresh-variant (whose per-process speeds vary: more processes "
                             "tell the methods apart from that spread)")
    args = parser.parse_args()
    if args.small_kernel_processes:
        servers = [("fresh", args.fresh)] + [tuple(v.split("=", 1)) for v in args.fresh_variant]
        figures = {label: fidelity(url, args.raw_cupti, CASES[:1], processes=args.small_kernel_processes)[0]
                   for label, url in servers}
        print("| server | benchmark() | raw CUPTI | difference |\n| --- | --- | --- | --- |")
        for label, row in figures.items():
            print(f"| {label} | {row['benchmark_median_us']:.3f} us {sorted(row['benchmark_per_process_us'])} "
                  f"| {row['raw_cupti_us']:.3f} us {sorted(row['raw_cupti_per_process_us'])} "
                  f"| {row['difference_us']:+.3f} us |")
        if args.json:
            with open(args.json, "w") as out:
                json.dump(figures, out, indent=2)
        return

    figures = {"fidelity": fidelity(args.fresh, args.raw_cupti),
               "throughput_fresh": throughput(args.fresh),
               "throughput_reused": throughput(args.reused),
               "throughput_fresh_variants": {label: throughput(url) for label, url in
                                             (variant.split("=", 1) for variant in args.fresh_variant)},
               "handoff": handoff(args.fresh)}
    # The same timings while other programs keep new workers making their CUDA contexts:
    # does context making beside a measurement disturb it?
    figures["fidelity_during_churn"] = {}
    for label, url in [("default settings", args.fresh)] + [c.split("=", 1) for c in args.churn]:
        churn = threading.Thread(target=lambda: throughput(url, 30.0, 6))
        churn.start()
        time.sleep(2.0)
        figures["fidelity_during_churn"][label] = fidelity(url, args.raw_cupti, CASES[:2], processes=3)
        churn.join()
    print("Medians of per-process medians; each process's median in brackets.\n")
    print("| timing | benchmark() | raw CUPTI | difference | goal (0.1 us or 1%) |")
    print("| --- | --- | --- | --- | --- |")
    rows = [(row, "") for row in figures["fidelity"][:2]]
    rows += [(row, f", while 6 clients churn fresh workers ({label})")
             for label, churned in figures["fidelity_during_churn"].items() for row in churned]
    for row, note in rows:
        print(f"| {row['case']}{note} | {row['benchmark_median_us']:.3f} us {row['benchmark_per_process_us']} "
              f"| {row['raw_cupti_us']:.3f} us {row['raw_cupti_per_process_us']} "
              f"| {row['difference_us']:+.3f} us | {'met' if row['within_goal'] else 'MISSED'} |")
    three = figures["fidelity"][2]
    print(f"\n3-kernel call: span {three['benchmark_median_us']:.3f} us against the sum of its parts "
          f"{three['sum_of_parts_us']:.3f} us: the span includes the gaps between launches (raw CUPTI "
          f"sees a {three['raw_cupti_us']:.3f} us span for the same three kernels launched from C++ "
          f"with <<<>>>; the gaps depend on the launcher)")
    print("\n| trivial GPU program, 8 clients | programs/s | lease held | on the worker | queued (medians) |")
    print("| --- | --- | --- | --- | --- |")
    servers = [("fresh workers (goal 12/s on an H200)", figures["throughput_fresh"])]
    servers += [(f"fresh workers, {label}", value) for label, value in figures["throughput_fresh_variants"].items()]
    servers += [("reused workers (64 programs each)", figures["throughput_reused"])]
    for label, value in servers:
        print(f"| {label} | {value['programs_per_second']:.1f} | {value['lease_held_ms_median']:.1f} ms "
              f"| {value['elapsed_ms_median']:.1f} ms | {value['queue_ms_median']:.1f} ms |")
    hand = figures["handoff"]
    print(f"\nlease handoff (upper bound): median {hand['median_ms']:.3f} ms, min {hand['min_ms']:.3f} ms "
          f"(goal < 1 ms)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
