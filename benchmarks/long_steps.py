#!/usr/bin/env python3
"""What other clients' large requests and answers cost a client of small programs.

Some of a request's steps take time that grows with what its client or its worker sent:
a large body's multipart scan, a blob loaded from the disk cache and hashed again, a large
answer decoded from the worker's channel, its returned values checked and encoded. For
each server (``--server`` with its defaults, then each ``--variant LABEL=COMMAND``: another
kcoral-server, or the same, with flags), started with a disk cache and a memory cache too
small for the large blob (so that every use of it is loaded from the disk): one client
sends the trivial program of roundtrip.py back to back, first alone for ``--seconds``, then
as long again while ``--heavy`` clients each send, one after another, a large program:

- ``--kind disk`` (the default): it names a ``--blob-mib`` blob of random bytes and returns
  its length (the blob uploaded once; from then on the server loads it from its disk cache);
- ``--kind answer``: it returns ``list(range(--answer-items))`` (about 41 bytes of text an
  item: 200 MB for 5 million).

    .venv/bin/python benchmarks/long_steps.py \
        --variant "io8=.venv/bin/kcoral-server --io-threads 8"
    .venv/bin/python benchmarks/long_steps.py --kind answer --workers 2 --seconds 20

Prints a row per server and phase: the small programs' wall time per program (median, p90,
p99, max, from Client.execute's call to its return), their median ``queue_ms``, small
programs per second, and the large programs answered per second.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from large_data_client import one_call_program
from roundtrip import _client, _percentile, start_ours, stop, trivial_program

import kcoral

REPOSITORY = Path(__file__).resolve().parent.parent
LENGTH_SOURCE = "def f(b):\n    return len(b)\n"
LIST_SOURCE = "def f(n):\n    return list(range(n))\n"


def large_program(data: bytes) -> kcoral.Program:
    program: kcoral.Program = one_call_program(LENGTH_SOURCE, data, "n")
    return program


def answer_program(items: int) -> kcoral.Program:
    program: kcoral.Program = one_call_program(LIST_SOURCE, items, "n")
    return program


def _small_client(url: str, stop_at: float, out: dict[str, Any]) -> None:
    program = trivial_program()
    wall_ms: list[float] = []
    queue_ms: list[float] = []
    failures: list[str] = []
    with _client(url) as client:
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            try:
                result = client.execute(program, timeout_seconds=60)
            except kcoral.KCoralError as error:
                failures.append(f"{type(error).__name__}: {error}")
                continue
            if result.completed and result.results.get("r") == 1:
                wall_ms.append((time.perf_counter() - start) * 1e3)
                queue_ms.append(result.queue_ms)
            else:
                failures.append(f"{result.status}: {result.error}")
    out.update(wall_ms=wall_ms, queue_ms=queue_ms, failures=failures)


def _large_client(url: str, program: kcoral.Program, expected: Any, stop_at: float,
                  out: dict[str, Any]) -> None:
    answered = 0
    failures: list[str] = []
    with _client(url) as client:
        while time.perf_counter() < stop_at:
            try:
                result = client.execute(program, timeout_seconds=120)
            except kcoral.KCoralError as error:
                failures.append(f"{type(error).__name__}: {error}")
                continue
            if result.completed and _matches(result.results.get("n"), expected):
                answered += 1
            else:
                failures.append(f"{result.status}: {result.error}")
    out.update(answered=answered, failures=failures)


def _matches(value: Any, expected: Any) -> bool:
    """The blob's length, or the list of `expected` items."""
    if isinstance(value, list):
        return len(value) == expected and bool(value[-1] == expected - 1)
    return bool(value == expected)


def _phase(url: str, seconds: float, large: list[kcoral.Program], expected: Any) -> dict[str, Any]:
    stop_at = time.perf_counter() + seconds
    small: dict[str, Any] = {}
    larges: list[dict[str, Any]] = [{} for _ in large]
    threads = [threading.Thread(target=_small_client, args=(url, stop_at, small))]
    threads += [threading.Thread(target=_large_client, args=(url, program, expected, stop_at, out))
                for program, out in zip(large, larges, strict=True)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    samples = small["wall_ms"]
    return {
        "small_per_second": len(samples) / wall,
        "median_ms": statistics.median(samples) if samples else None,
        "p90_ms": _percentile(samples, 0.9) if samples else None,
        "p99_ms": _percentile(samples, 0.99) if samples else None,
        "max_ms": max(samples) if samples else None,
        "queue_median_ms": statistics.median(small["queue_ms"]) if samples else None,
        "large_per_second": sum(out["answered"] for out in larges) / wall,
        "failures": small["failures"] + [f for out in larges for f in out["failures"]],
    }


def measure(label: str, command: list[str], args: argparse.Namespace,
            directory: Path) -> list[dict[str, Any]]:
    size = args.blob_mib << 20
    disk = directory / label / "disk-cache"
    disk.mkdir(parents=True)
    # A blob larger than a quarter of the memory cache is kept on disk only (BlobStore).
    flags = ["--blob-cache-bytes", str(2 * size), "--disk-cache-dir", str(disk),
             "--disk-cache-bytes", str(8 * size * max(1, args.heavy))]
    server = start_ours(label, [*command, *flags], args.workers, directory / label)
    try:
        if args.kind == "answer":
            large = [answer_program(args.answer_items) for _ in range(args.heavy)]
            expected: Any = args.answer_items
        else:
            large = [large_program(os.urandom(size)) for _ in range(args.heavy)]
            expected = size
            # Each large blob uploaded once, then on the disk before the phases start.
            for program in large:
                with _client(server.url) as client:
                    client.execute(program, timeout_seconds=120)
            deadline = time.monotonic() + 30
            def on_disk() -> int:
                return sum(1 for path in disk.rglob("*") if path.is_file() and path.stat().st_size == size)
            while on_disk() < args.heavy:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: the large blobs did not reach the disk cache")
                time.sleep(0.05)
        alone = _phase(server.url, args.seconds, [], expected)
        loaded = _phase(server.url, args.seconds, large, expected)
    finally:
        stop(server)
    return [{"label": label, "phase": "alone", **alone},
            {"label": label, "phase": f"beside {args.heavy} large", **loaded}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=str(REPOSITORY / ".venv" / "bin" / "kcoral-server"),
                        help="kcoral-server to run")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=COMMAND",
                        help="another server: a kcoral-server and its flags (repeatable)")
    parser.add_argument("--workers", type=int, default=4,
                        help="enough that the large programs leave the small client a worker")
    parser.add_argument("--heavy", type=int, default=2, help="clients sending the large program")
    parser.add_argument("--kind", choices=["disk", "answer"], default="disk",
                        help="what the large programs make long: a blob loaded from the disk "
                             "cache, or their answer")
    parser.add_argument("--blob-mib", type=int, default=128)
    parser.add_argument("--answer-items", type=int, default=5_000_000)
    parser.add_argument("--seconds", type=float, default=10.0, help="of each phase")
    args = parser.parse_args()
    servers = [("default", [args.server])]
    for variant in args.variant:
        label, _, command = variant.partition("=")
        servers.append((label, shlex.split(command)))

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kcoral-long-steps-") as directory:
        for label, command in servers:
            rows += measure(label, command, args, Path(directory))
            print(f"measured {label}", file=sys.stderr, flush=True)

    large = (f"a {args.blob_mib} MiB blob loaded from the disk cache" if args.kind == "disk"
             else f"an answer of {args.answer_items} numbers")
    print(f"small programs beside {args.heavy} clients of {large} ({args.seconds:g} s a phase, "
          f"{args.workers} workers, {os.cpu_count()} cores)")
    print("| server | phase | small ms median | p90 | p99 | max | median queue_ms | small/s | large/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        figures = [f"{row[key]:.2f}" if row[key] is not None else "-"
                   for key in ("median_ms", "p90_ms", "p99_ms", "max_ms")]
        queue = "-" if row["queue_median_ms"] is None else f"{row['queue_median_ms']:.3f}"
        print(f"| {row['label']} | {row['phase']} | {' | '.join(figures)} | {queue} | "
              f"{row['small_per_second']:.0f} | {row['large_per_second']:.1f} |")
    for row in rows:
        for failure in row["failures"][:5]:
            print(f"{row['label']} ({row['phase']}): {failure}")


if __name__ == "__main__":
    main()
