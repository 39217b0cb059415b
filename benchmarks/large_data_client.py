#!/usr/bin/env python3
"""The large-data phase of roundtrip.py: N bytes up to a server and back, by one client.

The program uploads N random bytes (``kind="bytes"``), runs an uploaded ``def f(b): return b``
on them and returns the result. Two kinds of rounds, each after a warm-up round of its own:

- ``new``: fresh bytes every round. The client's first request names a blob the server
  does not hold, the server answers CACHE_MISS, and the bytes go up in a second request
  and come back in its answer: the whole round trip.
- ``cached``: the same bytes every round (the warm-up uploaded them), so the server holds
  the blob already and only the answer brings the bytes.

The wall time of each ``Client.execute`` call; building the program (which hashes the
bytes) and checking that the same bytes came back are outside it. The effective rate is
2 N over the median wall time, in decimal GB/s.

It uses whichever ``kcoral`` the running Python imports, through what our client and the
reference's (PyPI kcoral 0.1.1) have in common. roundtrip.py measures our client in its
own process with :func:`measure`, and the reference's client by running this file with the
reference venv's Python, which prints the figures as JSON on stdout:

    .cache/reference-venv/bin/python benchmarks/large_data_client.py URL BYTES ROUNDS
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from typing import Any

import kcoral

IDENTITY_SOURCE = "def f(b):\n    return b\n"
# The server's limit on each program's execution; the reference's client has no read
# timeout of its own (ours derives its own from this), so a stuck round ends here at the
# latest, or at the subprocess timeout of roundtrip.py.
EXECUTE_TIMEOUT_SECONDS = 120
# What either client raises when no result comes: the reference's TransportError and
# ProtocolError are not KCoralErrors (ours are), so all three are named.
CLIENT_ERRORS = (kcoral.KCoralError, kcoral.TransportError, kcoral.ProtocolError)


def one_call_program(source: str, argument: Any, key: str) -> Any:
    """Upload the module ``source``, run its ``f`` on ``argument`` (bytes go up as a bytes
    blob, anything else as a literal) and return the value as ``key``. Only what our client
    and the reference's have in common, so that benchmarks of either can build on it."""
    program = kcoral.Program()
    if isinstance(argument, bytes):
        argument = program.upload(kind="bytes", value=argument)
    module = program.upload(kind="module", source=source)
    function = program.get_function(module=module, name="f")
    program.return_(key=key, value=program.run(fn=function, args=[argument]))
    return program


def identity_program(data: bytes) -> Any:
    """Upload ``data``, pass it through ``f`` and return it (as key ``r``)."""
    return one_call_program(IDENTITY_SOURCE, data, "r")


def _outcome(result: Any, data: bytes) -> str:
    if result.completed:
        returned = result.results.get("r")
        if returned == data:
            return "completed"
        size = len(returned) if isinstance(returned, (bytes, bytearray)) else "?"
        return f"COMPLETED with other bytes: {type(returned).__name__} of {size} bytes"
    error = result.error or {}
    return f"{result.status} {error.get('kind')}: {error.get('message')}"


def _round(client: Any, data: bytes) -> tuple[str, dict[str, float]]:
    """One round: the program built, executed (timed) and its answer checked."""
    start = time.perf_counter()
    program = identity_program(data)
    built = time.perf_counter()
    try:
        result = client.execute(program, timeout_seconds=EXECUTE_TIMEOUT_SECONDS)
    except CLIENT_ERRORS as error:
        return f"raised {type(error).__name__}: {error}", {}
    took = time.perf_counter() - built
    outcome = _outcome(result, data)
    return outcome, {"wall_ms": took * 1e3, "build_ms": (built - start) * 1e3,
                     "queue_ms": result.queue_ms, "elapsed_ms": result.elapsed_ms}


def _median(samples: list[float]) -> float | None:
    return statistics.median(samples) if samples else None


def measure_rounds(client: Any, size: int, rounds: int, fresh: bool) -> dict[str, Any]:
    """A warm-up round, then ``rounds`` timed ones; ``fresh``: new bytes every round."""
    data = os.urandom(size)
    warmup, _ = _round(client, data)
    outcomes: Counter[str] = Counter()
    samples: dict[str, list[float]] = {"wall_ms": [], "build_ms": [], "queue_ms": [],
                                       "elapsed_ms": []}
    for _ in range(rounds):
        if fresh:
            data = os.urandom(size)
        outcome, figures = _round(client, data)
        outcomes[outcome] += 1
        if outcome == "completed":
            for key, value in figures.items():
                samples[key].append(value)
    wall = samples["wall_ms"]
    median = _median(wall)
    return {
        "rounds": rounds, "warmup": 1, "warmup_outcome": warmup, "outcomes": dict(outcomes),
        "wall_ms": wall, "median_ms": median,
        "min_ms": min(wall) if wall else None, "max_ms": max(wall) if wall else None,
        # Up and back: twice the bytes over the median round, in decimal GB/s.
        "gb_per_s": 2 * size / (median * 1e-3) / 1e9 if median else None,
        "build_median_ms": _median(samples["build_ms"]),
        "server_queue_median_ms": _median(samples["queue_ms"]),
        "server_elapsed_median_ms": _median(samples["elapsed_ms"]),
    }


def measure(client: Any, size: int, rounds: int) -> dict[str, Any]:
    """Both kinds of rounds through ``client``, and which kcoral it is."""
    return {
        "client": f"kcoral {kcoral.__version__}", "client_path": os.path.dirname(kcoral.__file__),
        "bytes": size,
        "new": measure_rounds(client, size, rounds, fresh=True),
        "cached": measure_rounds(client, size, rounds, fresh=False),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the server, e.g. http://127.0.0.1:8000")
    parser.add_argument("bytes", type=int, help="bytes uploaded and returned each round")
    parser.add_argument("rounds", type=int, help="timed rounds of each kind, after a warm-up")
    args = parser.parse_args()
    if args.bytes <= 0 or args.rounds <= 0:
        parser.error("bytes and rounds must be positive")
    # Both clients take the URL alone; their read timeouts differ (see above).
    with kcoral.Client(args.url) as client:
        figures = measure(client, args.bytes, args.rounds)
    json.dump(figures, sys.stdout)
    print()


if __name__ == "__main__":
    main()
