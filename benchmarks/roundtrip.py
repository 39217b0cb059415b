#!/usr/bin/env python3
"""Overhead and throughput of kcoral-server against the reference KCoral server, in one run.

Starts both servers itself, on this machine, with the same worker count: ours
(``kcoral-server --device cpu``) and the reference's (``kcoral server --device cpu`` from
PyPI kcoral 0.1.1, with its default settings: what its users get). Then, for each:

(a) round trip: a trivial program (upload a module ``def f(): return 1``, get_function,
    run, return), sent by one client one after another, after a warm-up; the wall time of
    each ``Client.execute`` call, reported as median and p90 in milliseconds;
(b) throughput: 8 threads, each with its own Client, send the same program back to back
    for a fixed time; completed programs per second.

Both servers are driven by our client (in this process), so the difference measured is
the servers'. Prints a table with the ratios and the goal check (our median round trip at
most 1/10 of the reference's, our throughput at least 10x), and with ``--json PATH``
writes every figure, the machine and both servers' configurations there.

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
from server_process import terminate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SOURCE = "def f():\n    return 1\n"
START_SECONDS = 180
# Goals: our median round trip at most this fraction of the reference's; our throughput
# at least this multiple of it.
LATENCY_GOAL_RATIO = 0.1
THROUGHPUT_GOAL_RATIO = 10.0


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


def _launch(name: str, command: list[str], directory: Path) -> Server:
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=directory,
                                   start_new_session=True)
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
    ], directory)  # its event log goes to directory/logs, its default (relative) place
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
    done = subprocess.run([venv / "bin" / "python", "-c", code, *flags],
                          capture_output=True, text=True, timeout=120, check=True)
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


def report(results: dict[str, Any]) -> str:
    ours, reference = results["servers"]["ours"], results["servers"]["reference"]
    goals = results["goals"]
    rows = [
        ("round trip median (ms)", ours["round_trip"]["median_ms"],
         reference["round_trip"]["median_ms"], results["ratios"]["median_ours_over_reference"],
         f"<= {LATENCY_GOAL_RATIO:g}", goals["median_round_trip"]),
        ("round trip p90 (ms)", ours["round_trip"]["p90_ms"], reference["round_trip"]["p90_ms"],
         results["ratios"]["p90_ours_over_reference"], "", None),
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
        lines.append(f"{'':26}{'median ms':>11}{'p90 ms':>9}{'programs/s':>12}"
                     f"{'median - ours':>15}{'/ ours':>8}")
        for name in ["ours", *variants]:
            server = results["servers"][name]
            median = server["round_trip"]["median_ms"]
            rate = server["throughput"]["completed_per_s"]
            lines.append(f"{name[:26]:26}{median:11.2f}{server['round_trip']['p90_ms']:9.2f}{rate:12.1f}"
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
                   "duration_s": args.duration, "client": f"kcoral {kcoral.__version__} (ours)"},
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
            finally:
                stop(server)
            results["servers"][name] = {
                "command": server.command, "config": config,
                "versions": health.get("versions"), "round_trip": round_trip,
                "throughput": throughput,
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
    }
    print(report(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
