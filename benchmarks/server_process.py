"""Stopping a server the benchmarks started (benchmarks/load.py, benchmarks/roundtrip.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


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
