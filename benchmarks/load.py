#!/usr/bin/env python3
"""The front under mixed abuse: many programs through many connections, attacks mixed in.

Starts ``kcoral-server --device cpu`` itself (with a small ``--max-request-bytes``, so
that oversize bodies are cheap to send), then sends ``--programs`` requests (default
10,000) through ``--connections`` concurrent keep-alive connections (default 200), each
request one of these classes, shuffled:

- ``hit``: a program whose blob was uploaded before the run, sent without the blob part;
  expected 200 COMPLETED (a CACHE_MISS, if the server evicted the blob, is resent with it);
- ``miss``: a program referencing a fresh random blob, sent without it; expected 200
  CACHE_MISS naming that blob, then (``--miss-resend-percent``) resent with the blob;
- ``oversize``: a body over the server's request limit (twice it by default), declared
  with Content-Length or sent chunked; expected 413 request_too_large;
- ``slow``: the header (or, after a whole header, the body) sent at a trickle for up to
  ``--slow-seconds``; the server may answer, close, or wait; if it waits, the rest is sent
  at once and the answer awaited. What happened is recorded;
- ``disconnect``: part of a request, or a whole one, then the client closes (FIN or
  RST) without reading; no answer is expected.

Every program is tiny (``def f(token, data)`` returning its own token and the blob's
length), so what is measured is the front, not Python. Every request carries its own
X-Request-ID and every program its own token, so each answer can be checked: a response
is counted *answered* when it arrived complete, a request *lost* when an answer was
expected and none came (closed, reset, timeout), and a response *duplicated* when it
carries a request id or token seen in another response, or one that is not its request's.
A 503 busy is an answer.

A separate process samples the server while the load runs: the front's VmRSS and open
descriptors every ``--sample-ms`` (50), the VmRSS sum and process count of its whole
tree every other sample, and GET /health on a fresh connection every 100 ms. The front's
VmHWM is read at the end. Prints a table; writes everything to
``benchmarks/results/load-<label>.json``.

    .venv/bin/python benchmarks/load.py --label cpu-2core
    .venv/bin/python benchmarks/load.py --label limits --server-arg=--max-connections=150

``--server-arg`` (repeatable; each value is split like a shell word list) passes flags
through to the server, for limits that it grows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import hashlib
import json
import multiprocessing
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its parts, beside it
from load_sampler import fd_kinds, machine_cpu_seconds, own_cpu_seconds, sampler, settle, status_field  # noqa: E402
from load_sampler import http_get, tree_cpu_seconds  # noqa: E402
from load_wire import SOURCE, Link, NoResponse, Response, exchange, execute_request, read_response  # noqa: E402
from load_wire import sha256_hex  # noqa: E402
from server_process import terminate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
START_SECONDS = 180
HIT_BLOB = hashlib.sha256(b"kcoral load benchmark").digest() * 128  # 4 KiB, fixed
MISS_BLOB_BYTES = 64
CLASSES = ("hit", "miss", "oversize", "slow", "disconnect")
KINDS = {
    "hit": ("keep-alive",),
    "miss": ("keep-alive",),
    "oversize": ("content-length", "chunked"),
    "slow": ("header", "body"),
    "disconnect": ("partial-fin", "partial-rst", "full-fin", "full-rst"),
}
# Classes whose requests expect an answer; a slow sender expects one only once it has
# sent its whole request (the server may end it before that).
EXPECTS_ANSWER = {"hit", "miss", "oversize"}


# -- the classes --------------------------------------------------------------------------


@dataclasses.dataclass
class Job:
    index: int
    cls: str
    kind: str


@dataclasses.dataclass
class Record:
    """What happened to one job: its outcome, and every response it received."""

    job: Job
    outcome: str = ""
    answered: bool = False
    lost: bool = False
    latency_ms: float | None = None
    # Slow senders: when the server answered or closed during the trickle; latency_ms is
    # then from the rest of the request to the answer, when the server waited.
    reaction_s: float | None = None
    sent_ids: list[str] = dataclasses.field(default_factory=list)
    expected: str | None = None  # the token string a COMPLETED response must return
    # (X-Request-ID header, body request_id, returned token) of each response.
    received: list[tuple[str | None, str | None, str | None]] = dataclasses.field(
        default_factory=list)

    def note(self, response: Response) -> None:
        body = response.json()
        token = None
        results = body.get("results")
        if isinstance(results, dict) and isinstance(results.get("token"), dict):
            token = results["token"].get("value")
        self.received.append((response.headers.get("x-request-id"), body.get("request_id"),
                              token))


class Loader:
    """Runs jobs on one connection at a time; one Loader per concurrent connection."""

    def __init__(self, host: str, port: int, args: argparse.Namespace) -> None:
        self.link = Link(host, port)
        self.host = f"{host}:{port}"
        self.args = args
        self.oversize_blob = b"\xa5" * args.oversize_bytes

    def _request(self, record: Record, token: str, blob_sha: str, blob: bytes | None = None,
                 chunked: bool = False) -> tuple[bytes, list[bytes]]:
        request_id = str(uuid.uuid4())
        record.sent_ids.append(request_id)
        return execute_request(self.host, request_id, token, blob_sha, blob, chunked)

    async def run(self, job: Job) -> Record:
        record = Record(job)
        try:
            await getattr(self, job.cls)(record, f"t{job.index}-{uuid.uuid4().hex[:12]}")
        except NoResponse as error:
            record.lost = job.cls in EXPECTS_ANSWER
            record.outcome = f"lost: {error.reason}" if record.lost else error.reason
        return record

    async def _program(self, record: Record, token: str, blob_sha: str, blob: bytes) -> None:
        """A program sent without its blob, and again with it after a CACHE_MISS."""
        record.expected = f"{token}:{len(blob)}"
        start = time.perf_counter()
        outcome = []
        head, pieces = self._request(record, token, blob_sha)
        response = await exchange(self.link, head, pieces, self.args.response_timeout)
        record.note(response)
        outcome.append(response.label())
        missed = response.label() == "200 CACHE_MISS"
        if missed and response.json().get("missing_blobs") != [blob_sha]:
            outcome.append("(wrong missing_blobs)")
        resend = missed and (record.job.cls == "hit" or
                             random.random() * 100 < self.args.miss_resend_percent)
        if resend:
            head, pieces = self._request(record, token, blob_sha, blob)
            response = await exchange(self.link, head, pieces, self.args.response_timeout)
            record.note(response)
            outcome.append(f"-> {response.label()}")
        record.latency_ms = (time.perf_counter() - start) * 1e3
        record.answered = True
        if response.label() == "200 COMPLETED" and record.received[-1][2] != record.expected:
            outcome.append("(wrong token)")
        record.outcome = " ".join(outcome)

    async def hit(self, record: Record, token: str) -> None:
        await self._program(record, token, sha256_hex(HIT_BLOB), HIT_BLOB)

    async def miss(self, record: Record, token: str) -> None:
        blob = os.urandom(MISS_BLOB_BYTES)
        await self._program(record, token, sha256_hex(blob), blob)

    async def oversize(self, record: Record, token: str) -> None:
        chunked = record.job.kind == "chunked"
        head, pieces = self._request(record, token, sha256_hex(self.oversize_blob),
                                     self.oversize_blob, chunked)
        start = time.perf_counter()
        response = await exchange(self.link, head, pieces, self.args.response_timeout)
        record.latency_ms = (time.perf_counter() - start) * 1e3
        record.note(response)
        record.answered = True
        record.outcome = response.label()
        self.link.close()  # the rest of the body may still be unsent

    async def slow(self, record: Record, token: str) -> None:
        blob = HIT_BLOB
        record.expected = f"{token}:{len(blob)}"
        head, pieces = self._request(record, token, sha256_hex(blob))
        body = b"".join(pieces)
        # What is sent at once, what trickles (never all of it), and the rest.
        prompt, trickle = (b"", head) if record.job.kind == "header" else (head, body)
        rest = (body if record.job.kind == "header" else b"")
        trickle, rest = trickle[:-1], trickle[-1:] + rest
        await self.link.open()
        reader, writer = self.link.reader, self.link.writer
        assert reader is not None and writer is not None
        answer = asyncio.create_task(read_response(reader))
        start = time.perf_counter()
        interval = 1.0 / self.args.slow_bytes_per_second
        sent = 0
        try:
            writer.write(prompt)
            while time.perf_counter() - start < self.args.slow_seconds and not answer.done():
                if sent < len(trickle):
                    writer.write(trickle[sent:sent + 1])
                    sent += 1
                    await writer.drain()
                await asyncio.wait({answer}, timeout=interval)
        except OSError:  # the server closed it: the reader sees how within moments
            await asyncio.wait({answer}, timeout=5)
        if answer.done():
            record.reaction_s = time.perf_counter() - start
            try:
                response = answer.result()
            except NoResponse as error:
                record.outcome = f"server {error.reason} during trickle"
            else:
                record.note(response)
                record.answered = True
                record.outcome = f"{response.label()} during trickle"
            self.link.close()
            return
        # The server waited the whole trickle: send the rest, and expect an answer.
        rest_sent = time.perf_counter()
        with contextlib.suppress(OSError):
            writer.write(trickle[sent:] + rest)
            await writer.drain()
        try:
            response = await asyncio.wait_for(answer, self.args.response_timeout)
        except asyncio.TimeoutError:
            self.link.close()
            record.outcome, record.lost = "lost: timeout after trickle", True
            return
        except NoResponse as error:
            self.link.close()
            record.outcome, record.lost = f"lost: {error.reason} after trickle", True
            return
        record.latency_ms = (time.perf_counter() - rest_sent) * 1e3
        record.note(response)
        record.answered = True
        record.outcome = f"{response.label()} after trickle"
        if response.closes():
            self.link.close()

    async def disconnect(self, record: Record, token: str) -> None:
        blob = HIT_BLOB
        head, pieces = self._request(record, token, sha256_hex(blob))
        body = b"".join(pieces)
        partial = record.job.kind.startswith("partial")
        await self.link.open()
        assert self.link.writer is not None
        with contextlib.suppress(OSError):
            self.link.writer.write(head + (body[:len(body) // 2] if partial else body))
            await self.link.writer.drain()
        self.link.close(reset=record.job.kind.endswith("rst"))
        record.outcome = "closed by the client"


# -- the plan and the run -----------------------------------------------------------------


def plan(total: int, mix: dict[str, float], seed: int) -> list[Job]:
    """The jobs, shuffled; slow senders only in the first 70%, so that the last of them
    does not hold the run open after everything else is done."""
    weight = sum(mix.values())
    exact = {cls: total * share / weight for cls, share in mix.items()}
    counts = {cls: int(value) for cls, value in exact.items()}
    for cls in sorted(exact, key=lambda c: exact[c] - counts[c], reverse=True):
        if sum(counts.values()) == total:
            break
        counts[cls] += 1
    rng = random.Random(seed)
    jobs: list[tuple[str, str]] = []
    for cls, count in counts.items():
        jobs += [(cls, KINDS[cls][i % len(KINDS[cls])]) for i in range(count)]
    fast = [job for job in jobs if job[0] != "slow"]
    rng.shuffle(fast)
    for job in (job for job in jobs if job[0] == "slow"):
        fast.insert(rng.randint(0, int(len(fast) * 0.7)), job)
    return [Job(index, cls, kind) for index, (cls, kind) in enumerate(fast)]


async def loop_lag(stop: asyncio.Event, lags_ms: list[float]) -> None:
    """How late this process's event loop wakes up: the client's own share of latency."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.05)
        lags_ms.append((time.perf_counter() - start - 0.05) * 1e3)


async def drive(host: str, port: int, jobs: list[Job], args: argparse.Namespace) -> tuple[
        list[Record], float, list[float]]:
    records: list[Record] = []
    queue = iter(jobs)
    stop = asyncio.Event()
    lags_ms: list[float] = []

    async def connection() -> None:
        loader = Loader(host, port, args)
        for job in queue:
            records.append(await loader.run(job))
        loader.link.close()

    async def progress(start: float) -> None:
        while not stop.is_set():
            await asyncio.sleep(10)
            outcomes = Counter("lost" if r.lost else "answered" if r.answered else "other"
                               for r in records)
            print(f"  {time.perf_counter() - start:6.1f} s: {len(records)}/{len(jobs)} done, "
                  f"{dict(outcomes)}", file=sys.stderr, flush=True)

    start = time.perf_counter()
    lag = asyncio.create_task(loop_lag(stop, lags_ms))
    ticker = asyncio.create_task(progress(start))
    await asyncio.gather(*(connection() for _ in range(args.connections)))
    elapsed = time.perf_counter() - start
    stop.set()
    ticker.cancel()
    await lag
    return records, elapsed, lags_ms


# -- the server ---------------------------------------------------------------------------


@dataclasses.dataclass
class Server:
    command: list[str]
    process: subprocess.Popen[bytes]
    log: Path
    host: str = ""
    port: int = 0

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def start_server(command: list[str], directory: Path) -> Server:
    log = directory / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=directory,
                                   start_new_session=True)
    server = Server(command, process, log)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}:\n{server.log_tail()}")
        text = log.read_text(errors="replace")
        if not server.port and "listening on http://" in text:
            address = text.split("listening on http://", 1)[1].split()[0].rstrip("/")
            host, _, port = address.rpartition(":")
            server.host, server.port = host.strip("[]"), int(port)
        if server.port:
            with contextlib.suppress(OSError, ValueError, IndexError):
                if http_get(server.host, server.port, "/health", 5)[0] == 200:
                    return server
        time.sleep(0.2)
    stop_server(server)
    raise SystemExit(f"the server was not healthy in {START_SECONDS} s:\n{server.log_tail()}")


def stop_server(server: Server) -> dict[str, Any]:
    """SIGTERM, then the time it took to exit and its exit code."""
    start = time.monotonic()
    terminate(server.process)
    return {"exit_seconds": round(time.monotonic() - start, 3),
            "returncode": server.process.returncode}


def binary_facts(binary: str) -> dict[str, Any]:
    """Which server this was: the server changes under this benchmark, and its flags say
    which limits it had."""
    path = Path(binary).resolve()
    help_text = subprocess.run([str(path), "--help"], capture_output=True, text=True,
                               timeout=30).stdout
    flags = sorted({word.split("=")[0] for word in help_text.split()
                    if word.startswith("--") and len(word) > 2})
    stat = path.stat()
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout
    return {"path": str(path), "sha256": sha256_hex(path.read_bytes()),
            "modified": datetime.datetime.fromtimestamp(stat.st_mtime,
                                                        datetime.timezone.utc).isoformat(),
            "flags": flags, "repository_head": head.strip(),
            "repository_dirty": bool(dirty.strip())}


def warm_up(server: Server) -> None:
    """Uploads the hit blob (so that every ``hit`` is a cache hit) and runs a few programs."""

    async def run() -> None:
        link = Link(server.host, server.port)
        for index in range(5):
            token = f"warm-{index}"
            head, pieces = execute_request(f"{server.host}:{server.port}", str(uuid.uuid4()),
                                           token, sha256_hex(HIT_BLOB), HIT_BLOB)
            response = await exchange(link, head, pieces, 60)
            value = (response.json().get("results") or {}).get("token", {}).get("value")
            if value != f"{token}:{len(HIT_BLOB)}":
                raise SystemExit(f"warm-up program failed: {response.status} "
                                 f"{response.body[:500]!r}")
        link.close()

    asyncio.run(run())


def server_metrics(server: Server) -> dict[str, float]:
    """The server's counters at the end (kcoral_* samples of /metrics, no histograms)."""
    try:
        status, body = http_get(server.host, server.port, "/metrics", 10)
    except OSError as error:
        return {"error": type(error).__name__}  # type: ignore[dict-item]
    values = {}
    for line in body.decode(errors="replace").splitlines():
        if line and not line.startswith("#") and "_bucket{" not in line:
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[name] = float(value)
    return values


# -- the report ---------------------------------------------------------------------------


def percentile(samples: list[float], fraction: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _latency(samples: list[float]) -> dict[str, Any]:
    return {"count": len(samples), "p50_ms": percentile(samples, 0.5),
            "p99_ms": percentile(samples, 0.99), "max_ms": max(samples, default=None)}


def summarize(records: list[Record]) -> dict[str, Any]:
    """Per class and overall: answered, lost, duplicated, outcomes, latencies."""
    ids = Counter(i for r in records for h, b, _ in r.received for i in {h, b} if i)
    tokens = Counter(t for r in records for _, _, t in r.received if t)
    classes: dict[str, Any] = {}
    overall = Counter()
    for cls in CLASSES:
        mine = [r for r in records if r.job.cls == cls]
        duplicated = 0
        for r in mine:
            for header_id, body_id, token in r.received:
                foreign = any(i is not None and i not in r.sent_ids for i in (header_id, body_id))
                foreign = foreign or (token is not None and token != r.expected)
                seen_twice = (ids[header_id] > 1 or (body_id != header_id and ids[body_id] > 1)
                              or (token is not None and tokens[token] > 1))
                duplicated += foreign or seen_twice
        counts = {"sent": len(mine), "answered": sum(r.answered for r in mine),
                  "lost": sum(r.lost for r in mine), "duplicated": duplicated}
        overall.update(counts)
        entry: dict[str, Any] = {
            **counts,
            "by_kind": {kind: dict(Counter(r.outcome for r in mine if r.job.kind == kind)
                                   .most_common()) for kind in KINDS[cls]},
            "outcomes": dict(Counter(r.outcome for r in mine).most_common()),
            "latency": _latency([r.latency_ms for r in mine if r.latency_ms is not None]),
        }
        if cls == "slow":
            entry["reaction"] = _latency([r.reaction_s * 1e3 for r in mine
                                          if r.reaction_s is not None])
        classes[cls] = entry
    programs = [r.latency_ms for r in records if r.job.cls in ("hit", "miss")
                and r.latency_ms is not None and r.outcome.endswith("200 COMPLETED")]
    return {"classes": classes, "overall": dict(overall),
            "completed_programs": _latency(programs),
            "responses_seen_twice": {"request_ids": sum(1 for n in ids.values() if n > 1),
                                     "tokens": sum(1 for n in tokens.values() if n > 1)}}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def report(results: dict[str, Any]) -> str:
    summary = results["summary"]
    lines = [f"{'class':11}{'sent':>7}{'answered':>10}{'lost':>6}{'dup':>5}"
             f"{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"]
    for cls, entry in [*summary["classes"].items(), ("all", summary["overall"])]:
        latency = entry.get("latency", {})
        lines.append(f"{cls:11}{entry['sent']:7}{entry['answered']:10}{entry['lost']:6}"
                     f"{entry['duplicated']:5}{_ms(latency.get('p50_ms')):>9}"
                     f"{_ms(latency.get('p99_ms')):>9}{_ms(latency.get('max_ms')):>9}")
    programs = summary["completed_programs"]
    lines.append(f"completed programs (hit, miss): {programs['count']}, p50 "
                 f"{_ms(programs['p50_ms'])} ms, p99 {_ms(programs['p99_ms'])} ms; "
                 f"{results['programs_per_s']:.1f} programs/s over {results['elapsed_s']:.1f} s")
    lines.append("outcomes:")
    for cls, entry in summary["classes"].items():
        for kind, outcomes in entry["by_kind"].items():
            if not outcomes:
                continue
            text = ", ".join(f"{n} {o}" for o, n in outcomes.items())
            lines.append(f"  {cls}/{kind}: {text}")
    slow = summary["classes"]["slow"]
    reacted = slow["reaction"]
    if slow["sent"]:
        when = (f", at p50 {_ms(reacted['p50_ms'])} ms, max {_ms(reacted['max_ms'])} ms"
                if reacted["count"] else "")
        lines.append(f"  slow: the server reacted (answered or closed) to {reacted['count']} of "
                     f"{slow['sent']} during the {results['config']['slow_seconds']:g} s trickle"
                     f"{when}; the latency above is from the rest of the request to the answer")
    health = results["health"]
    lines.append(f"/health during the load: {health['probes']} probes, {health['ok']} ok, "
                 f"{health['failed']} not ok {health['not_ok']}; p50 {_ms(health['p50_ms'])} ms, "
                 f"p99 {_ms(health['p99_ms'])} ms, max {_ms(health['max_ms'])} ms")
    r = results["resources"]
    mib = 1 << 20
    lines.append(f"front: peak VmRSS {r['front_rss_peak'] / mib:.1f} MiB (VmHWM "
                 f"{r['front_vmhwm'] / mib:.1f} MiB; {r['front_rss_before'] / mib:.1f} before, "
                 f"{r['front_rss_after'] / mib:.1f} after); descriptors peak {r['front_fds_peak']} "
                 f"({r['front_fds_before']} before, {r['front_fds_after']} "
                 f"{r['front_fds_settle_s']} s after the load: {r['front_fd_kinds_after']})")
    lines.append(f"process tree: peak VmRSS sum {r['tree_rss_peak'] / mib:.1f} MiB, "
                 f"peak {r['tree_processes_peak']} processes")
    lag = results["client_loop_lag"]
    lines.append(f"client event loop lag: p50 {_ms(lag['p50_ms'])} ms, "
                 f"p99 {_ms(lag['p99_ms'])} ms, "
                 f"max {_ms(lag['max_ms'])} ms; server exit after SIGTERM "
                 f"{results['server']['shutdown']['exit_seconds']} s, code "
                 f"{results['server']['shutdown']['returncode']}")
    cpu = results["cpu_s"]
    lines.append(f"CPU seconds during the load: {cpu['machine_busy']:.0f} of "
                 f"{cpu['available']:.0f} "
                 f"busy: server tree {cpu['server_tree']:.0f}, client {cpu['client']:.0f}, sampler "
                 f"{cpu['sampler']:.0f}, other processes {cpu['others']:.0f}")
    machine = results["machine"]
    lines.append(f"{results['config']['programs']} requests, {results['config']['connections']} "
                 f"connections; {machine['cpus']} CPUs, load average {machine['load_before']} "
                 f"before, {machine['load_after']} after")
    return "\n".join(lines)


def health_summary(samples: list[tuple[float, float, str]]) -> dict[str, Any]:
    ok = [ms for _, ms, outcome in samples if outcome == "200"]
    not_ok = Counter(outcome for _, _, outcome in samples if outcome != "200")
    worst = sorted(samples, key=lambda sample: sample[1], reverse=True)[:5]
    return {"probes": len(samples), "ok": len(ok), "failed": sum(not_ok.values()),
            "not_ok": dict(not_ok), **_latency([ms for _, ms, _ in samples]),
            "worst": [{"at_s": round(at, 2), "ms": round(ms, 2), "outcome": outcome}
                      for at, ms, outcome in worst]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=10_000, help="requests (default 10000)")
    parser.add_argument("--connections", type=int, default=200,
                        help="concurrent client connections (default 200)")
    for cls, share in (("hit", 55), ("miss", 15), ("oversize", 10), ("slow", 1),
                       ("disconnect", 19)):
        parser.add_argument(f"--{cls}-percent", type=float, default=share,
                            help=f"share of {cls} requests (default {share}; shares are "
                                 "normalized to their sum)")
    parser.add_argument("--miss-resend-percent", type=float, default=100,
                        help="misses resent with their blob after the CACHE_MISS (default 100)")
    parser.add_argument("--max-request-bytes", type=int, default=1 << 20,
                        help="the server's --max-request-bytes (default 1 MiB)")
    parser.add_argument("--oversize-bytes", type=int,
                        help="body size of oversize requests (default twice the limit)")
    parser.add_argument("--slow-seconds", type=float, default=30,
                        help="how long a slow sender trickles before sending the rest (default 30)")
    parser.add_argument("--slow-bytes-per-second", type=float, default=2,
                        help="the trickle's rate, one byte at a time (default 2)")
    parser.add_argument("--response-timeout", type=float, default=120,
                        help="seconds to wait for an answer before counting it lost (default 120)")
    parser.add_argument("--num-workers", type=int, default=2,
                        help="the server's workers (default 2)")
    parser.add_argument("--server", default=os.environ.get("KCORAL_SERVER"),
                        help="kcoral-server (default: beside this Python, or $KCORAL_SERVER)")
    parser.add_argument("--server-arg", action="append", default=[], metavar="FLAGS",
                        help="more server flags, split like a shell would (repeatable; write "
                             "--server-arg=--flag=value)")
    parser.add_argument("--sample-ms", type=float, default=50,
                        help="resource sampling period (default 50 ms)")
    parser.add_argument("--seed", type=int, default=1, help="shuffle seed (default 1)")
    parser.add_argument("--label", default=f"cpu-{os.cpu_count()}core",
                        help="names the result file load-LABEL.json (default cpu-<cores>core)")
    parser.add_argument("--json", type=Path,
                        help="result path (default benchmarks/results/load-LABEL.json)")
    args = parser.parse_args()
    args.oversize_bytes = args.oversize_bytes or 2 * args.max_request_bytes
    mix = {cls: getattr(args, f"{cls}_percent") for cls in CLASSES}
    if min(mix.values()) < 0 or sum(mix.values()) <= 0:
        parser.error("the percentages must be >= 0 and not all 0")
    binary = args.server or shutil.which("kcoral-server", path=str(Path(sys.executable).parent))
    if not binary:
        parser.error("kcoral-server not found beside this Python; pass --server")
    extra = [word for flags in args.server_arg for word in shlex.split(flags)]
    command = [str(Path(binary).resolve()), "--device", "cpu", "--port", "0", "--num-workers",
               str(args.num_workers), "--max-request-bytes", str(args.max_request_bytes), *extra]
    json_path = args.json or REPO / "benchmarks" / "results" / f"load-{args.label}.json"

    jobs = plan(args.programs, mix, args.seed)
    facts = binary_facts(binary)
    results: dict[str, Any] = {
        "benchmark": "load", "label": args.label,
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "load_before": [round(x, 2) for x in os.getloadavg()]},
        "config": {"programs": args.programs, "connections": args.connections,
                   "mix_counts": dict(Counter(job.cls for job in jobs)),
                   "mix_percent": mix, "miss_resend_percent": args.miss_resend_percent,
                   "max_request_bytes": args.max_request_bytes,
                   "oversize_bytes": args.oversize_bytes, "slow_seconds": args.slow_seconds,
                   "slow_bytes_per_second": args.slow_bytes_per_second,
                   "response_timeout_s": args.response_timeout, "sample_ms": args.sample_ms,
                   "seed": args.seed, "program": SOURCE},
    }
    with tempfile.TemporaryDirectory(prefix="kcoral-load-") as scratch:
        server = start_server(command, Path(scratch))
        print(f"server: http://{server.host}:{server.port} ({' '.join(command)})",
              file=sys.stderr, flush=True)
        try:
            _, health_body = http_get(server.host, server.port, "/health", 10)
            warm_up(server)
            pid = server.process.pid
            before = {"front_rss_before": status_field(pid, "VmRSS"),
                      "front_fds_before": len(os.listdir(f"/proc/{pid}/fd"))}
            kinds_before = fd_kinds(pid)
            context = multiprocessing.get_context("fork")
            stop = context.Event()
            receive, send = context.Pipe(duplex=False)
            probe = context.Process(target=sampler, args=(pid, server.host, server.port,
                                                          args.sample_ms / 1e3, stop, send))
            probe.start()
            cpu_before = (machine_cpu_seconds(), tree_cpu_seconds(pid), own_cpu_seconds())
            records, elapsed, lags_ms = asyncio.run(drive(server.host, server.port, jobs, args))
            machine_cpu, server_cpu, client_cpu = (
                after - before for after, before in zip(
                    (machine_cpu_seconds(), tree_cpu_seconds(pid), own_cpu_seconds()), cpu_before))
            stop.set()
            sampled = receive.recv()
            probe.join()
            settle_s, fds_after = settle(pid, kinds_before.get("tcp", 0))
            after = {"front_rss_after": status_field(pid, "VmRSS"),
                     "front_fds_after": fds_after, "front_fds_settle_s": round(settle_s, 2),
                     "front_fd_kinds_before": kinds_before, "front_fd_kinds_after": fd_kinds(pid),
                     "front_vmhwm": status_field(pid, "VmHWM")}
            metrics = server_metrics(server)
        finally:
            shutdown = stop_server(server)
        log_tail = server.log_tail()

    summary = summarize(records)
    completed = summary["completed_programs"]["count"]
    results.update({
        "elapsed_s": elapsed, "programs_per_s": completed / elapsed,
        "server": {"command": command, "binary": facts,
                   "health": json.loads(health_body),
                   "shutdown": shutdown, "log_tail": log_tail},
        "summary": summary,
        "health": health_summary(sampled["health"]),
        "resources": {**before, **after,
                      **{f"{key}_peak": value for key, value in sampled["peaks"].items()},
                      "series_per_second": sampled["series"]},
        "client_loop_lag": _latency(lags_ms),
        # CPU seconds during the load, all cores together: the server's process tree, this
        # client, the sampling process (its whole life), and the rest of the machine.
        "cpu_s": {"available": elapsed * (os.cpu_count() or 1), "machine_busy": machine_cpu,
                  "server_tree": server_cpu, "client": client_cpu, "sampler": sampled["cpu_s"],
                  "others": machine_cpu - server_cpu - client_cpu - sampled["cpu_s"]},
        "server_metrics": metrics,
    })
    results["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(report(results))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {json_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
