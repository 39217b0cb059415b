"""The real kcoral-server as a test harness: start on port 0, request, stop, check leftovers.

:class:`Server` starts the binary (``$KCORAL_SERVER``, else ``kcoral-server`` beside
``sys.executable``) with ``--port 0`` and its own ``--work-root``, reads the port from the
line it prints once listening, and offers request helpers that always carry a timeout.
Stopping sends SIGTERM, waits, kills if need be, and checks that nothing was left: no
process that descended from the server (read from /proc just before the stop), none naming
its work root, no file under it. The fixtures in ``test/python/conftest.py`` build on this.
"""

from __future__ import annotations

import os
import queue
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import kcoral
import pytest

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 60.0
_LISTENING = re.compile(r"listening on http://([0-9.]+):([0-9]+)")

def server_binary() -> str:
    return os.environ.get("KCORAL_SERVER") or str(Path(sys.executable).with_name("kcoral-server"))


# -- processes, read from /proc ------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in ticks) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone (or going) meanwhile
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[19])


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(root: int) -> set[tuple[int, int]]:
    """(pid, start time) of every live process below ``root``."""
    children: dict[int, list[tuple[int, int]]] = {}
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None and stat[0] != "Z":
            children.setdefault(stat[1], []).append((pid, stat[2]))
    found: set[tuple[int, int]] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child[0])
    return found


def alive(process: tuple[int, int]) -> bool:
    stat = _stat(process[0])
    return stat is not None and stat[2] == process[1] and stat[0] != "Z"


def pids_with(marker: str) -> list[int]:
    """Live processes (zombies aside) whose command line contains ``marker``."""
    found = []
    for pid in _all_pids():
        if pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace")
        except OSError:
            continue
        stat = _stat(pid)
        if marker in cmdline and stat is not None and stat[0] != "Z":
            found.append(pid)
    return found


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)


# -- one server ------------------------------------------------------------------------------


class Server:
    """A running kcoral-server; every request helper here carries a timeout.

    Usage: ``server.execute(program)``, ``server.post(content_type, body)``,
    ``server.get("/health")``; ``stop()`` returns the exit code after the leftover checks.
    """

    def __init__(self, directory: Path, flags: list[str], descriptor_limit: int | None = None) -> None:
        """``descriptor_limit``: the server's RLIMIT_NOFILE, soft and hard."""
        self.work_root = directory / "work"
        self.log_path = directory / "server.stderr"
        self.args = [server_binary(), "--port", "0", "--work-root", str(self.work_root), *flags]
        self._log = open(self.log_path, "wb")

        def limit_descriptors() -> None:
            if descriptor_limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (descriptor_limit, descriptor_limit))

        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self._log,
                                        stdin=subprocess.DEVNULL, preexec_fn=limit_descriptors)
        self.stdout_lines: list[str] = []
        self.exit_code: int | None = None
        lines: queue.Queue[str | None] = queue.Queue()
        # The server's stdout is also the workers' (a program with output capture off
        # writes there), so it is drained for the server's whole life.
        threading.Thread(target=self._drain, args=(lines,), daemon=True).start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError(f"{self.args} printed no port in {STARTUP_TIMEOUT_S} s: "
                                   f"{self.stderr_text()}") from None
            if line is None:
                self.kill()
                raise RuntimeError(f"{self.args} exited before listening: {self.stderr_text()}")
            if match := _LISTENING.search(line):
                self.host, self.port = match.group(1), int(match.group(2))
                break
        self.url = f"http://{self.host}:{self.port}"

    def _drain(self, lines: queue.Queue[str | None]) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace")
            self.stdout_lines.append(line)
            lines.put(line)
        lines.put(None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr_text(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    # -- requests --------------------------------------------------------------------------

    def http(self, timeout_s: float = REQUEST_TIMEOUT_S) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=httpx.Timeout(timeout_s))

    def client(self, read_timeout_s: float = REQUEST_TIMEOUT_S, **kwargs: Any) -> kcoral.Client:
        return kcoral.Client(self.url, connect_timeout_seconds=10.0,
                             read_timeout_seconds=read_timeout_s, **kwargs)

    def execute(self, program: kcoral.Program, *, read_timeout_s: float = REQUEST_TIMEOUT_S,
                **options: Any) -> kcoral.ProgramResult:
        with self.client(read_timeout_s) as client:
            return client.execute(program, **options)

    def request(self, method: str, path: str, *, content: bytes = b"",
                headers: dict[str, str] | None = None,
                timeout_s: float = REQUEST_TIMEOUT_S) -> httpx.Response:
        with self.http(timeout_s) as http:
            return http.request(method, path, content=content, headers=headers or {})

    def post(self, content_type: str | None, body: bytes, headers: dict[str, str] | None = None,
             timeout_s: float = REQUEST_TIMEOUT_S) -> httpx.Response:
        all_headers = dict(headers or {})
        if content_type is not None:
            all_headers["Content-Type"] = content_type
        return self.request("POST", "/execute", content=body, headers=all_headers,
                            timeout_s=timeout_s)

    def get(self, path: str, timeout_s: float = REQUEST_TIMEOUT_S) -> httpx.Response:
        return self.request("GET", path, timeout_s=timeout_s)

    def metric(self, name: str) -> float:
        """The value of one sample (``name`` with its labels) of GET /metrics."""
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        raise KeyError(name)

    # -- stopping --------------------------------------------------------------------------

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            for process in descendants(self.pid):
                try:
                    os.kill(process[0], signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.kill()
        self.process.wait(timeout=STOP_TIMEOUT_S)
        self._log.close()

    def wait(self, timeout_s: float = STOP_TIMEOUT_S, check_leftovers: bool = True,
             tree: set[tuple[int, int]] | None = None) -> int:
        """Wait for an exit already asked for (a signal sent), then check what is left.

        ``tree`` is the server's process tree from before the signal; by default, what is
        left of it now.
        """
        if tree is None:
            tree = descendants(self.pid) if self.process.poll() is None else set()
        try:
            self.exit_code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"kcoral-server did not exit within {timeout_s} s") from None
        self._log.close()
        if check_leftovers:
            self.check_nothing_left(tree)
        return self.exit_code

    def stop(self, timeout_s: float = STOP_TIMEOUT_S, check_leftovers: bool = True) -> int:
        """SIGTERM, wait, kill if need be; then check that nothing was left behind (unless
        ``check_leftovers`` is False, for a test that already knows the server is broken).
        A server that already exited is only reaped."""
        if self.process.poll() is not None:
            self._log.close()
            self.exit_code = self.process.returncode
            return self.exit_code
        tree = descendants(self.pid)
        self.signal(signal.SIGTERM)
        return self.wait(timeout_s, check_leftovers, tree)

    def check_nothing_left(self, tree: set[tuple[int, int]]) -> None:
        root = str(self.work_root)
        gone = wait_until(lambda: not any(alive(p) for p in tree) and not pids_with(root), 10.0)
        survivors = sorted(p[0] for p in tree if alive(p)) + pids_with(root)
        for pid in survivors:  # do not leak them into the next test either
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert gone, f"processes outlived kcoral-server: {survivors}"
        files = [str(p) for p in self.work_root.rglob("*") if not p.is_dir()]
        assert not files, f"kcoral-server left files in its work root: {files[:10]}"
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                  if line.split()[4].startswith(root + "/")]
        assert not mounts, f"kcoral-server left mounts in its work root: {mounts[:10]}"
