#!/usr/bin/env python3
"""CPU that one program costs a CPU server, fresh workers against reused ones.

For each server (ours with its defaults, a fresh sandboxed worker per program, then each
``--variant LABEL=FLAGS``: by default reused workers), two runs of the same load: clients
(``--clients`` threads, each with its own Client) send the trivial program of
roundtrip.py back to back, ``--short`` programs in all in the first run and ``--long`` in
the second. The server is this process's child, and each of its processes waits for its
own children, so ``getrusage(RUSAGE_CHILDREN)`` taken around a run is the CPU of the whole
server tree: the front, the worker parent, the workers and their namespaces' init. The
difference between the two runs, divided by the difference in programs, is the CPU per
program with the server's start and stop taken out. The clients' CPU is this process's
own and not in it; nor is what the kernel does later on its own threads (a network
namespace's teardown).

    .venv/bin/python benchmarks/worker_cpu.py
    .venv/bin/python benchmarks/worker_cpu.py --variant "unsandboxed=--sandbox none"

Prints a row per server: CPU per program (user and system), the front's and the worker
parent's own shares of it (read from /proc at the end of each load, differenced the same
way), programs per second in the long run, and its median ``queue_ms`` and ``elapsed_ms``
(the worker's time, which a fresh worker's first program shows). The worker parent
forks and reaps every fresh worker on one thread, so 1000 ms over its share is a ceiling
on fresh programs per second however many cores the server has. Goal (issue: CPU workers
cheaper): a fresh worker at most 4 ms of CPU per program.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import kcoral

from roundtrip import _client, start_ours, stop, trivial_program

REPOSITORY = Path(__file__).resolve().parent.parent


def _tree_cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


def _load(url: str, programs: int,
          clients: int) -> tuple[float, list[float], list[float], list[str]]:
    """Sends `programs` trivial programs from `clients` threads; the wall time, each
    completed program's queue_ms and elapsed_ms, and what went wrong."""
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

    threads = [threading.Thread(target=client_thread) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, queue_ms, elapsed_ms, failures


def _own_cpu(pid: int) -> float:
    """Seconds of CPU that process `pid` has used itself (its threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return children


def _run(label: str, command: list[str], workers: int, programs: int, clients: int,
         directory: Path) -> dict[str, Any]:
    """One server's whole life under one load: the tree's CPU, start to exit, and the
    front's and the worker parent's own (its only child that lives as long as it does),
    start to the load's end."""
    before = _tree_cpu()
    server = start_ours(label, command, workers, directory)
    front = server.process.pid
    try:
        wall, queue_ms, elapsed_ms, failures = _load(server.url, programs, clients)
        front_cpu = _own_cpu(front)
        parent_cpu = sum(_own_cpu(child) for child in _children(front))
    finally:
        stop(server)
    after = _tree_cpu()
    return {"user": after[0] - before[0], "system": after[1] - before[1], "wall": wall,
            "front": front_cpu, "worker_parent": parent_cpu,
            "queue_ms": queue_ms, "elapsed_ms": elapsed_ms, "failures": failures}


def measure(label: str, command: list[str], args: argparse.Namespace,
            directory: Path) -> dict[str, Any]:
    short = _run(label, command, args.workers, args.short, args.clients,
                 directory / f"{label}-short")
    long = _run(label, command, args.workers, args.long, args.clients,
                directory / f"{label}-long")
    programs = args.long - args.short
    return {
        "label": label,
        "user_ms": (long["user"] - short["user"]) / programs * 1e3,
        "system_ms": (long["system"] - short["system"]) / programs * 1e3,
        "front_ms": (long["front"] - short["front"]) / programs * 1e3,
        "worker_parent_ms": (long["worker_parent"] - short["worker_parent"]) / programs * 1e3,
        "per_second": args.long / long["wall"],
        "queue_median_ms": statistics.median(long["queue_ms"]) if long["queue_ms"] else None,
        "elapsed_median_ms": statistics.median(long["elapsed_ms"]) if long["elapsed_ms"] else None,
        "failures": short["failures"] + long["failures"],
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
    parser.add_argument("--short", type=int, default=100, help="programs in the first run")
    parser.add_argument("--long", type=int, default=600, help="programs in the second run")
    args = parser.parse_args()
    if args.long <= args.short:
        parser.error("--long must be larger than --short")
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

    print(f"CPU of the server tree per program ({args.long} - {args.short} programs, "
          f"{args.clients} clients, {args.workers} workers)")
    print("| server | CPU per program | user | system | the front | the worker parent "
          "| its ceiling | programs/s | median queue_ms | median elapsed_ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        queue, elapsed = ("-" if row[key] is None else f"{row[key]:.2f}"
                          for key in ("queue_median_ms", "elapsed_median_ms"))
        parent = row["worker_parent_ms"]
        ceiling = f"{1e3 / parent:.0f}/s" if parent > 0 else "-"
        print(f"| {row['label']} | {row['user_ms'] + row['system_ms']:.2f} ms | "
              f"{row['user_ms']:.2f} | {row['system_ms']:.2f} | {row['front_ms']:.2f} | "
              f"{parent:.2f} | {ceiling} | {row['per_second']:.0f} | {queue} | {elapsed} |")
    print("the front, the worker parent: each one's own CPU per program, the rest of the tree's "
          "being the workers' (and their namespaces' inits); its ceiling: the programs a second "
          "that one thread of the worker parent, forking and reaping one worker per program, "
          "can serve")
    for row in rows:
        for failure in row["failures"][:5]:
            print(f"{row['label']}: {failure}")
    print("goal: a fresh worker at most 4 ms of CPU per program")


if __name__ == "__main__":
    main()
