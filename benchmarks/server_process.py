"""Starting and stopping the servers the benchmarks measure (benchmarks/load.py,
benchmarks/roundtrip.py, benchmarks/request_memory.py, benchmarks/front_memory.py)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess


def start(command: list[str]) -> tuple[subprocess.Popen[str], int]:
    """Starts a server (`--port 0` among its flags) as a group leader of its own, and waits
    for the line that says where it listens: the process and its port."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
    for line in process.stdout:  # type: ignore[union-attr]
        if match := re.search(r"listening on http://[0-9.]+:([0-9]+)", line):
            return process, int(match.group(1))
    terminate(process)
    raise RuntimeError(f"{command[0]} did not start")


def terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM and a minute to exit (then SIGKILL); then whatever is left of its process
    group (it was started as a group leader) is killed."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
