"""Scale-out behind HAProxy: deploy/haproxy/kcoral.cfg in front of three CPU servers.

The configuration is the one docs/operating.md shows, with only its bind address, stats socket
and server lines pointed at servers started here on loopback (each with its agent check
on a port of its own). 500 programs go through HAProxy from several threads; each uploads
a blob of its own and one all share, and returns its token and a digest of both, so every
answer can be matched to its program. A third of the way in, one server's process is
killed (SIGKILL, no chance to answer or clean up; its workers must follow it). Programs
caught by it are replayed by HAProxy (retry-on) where their request fits its buffer, and
otherwise by the client, through docs/operating.md's own ``execute_retrying``; every program must
end with exactly one answer, its own. The servers' event logs then say how often programs
ran twice and where cache misses went. The figures are printed (run with -s to see them).

A second test stops a server gracefully and watches its agent take it out of the
rotation (weight 0) while its running program finishes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kcoral
import pytest
from kcoral import Program

from e2e.harness import Server, descendants, wait_until
from e2e.programs import call

HAPROXY = shutil.which("haproxy")
ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "deploy" / "haproxy" / "kcoral.cfg"
GUIDE = ROOT / "docs" / "operating.md"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (Debian: apt-get install haproxy; "
                                                "scripts/setup.sh installs it)"),
]

PROGRAMS = 500
THREADS = 8
KILL_AFTER = PROGRAMS // 3
SHARED_BLOB = hashlib.sha256(b"shared").digest() * 2048  # 64 KiB: more than HAProxy buffers
UNIQUE_BLOB_BYTES = 2048
_AGENT = re.compile(r"agent check on tcp://([0-9.]+):([0-9]+)")

SOURCE = """
import hashlib

def answer(unique, shared):
    return {"token": unique[:32].decode(), "digest": hashlib.sha256(unique + shared).hexdigest()}
"""


# -- HAProxy ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def configured(template: str, port: int, stats_socket: Path, servers: list[tuple[str, Server]]) -> str:
    """The template with its bind, stats socket and server lines replaced; nothing else."""
    lines, seen = [], Counter()
    for line in template.splitlines():
        indent, words = line[:len(line) - len(line.lstrip())], line.split()
        if words[:1] == ["bind"]:
            seen["bind"] += 1
            line = f"{indent}bind 127.0.0.1:{port}"
        elif words[:2] == ["stats", "socket"]:
            seen["stats"] += 1
            line = line.replace(words[2], str(stats_socket))
        elif words[:1] == ["server"]:
            seen["server"] += 1
            if seen["server"] > 1:
                continue
            lines += [f"{indent}server {name} {server.host}:{server.port} agent-port {agent_port(server)}"
                      for name, server in servers]
            continue
        lines.append(line)
    assert (seen["bind"], seen["stats"]) == (1, 1) and seen["server"] >= 1, seen
    return "\n".join(lines) + "\n"


def agent_port(server: Server) -> int:
    for line in server.stdout_lines:
        if match := _AGENT.search(line):
            return int(match.group(2))
    raise AssertionError(f"the server printed no agent port: {server.stdout_lines}")


class Haproxy:
    """HAProxy in the foreground on a config of its own; ``stats()`` reads its stats socket."""

    def __init__(self, directory: Path, servers: list[tuple[str, Server]]) -> None:
        self.socket_path = directory / "haproxy.sock"
        self.config_path = directory / "haproxy.cfg"
        self.log_path = directory / "haproxy.log"
        self.names = [name for name, _ in servers]
        for _ in range(3):  # the free port may be taken meanwhile: then pick another
            self.port = free_port()
            self.config_path.write_text(configured(TEMPLATE.read_text(), self.port, self.socket_path, servers))
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen([HAPROXY, "-f", str(self.config_path), "-db"], stdout=log,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            wait_until(lambda: self.process.poll() is not None or self._answers(), 10.0)
            if self.process.poll() is None and self._answers():
                break
            self.stop()
        assert self.process.poll() is None, self.log_path.read_text()
        self.url = f"http://127.0.0.1:{self.port}"

    def _answers(self) -> bool:
        try:
            self.stats()
            return True
        except OSError:
            return False

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX) as stats:
            stats.settimeout(5)
            stats.connect(str(self.socket_path))
            stats.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := stats.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stats(self) -> dict[str, dict[str, str]]:
        """``show stat`` of the backend: its servers' rows by name, and "BACKEND"."""
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(text.splitlines())
        return {row["svname"]: row for row in rows if row["pxname"] == "kcoral" and row["svname"] != "FRONTEND"}

    def wait_all_up(self, timeout_s: float = 20.0) -> None:
        up = lambda: all(self.stats()[name]["status"] == "UP" for name in self.names)  # noqa: E731
        assert wait_until(up, timeout_s, 0.1), self.stats()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def start_haproxy(tmp_path):
    started: list[Haproxy] = []

    def start(servers: list[tuple[str, Server]]) -> Haproxy:
        started.append(Haproxy(tmp_path, servers))
        return started[-1]

    yield start
    for haproxy in started:
        haproxy.stop()


# -- the client's side ------------------------------------------------------------------------


def token_program(index: int) -> tuple[Program, str, str]:
    """A program, its token, and the digest it must answer with."""
    token = f"{index:05d}-{os.urandom(13).hex()}"  # 32 characters
    unique = token.encode() + os.urandom(UNIQUE_BLOB_BYTES - len(token))
    program = Program()
    module = program.upload(kind="module", source=SOURCE)
    function = program.get_function(module=module, name="answer")
    args = [program.upload(kind="bytes", value=unique), program.upload(kind="bytes", value=SHARED_BLOB)]
    program.return_(key="answer", value=program.run(fn=function, args=args))
    return program, token, hashlib.sha256(unique + SHARED_BLOB).hexdigest()


def readme_block(language: str) -> str:
    """The one block of ``language`` in docs/operating.md's section on HAProxy."""
    text = GUIDE.read_text()
    start = text.index("\n## Scale-out behind HAProxy\n")
    end = text.find("\n## ", start + 1)
    block, = re.findall(rf"```{language}\n(.*?)```", text[start:end if end >= 0 else len(text)], re.S)
    return block


def readme_function(name: str) -> Callable[..., Any]:
    """A function defined by the Python block of docs/operating.md's section on HAProxy."""
    source = readme_block("python")
    namespace: dict[str, Any] = {}
    exec(compile(source, str(GUIDE), "exec"), namespace)
    return namespace[name]


class Recording:
    """A Client that notes why each ``execute`` failed, for docs/operating.md's retrying function."""

    def __init__(self, client: kcoral.Client, reasons: list[str]) -> None:
        self.client, self.reasons = client, reasons

    def execute(self, program: Program, **options: Any) -> kcoral.ProgramResult:
        try:
            return self.client.execute(program, **options)
        except kcoral.KCoralError as error:
            detail = f"HTTP {error.status_code}" if isinstance(error, kcoral.ServerError) else str(error)[:80]
            self.reasons.append(f"{type(error).__name__}: {detail}")
            raise


def event_lines(server_logs: list[Path]) -> list[list[dict[str, Any]]]:
    return [[json.loads(line) for line in (log / "events.jsonl").read_text().splitlines()]
            for log in server_logs]


# -- the tests --------------------------------------------------------------------------------


def test_500_programs_through_haproxy_survive_a_killed_server(start_server, start_haproxy, tmp_path):
    logs = [tmp_path / f"events-{i}" for i in range(3)]
    servers = [(f"kcoral-{i + 1}", start_server("--num-workers", "1", "--agent-port", "0",
                                                "--log-dir", str(logs[i])))
               for i in range(3)]
    haproxy = start_haproxy(servers)
    haproxy.wait_all_up()
    assert {row["weight"] for name, row in haproxy.stats().items() if name != "BACKEND"} == {"100"}

    victim_name, victim = servers[1]
    execute_retrying = readme_function("execute_retrying")
    answered: dict[str, list[dict[str, Any]]] = {}
    expected: dict[str, str] = {}
    client_retries: Counter[str] = Counter()  # why the client sent a program again
    retried_programs = 0
    lock = threading.Lock()
    kill_now = threading.Event()
    weights_seen: dict[str, set[int]] = {name: set() for name, _ in servers}
    sampling = threading.Event()
    local = threading.local()
    clients: list[kcoral.Client] = []  # one per thread

    def sample_weights() -> None:
        while not sampling.wait(0.1) and haproxy.process.poll() is None:
            for name, row in haproxy.stats().items():
                if name in weights_seen and row["status"] == "UP":
                    weights_seen[name].add(int(row["weight"]))

    def run(index: int) -> None:
        nonlocal retried_programs
        if not hasattr(local, "client"):
            local.client = kcoral.Client(haproxy.url, connect_timeout_seconds=10.0, read_timeout_seconds=90.0)
            with lock:
                clients.append(local.client)
        program, token, digest = token_program(index)
        with lock:
            expected[token] = digest
        reasons: list[str] = []
        result = execute_retrying(Recording(local.client, reasons), program, timeout_seconds=60)
        assert result.completed, result.error
        with lock:
            answered.setdefault(result["answer"]["token"], []).append(result["answer"])
            client_retries.update(reasons)
            retried_programs += bool(reasons)
            if len(answered) == KILL_AFTER:
                kill_now.set()

    sampler = threading.Thread(target=sample_weights, daemon=True)
    sampler.start()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(THREADS) as pool:
            futures = [pool.submit(run, index) for index in range(PROGRAMS)]
            assert kill_now.wait(120), "the first third of the programs did not finish in two minutes"
            tree = descendants(victim.pid)
            assert tree  # its zygote, and the worker of the moment if any
            os.kill(victim.pid, signal.SIGKILL)
            killed_at = len(answered)
            errors = [future.exception() for future in futures]
        elapsed_s = time.monotonic() - started
    finally:
        sampling.set()
        sampler.join()
        for client in clients:
            client.close()

    # Every program answered once, with its own token and digest.
    assert [error for error in errors if error is not None] == []
    assert len(answered) == PROGRAMS and answered.keys() == expected.keys()
    assert all(len(answers) == 1 for answers in answered.values())
    assert all(answers[0]["digest"] == expected[token] for token, answers in answered.items())

    # The killed server's workers went with it; HAProxy took it out of the rotation.
    assert victim.process.wait(timeout=10) == -signal.SIGKILL
    victim.check_nothing_left(tree)
    stats = haproxy.stats()
    assert stats[victim_name]["status"].startswith("DOWN"), stats[victim_name]

    # What the servers recorded: executions, replays of answered programs, cache misses.
    records = event_lines(logs)
    completed = [Counter(line["request_id"] for line in lines if line["status"] == "COMPLETED")
                 for lines in records]
    survivors = [completed[0], completed[2]]
    # Only the dead server can have run a program whose answer was lost (and so the program
    # ran again elsewhere, under the same request id when HAProxy replayed it, under a new
    # one when the client did): where a server lived, each request completed once.
    assert all(count == 1 for counter in survivors for count in counter.values())
    assert not survivors[0].keys() & survivors[1].keys()
    executions = sum(sum(counter.values()) for counter in completed)
    ran_twice = executions - PROGRAMS
    assert ran_twice >= 0
    misses = [{line["request_id"] for line in lines if line["status"] == "CACHE_MISS"} for lines in records]
    all_misses = set().union(*misses)
    miss_elsewhere = sum(1 for i in range(3) for rid in misses[i]
                         if any(rid in completed[j] for j in range(3) if j != i))
    below_full = {name: sorted(w for w in seen if w < 100) for name, seen in weights_seen.items()}
    figures = {
        "programs": PROGRAMS, "threads": THREADS, "seconds": round(elapsed_s, 1),
        "killed_after_answers": killed_at,
        "client_retries": dict(client_retries), "programs_retried_by_client": retried_programs,
        "haproxy_retries": int(stats["BACKEND"]["wretr"] or 0),
        "haproxy_redispatches": int(stats["BACKEND"]["wredis"] or 0),
        "haproxy_backend_5xx": int(stats["BACKEND"]["hrsp_5xx"] or 0),
        "executions": executions, "ran_twice": ran_twice,
        "requests_with_cache_miss": len(all_misses), "cache_miss_resolved_elsewhere": miss_elsewhere,
        "completed_per_server": [sum(counter.values()) for counter in completed],
        "agent_weights_below_100": below_full,
    }
    print("haproxy scale-out:", json.dumps(figures))
    # The agents lowered busy servers' weights below their configured weight.
    assert any(below_full.values()), weights_seen


def test_a_stopping_server_leaves_the_rotation_through_its_agent(start_server, start_haproxy):
    servers = [(f"kcoral-{i + 1}", start_server("--num-workers", "1", "--agent-port", "0")) for i in range(2)]
    haproxy = start_haproxy(servers)
    haproxy.wait_all_up()
    (stopping_name, stopping), (_, staying) = servers
    slow = call("import time\ndef slow():\n    time.sleep(3)\n    return 'finished'\n", "slow")
    outcome: dict[str, Any] = {}
    running = threading.Thread(target=lambda: outcome.update(result=stopping.execute(slow)))
    running.start()
    assert wait_until(lambda: stopping.metric("kcoral_workers_busy") == 1, 10.0)
    stopping.signal(signal.SIGTERM)

    # The agent answers 0% (shown as DRAIN), /health 503: out of the rotation at once.
    weight = lambda: haproxy.stats()[stopping_name]["weight"]  # noqa: E731
    assert wait_until(lambda: weight() == "0", 5.0, 0.1), haproxy.stats()[stopping_name]
    with kcoral.Client(haproxy.url, read_timeout_seconds=30) as client:
        for _ in range(5):
            assert client.execute(call("def f():\n    return 1\n", "f")).results["out"] == 1
    running.join(timeout=30)
    assert outcome["result"].results["out"] == "finished"
    assert stopping.wait() == 0
    assert staying.metric('kcoral_execute_requests_total{outcome="completed"}') == 5


def test_the_readme_shows_the_backend_as_the_file_has_it():
    shown = [line.strip() for line in readme_block("haproxy").splitlines() if line.strip()]
    in_file = TEMPLATE.read_text()
    backend = [line.strip() for line in in_file[in_file.index("\nbackend kcoral"):].splitlines()
               if line.strip() and not line.strip().startswith("#")]
    assert shown == backend
