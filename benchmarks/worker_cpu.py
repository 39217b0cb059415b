#!/usr/bin/env python3
"""CPU that one program costs a CPU server, fresh workers against reused ones.

For each server (ours with its defaults, a fresh sandboxed worker per program, then each
``--variant LABEL=FLAGS``: by default reused workers): clients (``--clients`` threads,
each with its own Client) send the trivial program of roundtrip.py back to back,
``--warmup`` programs in all and then ``--programs`` more, the measured window. Around the
window the benchmark reads from /proc the CPU of the front, of the worker parent, and of
the workers and their namespaces' inits that the worker parent has reaped (each process of
the server waits for its own children, so a reaped worker's CPU, and its orphans', lands
in its parent's count). The server's start (which preloads torch, where there is one) and
its stop are outside the window. The clients' CPU is not in it; nor is what the kernel
does later on its own threads (a network namespace's teardown), nor a worker that exits
between the two reads of one snapshot.

    .venv/bin/python benchmarks/worker_cpu.py
    .venv/bin/python benchmarks/worker_cpu.py --variant "unsandboxed=--sandbox none"

Prints a row per server: CPU per program, of it the front's, the worker parent's and the
workers', programs per second in the window, and its median ``queue_ms`` and
``elapsed_ms`` (the worker's time, which a fresh worker's first program shows). The worker
parent forks and reaps every fresh worker on one thread, or on as many helpers as
``--fork-parents`` gives it (counted as its share here), so that many times 1000 ms over its
share is a ceiling on fresh programs per second however many cores the server has. Goal (issue: CPU
workers cheaper): a fresh worker at most 4 ms of CPU per program.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from roundtrip import _client, start_ours, stop, trivial_program

import kcoral

REPOSITORY = Path(__file__).resolve().parent.parent


def _load(url: str, programs: int, clients: int,
          pause: float = 0.0) -> tuple[float, list[float], list[float], list[str]]:
    """Sends `programs` trivial programs from `clients` threads, each pausing `pause`
    seconds after each answer; the wall time, each completed program's queue_ms and
    elapsed_ms, and what went wrong."""
    program = trivial_program()
    remaining = [programs]
    lock = threading.Lock()
    queue_ms: list[float] = []
    elapsed_ms: list[float] = []
    failures: list[str] = []

    def client_thread() -> None:
        with _client(url) as client:
            while True:
                with lock:
                    if remaining[0] == 0:
                        return
                    remaining[0] -= 1
                try:
                    result = client.execute(program, timeout_seconds=60)
                except kcoral.KCoralError as error:
                    with lock:
                        failures.append(f"{type(error).__name__}: {error}")
                    continue
                with lock:
                    if result.completed and result.results.get("r") == 1:
                        queue_ms.append(result.queue_ms)
                        elapsed_ms.append(result.elapsed_ms)
                    else:
                        failures.append(f"{result.status}: {result.error}")
                if pause:
                    time.sleep(pause)

    threads = [threading.Thread(target=client_thread) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, queue_ms, elapsed_ms, failures


def _cpu(pid: int) -> tuple[float, float]:
    """Seconds of CPU of process `pid`: its own (its threads') and its reaped children's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return children


def _fork_helper(pid: int) -> bool:
    """Whether `pid`, a child of the worker parent, is one of its fork helpers: in the
    parent's own PID namespace, where a sandboxed worker and its init are each in one of
    their own (unsandboxed workers are not told apart: measure sandboxed servers)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return any(line.startswith("NSpid:") and len(line.split()) == 2 for line in status.splitlines())


def _tree(front: int) -> dict[str, float]:
    """The CPU so far of the front, of the worker parent (its only child that lives as long
    as it does) with its fork helpers, and of the workers, with their namespaces' inits:
    those reaped and those alive (with what each of these has reaped)."""
    front_own, _ = _cpu(front)
    parent_own = workers = helpers = 0.0
    for parent in _children(front):
        own, reaped = _cpu(parent)
        parent_own += own
        workers += reaped
        for child in _children(parent):
            with contextlib.suppress(OSError):  # reaped meanwhile: counted next time
                if not _fork_helper(child):
                    workers += sum(_cpu(child))
                    continue
                helpers += 1
                own, reaped = _cpu(child)
                parent_own += own
                workers += reaped
                for worker in _children(child):
                    with contextlib.suppress(OSError):
                        workers += sum(_cpu(worker))
    return {"front": front_own, "worker_parent": parent_own, "workers": workers, "fork_helpers": helpers}


def measure(label: str, command: list[str], args: argparse.Namespace,
            directory: Path) -> dict[str, Any]:
    """One server under load: `--warmup` programs, then `--programs` in the window measured."""
    server = start_ours(label, command, args.workers, directory / label)
    try:
        pause = args.pause_ms / 1e3
        _, _, _, failures = _load(server.url, args.warmup, args.clients, pause)
        before = _tree(server.process.pid)
        wall, queue_ms, elapsed_ms, measured_failures = _load(server.url, args.programs, args.clients,
                                                              pause)
        after = _tree(server.process.pid)
    finally:
        stop(server)
    fork_helpers = int(after.pop("fork_helpers"))
    before.pop("fork_helpers")
    per_program = {key: (after[key] - before[key]) / args.programs * 1e3 for key in after}
    return {
        "label": label,
        **{f"{key}_ms": value for key, value in per_program.items()},
        "total_ms": sum(per_program.values()),
        "fork_helpers": fork_helpers,
        "per_second": args.programs / wall,
        "queue_median_ms": statistics.median(queue_ms) if queue_ms else None,
        "elapsed_median_ms": statistics.median(elapsed_ms) if elapsed_ms else None,
        "failures": failures + measured_failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=str(REPOSITORY / ".venv" / "bin" / "kcoral-server"),
                        help="kcoral-server to run")
    parser.add_argument("--variant", action="append", default=None, metavar="LABEL=FLAGS",
                        help="another server: the same kcoral-server with these flags "
                             "(repeatable; default: reused=--programs-per-worker 1000)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=100,
                        help="programs before the measured ones")
    parser.add_argument("--programs", type=int, default=1000, help="programs measured")
    parser.add_argument("--pause-ms", type=float, default=0.0,
                        help="each client's pause after each answer: with a pause longer than a "
                             "fresh worker's making, the server is idle when each program comes, "
                             "as a server with idle cores is (its queue_ms then the front's own)")
    args = parser.parse_args()
    variants = args.variant or ["reused=--programs-per-worker 1000"]
    servers = [("fresh", [args.server])]
    for variant in variants:
        label, _, flags = variant.partition("=")
        servers.append((label, [args.server, *shlex.split(flags)]))

    rows = []
    with tempfile.TemporaryDirectory(prefix="kcoral-worker-cpu-") as directory:
        for label, command in servers:
            rows.append(measure(label, command, args, Path(directory)))
            print(f"measured {label}", file=sys.stderr, flush=True)

    print(f"CPU of the server tree per program ({args.programs} programs after {args.warmup}, "
          f"{args.clients} clients, {args.workers} workers)")
    print("| server | CPU per program | the front | the worker parent | the workers "
          "| its ceiling | programs/s | median queue_ms | median elapsed_ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        queue, elapsed = ("-" if row[key] is None else f"{row[key]:.3f}"
                          for key in ("queue_median_ms", "elapsed_median_ms"))
        parent = row["worker_parent_ms"]
        forking = max(1, row["fork_helpers"])  # the threads that fork: the parent's, or its helpers'
        ceiling = f"{forking * 1e3 / parent:.0f}/s" if parent >= 0.05 else "-"  # reused: no forks
        print(f"| {row['label']} | {row['total_ms']:.2f} ms | {row['front_ms']:.2f} | "
              f"{parent:.2f} | {row['workers_ms']:.2f} | {ceiling} | {row['per_second']:.0f} | "
              f"{queue} | {elapsed} |")
    print("the front, the worker parent: each one's own CPU per program; the workers: theirs, "
          "their namespaces' inits' and their orphans'; its ceiling: the programs a second "
          "that the worker parent's one thread, or its fork helpers side by side, forking and "
          "reaping one worker per program, can serve")
    for row in rows:
        for failure in row["failures"][:5]:
            print(f"{row['label']}: {failure}")
    print("goal: a fresh worker at most 4 ms of CPU per program")


if __name__ == "__main__":
    main()
