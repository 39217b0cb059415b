"""Fixtures of the compatibility suite: both servers, the reference venv, and every outcome.

Our ``kcoral-server`` (beside this interpreter, or ``$KCORAL_SERVER``) starts on port 0;
the reference server (``kcoral server --device cpu`` from the venv that
``scripts/reference-env.sh`` makes, or ``$KCORAL_REFERENCE_VENV``) on a free port picked
here, as it has no port-0 mode. Both get the same worker count and are stopped at the end
of the session.

Every case of ``programs.CASES`` is run once per (client, server) pair by the session
fixture ``outcomes``; the tests then only compare. The reference client runs in a
subprocess (``reference_driver.py``) while our client runs in this process, each on the
other server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import kcoral
from harness import build_wire, run_case  # type: ignore[import-not-found]
from cases import CASES  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
REFERENCE_VERSION = "0.1.1"
NUM_WORKERS = 2
SERVER_START_SECONDS = 120
# The reference server starts a fresh worker process per request; on a two-core machine
# the whole run of the reference side takes a few minutes at worst.
DRIVER_SECONDS = 480
CLIENT_READ_TIMEOUT_SECONDS = 90

# The reference retires a worker after each request by default, and starting one (Python,
# numpy, its runtime) costs a core-second or more; reusing workers takes the suite from
# about six minutes to about one on two cores. It runs each program the same way either
# way (a fresh namespace and workspace per request, its state reset after each);
# KCORAL_COMPAT_REFERENCE_FRESH_WORKERS=1 restores the default.
REFERENCE_WORKER_REUSE = (
    [] if os.environ.get("KCORAL_COMPAT_REFERENCE_FRESH_WORKERS") == "1"
    else ["--max-requests-per-worker", "0"]
)

SERVERS = ("ours", "reference")
CLIENTS = ("ours", "reference")


def reference_venv() -> Path:
    path = Path(os.environ.get("KCORAL_REFERENCE_VENV", ".cache/reference-venv"))
    return path if path.is_absolute() else REPO / path


@pytest.fixture(scope="session")
def reference_python() -> Path:
    """The reference venv's Python; skipped only when asked to be optional."""
    venv = reference_venv()
    python, launcher = venv / "bin" / "python", venv / "bin" / "kcoral"
    if not (python.exists() and launcher.exists()):
        how = (f"no reference venv at {venv} (kcoral[server]=={REFERENCE_VERSION}); create it "
               "with scripts/reference-env.sh, or point KCORAL_REFERENCE_VENV at one")
        if os.environ.get("KCORAL_COMPAT_OPTIONAL") == "1":
            pytest.skip(how + " (skipped: KCORAL_COMPAT_OPTIONAL=1)")
        pytest.fail(how + "; set KCORAL_COMPAT_OPTIONAL=1 to skip the suite instead",
                    pytrace=False)
    version = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('kcoral'))"],
        capture_output=True, text=True, timeout=60, check=False).stdout.strip()
    if version != REFERENCE_VERSION:
        pytest.fail(f"{venv} holds kcoral {version or '(none)'}, not {REFERENCE_VERSION}; "
                    "rerun scripts/reference-env.sh", pytrace=False)
    return python


@dataclass
class Server:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    command: list[str]

    def log_tail(self, size: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-size:]


def _our_server_binary() -> str:
    explicit = os.environ.get("KCORAL_SERVER")
    found = explicit or shutil.which("kcoral-server", path=str(Path(sys.executable).parent)) \
        or shutil.which("kcoral-server")
    if not found:
        pytest.fail("kcoral-server not found beside this Python or on PATH (set KCORAL_SERVER)",
                    pytrace=False)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(name: str, command: list[str], directory: Path) -> subprocess.Popen[bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "server.log", "wb") as log:
        # Its own session, so teardown can signal whatever it leaves behind.
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=directory,
                                start_new_session=True)


def _wait_healthy(server: Server, deadline: float) -> None:
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} server exited ({server.process.returncode}):\n"
                               + server.log_tail())
        try:
            if httpx.get(server.url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{server.name} server not healthy in {SERVER_START_SECONDS} s:\n"
                       + server.log_tail())


def start_our_server(directory: Path) -> Server:
    command = [_our_server_binary(), "--port", "0", "--num-workers", str(NUM_WORKERS)]
    process = _start("ours", command, directory)
    log = directory / "server.log"
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "listening on http://" in text:
            url = text.split("listening on ", 1)[1].split()[0]
            server = Server("ours", url, process, log, command)
            _wait_healthy(server, deadline)
            return server
        if process.poll() is not None:
            break
        time.sleep(0.05)
    stop(Server("ours", "", process, log, command))
    raise RuntimeError("our server did not report its port:\n" + log.read_text()[-4000:])


def start_reference_server(python: Path, directory: Path) -> Server:
    """``kcoral server --device cpu``; a port taken meanwhile is retried with another."""
    for _attempt in range(3):
        port = _free_port()
        command = [
            str(python.parent / "kcoral"), "server", "--device", "cpu",
            "--host", "127.0.0.1", "--port", str(port), "--num-workers", str(NUM_WORKERS),
            # No bubblewrap on most test machines; no logs. The file cache (where it keeps
            # file-upload blobs) is fresh, so nothing outlives the run.
            "--sandbox", "none", "--log-dir", "",
            "--disk-cache-dir", str(directory / "file-cache"),
            *REFERENCE_WORKER_REUSE,
        ]
        process = _start("reference", command, directory)
        server = Server("reference", f"http://127.0.0.1:{port}", process,
                        directory / "server.log", command)
        try:
            _wait_healthy(server, time.monotonic() + SERVER_START_SECONDS)
            return server
        except RuntimeError:
            stop(server)
            if "address already in use" not in server.log_tail().lower():
                raise
    raise RuntimeError("could not find a free port for the reference server")


def stop(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=30)
    # Anything left in the server's session (not the workers that made their own).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.process.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def servers(reference_python: Path) -> Iterator[dict[str, Server]]:
    # Not under pytest's basetemp: a pytest session started meanwhile on the same machine
    # may prune it, and the reference server keeps its file cache here.
    with tempfile.TemporaryDirectory(prefix="kcoral-compat-servers-") as scratch:
        root = Path(scratch)
        started: dict[str, Server] = {}
        try:
            started["ours"] = start_our_server(root / "ours")
            started["reference"] = start_reference_server(reference_python, root / "reference")
            yield started
        finally:
            for server in started.values():
                stop(server)


def our_client(url: str) -> kcoral.Client:
    return kcoral.Client(url, read_timeout_seconds=CLIENT_READ_TIMEOUT_SECONDS)


Outcomes = dict[tuple[str, str], dict[str, Any]]


def _run_our_case(case: Any, server: Server, nonce: str) -> dict[str, Any]:
    """As the reference driver does: an error of one case is that case's outcome."""
    try:
        return run_case(case, kcoral.Program, our_client, server.url, nonce)
    except Exception:  # noqa: BLE001
        alive = "running" if server.process.poll() is None else "EXITED"
        return {"harness_error": traceback.format_exc(),
                "server": f"{alive}; log tail: {server.log_tail(1000)}"}


@pytest.fixture(scope="session")
def outcomes(servers: dict[str, Server], reference_python: Path) -> Outcomes:
    """(client, server) -> case name -> normalized outcome, for every case.

    Two rounds; in each, the reference client (a subprocess) works on one server while
    ours works on the other, so no server ever has two clients at once: the cases test
    what a program gives, and test_concurrency.py what concurrent clients get.
    """
    token = uuid.uuid4().hex[:12]
    names = [case.name for case in CASES]
    collected: Outcomes = {}
    deadline = time.monotonic() + DRIVER_SECONDS
    for reference_on, ours_on in (("reference", "ours"), ("ours", "reference")):
        driver = subprocess.Popen(
            [reference_python, HERE / "reference_driver.py", "--url",
             servers[reference_on].url, "--nonce", f"{token}-reference-{reference_on}", *names],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=HERE, text=True)
        try:
            collected["ours", ours_on] = {
                case.name: _run_our_case(case, servers[ours_on], f"{token}-ours-{ours_on}")
                for case in CASES
            }
            stdout, stderr = driver.communicate(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
        found = {line["case"]: line["outcome"]
                 for line in map(json.loads, stdout.splitlines()) if "case" in line}
        collected["reference", reference_on] = {
            name: found.get(name, {"driver_missing": stderr[-4000:]}) for name in names
        }
    dump = os.environ.get("KCORAL_COMPAT_DUMP")
    if dump:  # every outcome, for looking into a failure
        Path(dump).write_text(json.dumps(
            {f"{client}_client-{server}_server": by_case
             for (client, server), by_case in collected.items()}, indent=1))
    return collected


@pytest.fixture(scope="session")
def wires(reference_python: Path) -> dict[str, dict[str, Any]]:
    """builder ("ours"/"reference") -> case name -> the wire its Program makes."""
    nonce = "wire"
    names = [case.name for case in CASES]
    done = subprocess.run([reference_python, HERE / "reference_driver.py", "--wire",
                           "--nonce", nonce, *names],
                          capture_output=True, text=True, cwd=HERE, timeout=120, check=True)
    reference = {line["case"]: line["wire"]
                 for line in map(json.loads, done.stdout.splitlines())}
    ours = {name: build_wire(name, kcoral.Program, nonce) for name in names}
    return {"ours": ours, "reference": reference}
