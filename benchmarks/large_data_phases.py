#!/usr/bin/env python3
"""Where a large round trip's time goes: our client's phases against our server.

roundtrip.py measures the wall time of 64 MiB up and back; this says where it goes. It
starts our CPU server (``--server``, fresh workers unless ``--server-flags`` say
otherwise), sends the large-data program of roundtrip.py (``large_data_client.py``:
upload N random bytes, return them through ``def f(b): return b``) one round after
another, and marks, inside our client, the moments a round passes:

- ``miss``: the first request, without the bytes, and its CACHE_MISS (new rounds only);
- ``send``: the second request's body handed to the socket, from its first piece to its
  last;
- ``server``: from the last piece sent to the answer's headers: the front's admission, the
  worker (the server's ``queue_ms`` and ``elapsed_ms`` are printed beside it) and the
  start of the answer;
- ``receive``: the answer's body read;
- ``decode``: the answer decoded (the returned bytes copied out and checked against their
  SHA-256).

Then the costs of the steps themselves on this machine, each alone in this process: a
SHA-256 of N bytes, N bytes copied into a new ``bytes``, and N bytes through a loopback
socket into a buffer.

    .venv/bin/python benchmarks/large_data_phases.py --bytes 67108864 --rounds 7
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from large_data_client import identity_program
from roundtrip import start_ours, stop

import kcoral
from kcoral import _client

PHASES = ("miss", "send", "server", "receive", "decode")


class Marks:
    """The moments one round passes, in the order they come (this client is one thread)."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []

    def __call__(self, name: str) -> None:
        self.times.append((name, time.perf_counter()))

    def phases(self, start: float, end: float) -> dict[str, float]:
        """Milliseconds per phase of the last exchange (and the miss before it, if any)."""
        named = dict(self.times[-6:])  # the last exchange's six marks
        exchanges = [t for name, t in self.times if name == "exchange"]
        return {
            "miss": (exchanges[-1] - start) * 1e3 if len(exchanges) > 1 else 0.0,
            "send": (named["sent"] - named["sending"]) * 1e3,
            "server": (named["headers"] - named["sent"]) * 1e3,
            "receive": (named["received"] - named["headers"]) * 1e3,
            "decode": (end - named["received"]) * 1e3,
        }


def instrument(marks: Marks) -> None:
    """Put the marks into our client's exchange: around the body's pieces and the answer."""
    exchange = _client.Client._exchange
    read_body = _client.read_body

    class Pieces(list):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[Any]:
            marks("sending")
            yield from list.__iter__(self)
            marks("sent")

    def timed_exchange(self: Any, *args: Any, **kwargs: Any) -> Any:
        marks("exchange")
        if kwargs.get("content") is not None:
            kwargs["content"] = Pieces(kwargs["content"])
        return exchange(self, *args, **kwargs)

    def timed_read_body(*args: Any, **kwargs: Any) -> Any:
        marks("headers")
        body = read_body(*args, **kwargs)
        marks("received")
        return body

    _client.Client._exchange = timed_exchange  # type: ignore[method-assign]
    _client.read_body = timed_read_body


def rounds(url: str, size: int, count: int, kind: str, marks: Marks) -> list[dict[str, float]]:
    rows = []
    with kcoral.Client(url) as client:
        data = os.urandom(size)
        for index in range(count + 1):  # the first is a warm-up
            if kind == "new":
                data = os.urandom(size)
            program = identity_program(data)
            marks.times.clear()
            start = time.perf_counter()
            result = client.execute(program, timeout_seconds=120)
            end = time.perf_counter()
            if not (result.completed and result.results["r"] == data):
                raise SystemExit(f"round {index}: {result.status} {result.error}")
            if index:
                rows.append({**marks.phases(start, end), "wall": (end - start) * 1e3,
                             "queue_ms": result.queue_ms, "elapsed_ms": result.elapsed_ms})
    return rows


def _median_ms(step: Callable[[], Any], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def loopback_ms(size: int) -> float:
    """N bytes sent through a loopback TCP socket and received into one bytearray."""
    data = os.urandom(size)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def send() -> None:
        connection, _ = server.accept()
        with connection:
            for _ in range(5):
                connection.sendall(data)

    sender = threading.Thread(target=send)
    sender.start()
    times = []
    with socket.create_connection(("127.0.0.1", port)) as receiver:
        for _ in range(5):
            buffer = bytearray(size)
            view = memoryview(buffer)
            start = time.perf_counter()
            got = 0
            while got < size:
                got += receiver.recv_into(view[got:], min(size - got, 1 << 20))
            times.append((time.perf_counter() - start) * 1e3)
    sender.join()
    server.close()
    return statistics.median(times)


def steps(size: int) -> dict[str, float]:
    data = os.urandom(size)
    return {
        "sha256": _median_ms(lambda: hashlib.sha256(data).digest()),
        "copy into new bytes": _median_ms(lambda: bytes(memoryview(data))),
        "loopback socket": loopback_ms(size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=str(Path(sys.executable).parent / "kcoral-server"))
    parser.add_argument("--server-flags", default="", help="more flags for our server")
    parser.add_argument("--bytes", type=int, default=64 << 20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hash-while-receiving-cores", type=int,
                        help="the client hashes an answer's parts while it arrives from this "
                             "many cores (kcoral._body.HASH_WHILE_RECEIVING_CORES; 1: always)")
    parser.add_argument("--hash-step-bytes", type=int,
                        help="the hashing thread's step (kcoral._part_hasher.FEED_BYTES)")
    args = parser.parse_args()
    # Imported only when asked for: an earlier client may lack them.
    if args.hash_step_bytes is not None:
        from kcoral import _part_hasher

        _part_hasher.FEED_BYTES = args.hash_step_bytes
    if args.hash_while_receiving_cores is not None:
        from kcoral import _body

        _body.HASH_WHILE_RECEIVING_CORES = args.hash_while_receiving_cores
    marks = Marks()
    instrument(marks)
    with tempfile.TemporaryDirectory() as directory:
        server = start_ours("ours", [args.server, *args.server_flags.split()], args.workers,
                            Path(directory))
        try:
            print(f"{args.bytes} bytes, {args.rounds} rounds after a warm-up, {os.cpu_count()} CPUs")
            print(f"{'kind':8}{'phase':12}{'median ms':>10}  rounds")
            for kind in ("new", "cached"):
                rows = rounds(server.url, args.bytes, args.rounds, kind, marks)
                for phase in (*PHASES, "queue_ms", "elapsed_ms", "wall"):
                    values = [row[phase] for row in rows]
                    print(f"{kind:8}{phase:12}{statistics.median(values):10.1f}  "
                          + " ".join(f"{value:.0f}" for value in values))
                wall = statistics.median(row["wall"] for row in rows)
                print(f"{kind:8}{'GB/s':12}{2 * args.bytes / wall / 1e6:10.3f}")
        finally:
            stop(server)
    print("the steps alone, median of 5:")
    for name, ms in steps(args.bytes).items():
        print(f"  {name:22}{ms:8.1f} ms  {args.bytes / ms / 1e6:6.2f} GB/s")


if __name__ == "__main__":
    main()
