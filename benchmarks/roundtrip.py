#!/usr/bin/env python3
"""Overhead and throughput of kcoral-server against the reference KCoral server, in one run.

Starts both servers itself, on this machine, with the same worker count: ours
(``kcoral-server --device cpu``) and the reference's (``kcoral server --device cpu`` from
PyPI kcoral 0.1.1, with its default settings: what its users get). Then, for each:

(a) round trip: a trivial program (upload a module ``def f(): return 1``, get_function,
    run, return), sent by one client one after another, after a warm-up; the wall time of
    each ``Client.execute`` call, reported as median and p90 in milliseconds;
(b) throughput: 8 threads, each with its own Client, send the same program back to back
    for a fixed time; completed programs per second;
(c) large data: a program that uploads 64 MiB of random bytes (``--large-bytes``), runs an
    uploaded ``def f(b): return b`` on them and returns them; ``--large-rounds`` rounds with
    fresh bytes (``new``: up and back) and as many with the same bytes again (``cached``:
    only the answer brings them), each kind after a warm-up; the median wall time and the
    effective rate, 2 x the bytes over it, in GB/s (large_data_client.py).

(a) and (b) are driven by our client (in this process), so the difference measured is
the servers'. (c) is driven by both clients on every server: ours, in this process, and
the reference's own (kcoral 0.1.1's ``Client``), in large_data_client.py run by the
reference venv's Python. Prints a table with the ratios and the goal check (our median
round trip at most 1/10 of the reference's, our throughput at least 10x, and our median
``queue_ms`` back to back at most 0.1 ms: a worker ready for each program), one for the
large data (our client and server at least 1 GB/s in ``new`` rounds), and with
``--json PATH`` writes every figure, the machine and both servers' configurations there.

``--variant LABEL=COMMAND`` (repeatable) measures more of our servers the same way, in
the same run: another build (an earlier commit's, for a before/after) or other flags
(``--sandbox none``); a second table compares each with ours. With a fresh worker per
program, the throughput is also the rate at which the server prepares fresh workers.

    .venv/bin/python benchmarks/roundtrip.py --json benchmarks/results/roundtrip.json \
        --variant "unsandboxed=.venv/bin/kcoral-server --sandbox none"

The reference venv is ``$KCORAL_REFERENCE_VENV`` (default ``.cache/reference-venv``; make it
with ``scripts/reference-env.sh``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

import kcoral

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shared parts, beside it
from large_data_client import IDENTITY_SOURCE  # noqa: E402
from large_data_client import measure as measure_large_data  # noqa: E402
from server_process import terminate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LARGE_DATA_CLIENT = Path(__file__).resolve().parent / "large_data_client.py"
SOURCE = "def f():\n    return 1\n"
START_SECONDS = 180
# Goals: our median round trip at most this fraction of the reference's; our throughput
# at least this multiple of it.
LATENCY_GOAL_RATIO = 0.1
THROUGHPUT_GOAL_RATIO = 10.0
# Goal: a client sending programs one after another waits at most this long for a worker
# (our median queue_ms in the round trip), on a server with idle cores.
QUEUE_GOAL_MS = 0.1
# Goal: our client and server move the large data up and back at least this fast (decimal
# GB/s: 2 x the bytes over the median wall time of a ``new`` round).
LARGE_DATA_GOAL_GB_PER_S = 1.0
# The reference's client in its subprocess: at most this long per round (warm-ups counted).
LARGE_ROUND_SECONDS = 300


def trivial_program() -> kcoral.Program:
    program = kcoral.Program()
    module = program.upload(kind="module", source=SOURCE)
    function = program.get_function(module=module, name="f")
    program.return_(key="r", value=program.run(fn=function))
    return program


# -- servers ------------------------------------------------------------------------------


@dataclasses.dataclass
class Server:
    name: str
    command: list[str]
    process: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def _without_pythonpath() -> dict[str, str]:
    """This environment without PYTHONPATH, which could put our kcoral package before the
    reference's own in the reference's server and client."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _launch(name: str, command: list[str], directory: Path,
            environment: dict[str, str] | None = None) -> Server:
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=directory,
                                   start_new_session=True, env=environment)
    return Server(name, command, process, log)


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise SystemExit(f"the {server.name} server exited:\n{server.log_tail()}")
        if not server.url:
            text = server.log.read_text(errors="replace")
            if "listening on http://" in text:
                server.url = text.split("listening on ", 1)[1].split()[0]
        if server.url:
            try:
                if httpx.get(server.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    raise SystemExit(f"the {server.name} server was not healthy in {START_SECONDS} s:\n"
                     f"{server.log_tail()}")


def start_ours(name: str, command: list[str], workers: int, directory: Path) -> Server:
    server = _launch(name, [*command, "--device", "cpu", "--port", "0",
                            "--num-workers", str(workers)], directory)
    _wait_healthy(server)
    return server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def reference_flags() -> list[str]:
    """Only what this run needs beyond the defaults: bubblewrap, its default sandbox, is
    not on every machine; without it the server cannot start."""
    return [] if shutil.which("bwrap") else ["--sandbox", "none"]


def start_reference(venv: Path, workers: int, directory: Path) -> Server:
    port = _free_port()
    server = _launch("reference", [
        str(venv / "bin" / "kcoral"), "server", "--device", "cpu", "--host", "127.0.0.1",
        "--port", str(port), "--num-workers", str(workers), *reference_flags(),
    ], directory, _without_pythonpath())  # its event log goes to directory/logs, its default place
    server.url = f"http://127.0.0.1:{port}"
    _wait_healthy(server)
    return server


def stop(server: Server) -> None:
    terminate(server.process)


def reference_config(venv: Path, flags: list[str]) -> dict[str, Any]:
    """The reference server's effective settings: its ServerConfig defaults, as its CLI
    builds them, with this run's flags applied."""
    code = (
        "import dataclasses, json, sys\n"
        "from kcoral.server.cli import build_parser, config_from_args\n"
        "config = config_from_args(build_parser().parse_args(sys.argv[1:]))\n"
        "print(json.dumps(dataclasses.asdict(config), default=str))\n"
    )
    done = subprocess.run([venv / "bin" / "python", "-c", code, *flags], capture_output=True,
                          text=True, timeout=120, check=True, env=_without_pythonpath())
    config: dict[str, Any] = json.loads(done.stdout)
    config.pop("node_token", None)
    return config


# -- measurements -------------------------------------------------------------------------


def _client(url: str) -> kcoral.Client:
    return kcoral.Client(url, read_timeout_seconds=300)


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _outcome(result: kcoral.ProgramResult) -> str:
    if result.completed and result.results.get("r") == 1:
        return "completed"
    error = result.error or {}
    return f"{result.status} {error.get('kind')}: {error.get('message')}"


def measure_round_trip(url: str, requests: int, warmup: int) -> dict[str, Any]:
    program = trivial_program()
    wall_ms: list[float] = []
    queue_ms: list[float] = []
    elapsed_ms: list[float] = []
    outcomes: Counter[str] = Counter()
    with _client(url) as client:
        for _ in range(warmup):
            client.execute(program, timeout_seconds=60)
        for _ in range(requests):
            start = time.perf_counter()
            try:
                result = client.execute(program, timeout_seconds=60)
            except kcoral.KCoralError as error:
                outcomes[f"raised {type(error).__name__}: {error}"] += 1
                continue
            took = (time.perf_counter() - start) * 1e3
            outcome = _outcome(result)
            outcomes[outcome] += 1
            if outcome == "completed":
                wall_ms.append(took)
                queue_ms.append(result.queue_ms)
                elapsed_ms.append(result.elapsed_ms)
    if not wall_ms:
        raise SystemExit(f"no program completed on {url}: {dict(outcomes)}")
    return {
        "requests": requests, "warmup": warmup, "outcomes": dict(outcomes),
        "median_ms": statistics.median(wall_ms), "p90_ms": _percentile(wall_ms, 0.9),
        "min_ms": min(wall_ms), "max_ms": max(wall_ms), "mean_ms": statistics.fmean(wall_ms),
        # The server's own account of the median request: waiting for a worker, then
        # the worker's time; the rest of the wall time is HTTP, parsing and the client.
        "server_queue_median_ms": statistics.median(queue_ms),
        "server_elapsed_median_ms": statistics.median(elapsed_ms),
    }


def measure_large_ours(url: str, size: int, rounds: int) -> dict[str, Any]:
    """The large-data rounds by our client, in this process."""
    with _client(url) as client:
        return measure_large_data(client, size, rounds)


def measure_large_reference(venv: Path, url: str, size: int, rounds: int) -> dict[str, Any]:
    """The large-data rounds by the reference's own client: large_data_client.py run by the
    reference venv's Python. A client that fails leaves its error in place of the figures."""
    timeout = LARGE_ROUND_SECONDS * 2 * (rounds + 1)
    environment = _without_pythonpath()
    try:
        done = subprocess.run([venv / "bin" / "python", LARGE_DATA_CLIENT, url, str(size),
                               str(rounds)], capture_output=True, text=True, timeout=timeout,
                              env=environment)
    except subprocess.TimeoutExpired:
        return {"error": f"the reference's client took more than {timeout} s"}
    if done.returncode != 0:
        return {"error": f"the reference's client exited with {done.returncode}: "
                         f"{done.stderr[-2000:]}"}
    try:  # its figures are the last line
        figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"the reference's client printed no figures: {done.stdout[-2000:]}"}
    return figures


def _large_progress(name: str, client: str, cell: dict[str, Any]) -> None:
    shown = cell.get("error") or ", ".join(
        f"{kind} {_cell(cell[kind]['gb_per_s'], 0, '.3g').strip()} GB/s"
        for kind in ("new", "cached"))
    print(f"{name}: large data, {client} client: {shown}", file=sys.stderr, flush=True)


def measure_large(name: str, url: str, venv: Path, size: int,
                  rounds: int) -> dict[str, Any]:
    """The large-data phase on one server, by our client, then by the reference's: its
    figures by client ("ours", "reference"); none when ``size`` is 0."""
    cells: dict[str, Any] = {}
    if size:
        cells["ours"] = measure_large_ours(url, size, rounds)
        _large_progress(name, "ours", cells["ours"])
        cells["reference"] = measure_large_reference(venv, url, size, rounds)
        _large_progress(name, "reference", cells["reference"])
    return cells


def measure_throughput(url: str, threads: int, seconds: float) -> dict[str, Any]:
    program = trivial_program()
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    start_line = threading.Barrier(threads + 1)
    deadline = [0.0]

    def client_loop() -> None:
        with _client(url) as client:
            start_line.wait()
            while time.perf_counter() < deadline[0]:
                try:
                    outcome = _outcome(client.execute(program, timeout_seconds=120))
                except kcoral.KCoralError as error:
                    outcome = f"raised {type(error).__name__}: {error}"
                with lock:
                    outcomes[outcome] += 1

    workers = [threading.Thread(target=client_loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    start = time.perf_counter()
    deadline[0] = start + seconds
    start_line.wait()
    for worker in workers:
        worker.join()
    # Requests in flight at the deadline are waited for and counted.
    elapsed = time.perf_counter() - start
    return {
        "threads": threads, "duration_s": seconds, "elapsed_s": elapsed,
        "outcomes": dict(outcomes),
        "completed_per_s": outcomes["completed"] / elapsed,
    }


# -- the report ---------------------------------------------------------------------------


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("inf")


def _size_label(size: int) -> str:
    return f"{size >> 20} MiB" if size % (1 << 20) == 0 else f"{size} bytes"


def _cell(value: float | None, width: int, form: str = ".2f") -> str:
    """A figure of a table, "-" where there is none."""
    return f"{value:{width}{form}}" if value is not None else f"{'-':>{width}}"


def report_large(results: dict[str, Any]) -> list[str]:
    """The large-data table: a row per client, server and kind of round, the goal on ours
    (our client, our server, ``new`` rounds); then the clients that failed."""
    config = results["config"]
    size = config["large_bytes"]
    lines = [f"large data: {_size_label(size)} up and back, median of {config['large_rounds']} "
             f"rounds of each kind after a warm-up; GB/s = 2 x {size / 1e6:g} MB / wall",
             f"{'client -> server':34}{'kind':>7}{'wall ms':>10}{'GB/s':>9}{'queue ms':>10}"
             f"{'elapsed ms':>12}{'build ms':>10}{'goal':>7}  met"]
    failures = []
    for server_name, server in results["servers"].items():
        for client_name, cell in server["large_data"].items():
            label = f"{client_name} -> {server_name}"[:33]
            if "error" in cell:
                failures.append(f"{label}: {cell['error']}")
                continue
            for kind in ("new", "cached"):
                rounds = cell[kind]
                goal, verdict = "", ""
                if (client_name, server_name, kind) == ("ours", "ours", "new"):
                    goal = f">= {LARGE_DATA_GOAL_GB_PER_S:g}"
                    verdict = "yes" if results["goals"]["large_data"] else "NO"
                lines.append(f"{label:34}{kind:>7}{_cell(rounds['median_ms'], 10)}"
                             f"{_cell(rounds['gb_per_s'], 9, '.3g')}"
                             f"{_cell(rounds['server_queue_median_ms'], 10)}"
                             f"{_cell(rounds['server_elapsed_median_ms'], 12)}"
                             f"{_cell(rounds['build_median_ms'], 10)}{goal:>7}  {verdict}")
                failed = {k: v for k, v in rounds["outcomes"].items() if k != "completed"}
                if rounds["warmup_outcome"] != "completed":
                    failed[f"warm-up: {rounds['warmup_outcome']}"] = 1
                if failed:
                    failures.append(f"{label}, {kind}: rounds that did not complete: {failed}")
    reference_client = next((cell["client"] for server in results["servers"].values()
                             for name, cell in server["large_data"].items()
                             if name == "reference" and "client" in cell), "?")
    lines.extend(failures)
    lines.append(f"clients: ours {config['client']}, reference {reference_client} (in a "
                 "process of its own)")
    lines.append("wall: the Client.execute call (in new rounds: the request without the "
                 "bytes, the server's CACHE_MISS, the request with them)")
    lines.append("build: making the Program (hashing the bytes), before the wall")
    return lines


def report(results: dict[str, Any]) -> str:
    ours, reference = results["servers"]["ours"], results["servers"]["reference"]
    goals = results["goals"]
    rows = [
        ("round trip median (ms)", ours["round_trip"]["median_ms"],
         reference["round_trip"]["median_ms"], results["ratios"]["median_ours_over_reference"],
         f"<= {LATENCY_GOAL_RATIO:g}", goals["median_round_trip"]),
        ("round trip p90 (ms)", ours["round_trip"]["p90_ms"], reference["round_trip"]["p90_ms"],
         results["ratios"]["p90_ours_over_reference"], "", None),
        ("queue median (ms)", ours["round_trip"]["server_queue_median_ms"],
         reference["round_trip"]["server_queue_median_ms"],
         _ratio(ours["round_trip"]["server_queue_median_ms"],
                reference["round_trip"]["server_queue_median_ms"]),
         f"<= {QUEUE_GOAL_MS:g}", goals["back_to_back_queue"]),
        ("throughput (programs/s)", ours["throughput"]["completed_per_s"],
         reference["throughput"]["completed_per_s"],
         results["ratios"]["throughput_ours_over_reference"], f">= {THROUGHPUT_GOAL_RATIO:g}",
         goals["throughput"]),
    ]
    lines = [f"{'':26}{'ours':>12}{'reference':>12}{'ours/ref':>11}{'goal':>8}  met"]
    for label, mine, theirs, ratio, goal, met in rows:
        verdict = "" if met is None else ("yes" if met else "NO")
        lines.append(f"{label:26}{mine:12.2f}{theirs:12.2f}{ratio:11.4g}{goal:>8}  {verdict}")
    variants = [name for name in results["servers"] if name not in ("ours", "reference")]
    if variants:
        lines.append("")
        lines.append(f"{'':26}{'median ms':>11}{'p90 ms':>9}{'queue ms':>10}{'programs/s':>12}"
                     f"{'median - ours':>15}{'/ ours':>8}")
        for name in ["ours", *variants]:
            server = results["servers"][name]
            median = server["round_trip"]["median_ms"]
            rate = server["throughput"]["completed_per_s"]
            lines.append(f"{name[:26]:26}{median:11.2f}{server['round_trip']['p90_ms']:9.2f}"
                         f"{server['round_trip']['server_queue_median_ms']:10.2f}{rate:12.1f}"
                         f"{median - ours['round_trip']['median_ms']:+15.2f}"
                         f"{_ratio(rate, ours['throughput']['completed_per_s']):8.3f}")
    for name, server in results["servers"].items():
        failed = {k: v for part in ("round_trip", "throughput")
                  for k, v in server[part]["outcomes"].items() if k != "completed"}
        if failed:
            lines.append(f"{name}: programs that did not complete: {failed}")
    config = results["config"]
    lines.append(
        f"{config['workers']} workers each; {config['requests']} / "
        f"{config['reference_requests']} sequential round trips (ours / reference) after "
        f"{config['warmup']} / {config['reference_warmup']} warm-up; {config['threads']} "
        f"client threads for {config['duration_s']:g} s; reference max_requests_per_worker="
        f"{reference['config'].get('max_requests_per_worker')} (its default); "
        f"{results['machine']['cpus']} CPUs, load average {results['machine']['load_before']}")
    if results["config"]["large_bytes"]:
        lines.append("")
        lines.extend(report_large(results))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of each server (default 2)")
    parser.add_argument("--requests", type=int, default=300,
                        help="sequential round trips on our server (default 300)")
    parser.add_argument("--reference-requests", type=int, default=40,
                        help="sequential round trips on the reference server (default 40; "
                             "each takes about a second there)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up requests on ours")
    parser.add_argument("--reference-warmup", type=int, default=3,
                        help="warm-up requests on the reference server")
    parser.add_argument("--threads", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--duration", type=float, default=30.0,
                        help="seconds of the throughput run on each server (default 30)")
    parser.add_argument("--large-bytes", type=int, default=64 << 20,
                        help="bytes each large-data round uploads and gets back (default "
                             "64 MiB; 0 leaves the large-data phase out)")
    parser.add_argument("--large-rounds", type=int, default=5,
                        help="large-data rounds of each kind (new, cached) per client and "
                             "server, after a warm-up (default 5)")
    parser.add_argument("--server", default=os.environ.get("KCORAL_SERVER"),
                        help="our kcoral-server (default: beside this Python, or $KCORAL_SERVER)")
    parser.add_argument("--reference-venv", type=Path,
                        default=Path(os.environ.get("KCORAL_REFERENCE_VENV",
                                                    ".cache/reference-venv")),
                        help="venv with kcoral[server]==0.1.1 (default $KCORAL_REFERENCE_VENV "
                             "or .cache/reference-venv; see scripts/reference-env.sh)")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=COMMAND",
                        help="another of our servers to measure: a label and its command line "
                             "(binary and flags); repeatable")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = parser.parse_args()
    if args.large_bytes < 0 or (args.large_bytes and args.large_rounds < 1):
        parser.error("--large-bytes must be at least 0 and --large-rounds at least 1")
    variants = []
    for variant in args.variant:
        label, _, command = variant.partition("=")
        if not label or not command:
            parser.error(f"--variant {variant!r}: expected LABEL=COMMAND")
        words = shlex.split(command)
        if Path(words[0]).exists():  # the server starts in a directory of its own
            words[0] = str(Path(words[0]).resolve())
        variants.append((label, words))

    binary = args.server or shutil.which("kcoral-server", path=str(Path(sys.executable).parent))
    if not binary:
        parser.error("kcoral-server not found beside this Python; pass --server")
    venv = args.reference_venv if args.reference_venv.is_absolute() \
        else REPO / args.reference_venv
    if not (venv / "bin" / "kcoral").exists():
        parser.error(f"no reference venv at {venv}: run scripts/reference-env.sh")

    results: dict[str, Any] = {
        "benchmark": "roundtrip",
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "program": SOURCE,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "load_before": [round(x, 2) for x in os.getloadavg()]},
        "config": {"workers": args.workers, "requests": args.requests,
                   "reference_requests": args.reference_requests, "warmup": args.warmup,
                   "reference_warmup": args.reference_warmup, "threads": args.threads,
                   "duration_s": args.duration, "client": f"kcoral {kcoral.__version__} (ours)",
                   "large_bytes": args.large_bytes, "large_rounds": args.large_rounds,
                   "large_program": IDENTITY_SOURCE},
        "servers": {},
    }
    with tempfile.TemporaryDirectory(prefix="kcoral-roundtrip-") as scratch:
        # One server at a time, so that none competes with another for the CPUs.
        commands = dict([("ours", [binary]), *variants])
        for index, name in enumerate([*commands, "reference"]):
            directory = Path(scratch) / str(index)
            if name in commands:
                server = start_ours(name, commands[name], args.workers, directory)
                config: dict[str, Any] = {"num_workers": args.workers, "device": "cpu"}
                requests, warmup = args.requests, args.warmup
            else:
                server = start_reference(venv, args.workers, directory)
                config = reference_config(venv, server.command[2:])
                requests, warmup = args.reference_requests, args.reference_warmup
            print(f"{name}: {server.url} ({' '.join(server.command)})", file=sys.stderr,
                  flush=True)
            try:
                health = httpx.get(server.url + "/health", timeout=30).json()
                round_trip = measure_round_trip(server.url, requests, warmup)
                print(f"{name}: round trip median {round_trip['median_ms']:.2f} ms",
                      file=sys.stderr, flush=True)
                throughput = measure_throughput(server.url, args.threads, args.duration)
                print(f"{name}: {throughput['completed_per_s']:.2f} programs/s",
                      file=sys.stderr, flush=True)
                large_data = measure_large(name, server.url, venv, args.large_bytes,
                                           args.large_rounds)
            finally:
                stop(server)
            results["servers"][name] = {
                "command": server.command, "config": config,
                "versions": health.get("versions"), "round_trip": round_trip,
                "throughput": throughput, "large_data": large_data,
            }
    ours, reference = results["servers"]["ours"], results["servers"]["reference"]
    results["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    results["ratios"] = {
        "median_ours_over_reference": _ratio(ours["round_trip"]["median_ms"],
                                             reference["round_trip"]["median_ms"]),
        "p90_ours_over_reference": _ratio(ours["round_trip"]["p90_ms"],
                                          reference["round_trip"]["p90_ms"]),
        "throughput_ours_over_reference": _ratio(ours["throughput"]["completed_per_s"],
                                                 reference["throughput"]["completed_per_s"]),
    }
    results["goals"] = {
        "median_round_trip": results["ratios"]["median_ours_over_reference"]
        <= LATENCY_GOAL_RATIO,
        "throughput": results["ratios"]["throughput_ours_over_reference"]
        >= THROUGHPUT_GOAL_RATIO,
        "back_to_back_queue": ours["round_trip"]["server_queue_median_ms"] <= QUEUE_GOAL_MS,
    }
    if args.large_bytes:
        ours_large = ours["large_data"]["ours"]
        rate = None if "error" in ours_large else ours_large["new"]["gb_per_s"]
        results["goals"]["large_data"] = rate is not None and rate >= LARGE_DATA_GOAL_GB_PER_S
    print(report(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
