"""Captured stdout and stderr: descriptor level, subprocesses included, per-stream limits.

Output is the whole program's (module top level included), cut at ``output_limit_bytes``
per stream with a ``*_truncated`` flag; 0 turns capture off; a program asking for no
limit gets ``--output-limit-bytes``, one asking for more than ``--max-output-limit-bytes``
gets that maximum.
"""

from __future__ import annotations

import pytest

from e2e.programs import call

CHATTY = r'''
import ctypes, os, subprocess, sys

print("module top level")

def chatty():
    print("print to stdout")
    print("print to stderr", file=sys.stderr)
    sys.stdout.flush()
    os.write(1, b"os.write fd 1\n")
    os.write(2, b"os.write fd 2\n")
    libc = ctypes.CDLL(None)
    libc.dprintf(1, b"libc dprintf\n")
    subprocess.run(["sh", "-c", "echo child stdout; echo child stderr >&2"], check=True)
    os.system("echo os.system stdout")
    pid = os.fork()
    if pid == 0:
        os.write(1, b"forked child\n")
        os._exit(0)
    os.waitpid(pid, 0)
    sys.stdout.write("unflushed at return")
    return "done"
'''

EMIT = r'''
import sys

def emit(stdout_bytes, stderr_bytes):
    sys.stdout.write("o" * stdout_bytes)
    sys.stderr.write("e" * stderr_bytes)
    return [stdout_bytes, stderr_bytes]

def emit_unicode(count):
    sys.stdout.write("ż" * count)
'''


def test_output_is_captured_at_descriptor_level(server):
    result = server.execute(call(CHATTY, "chatty")).raise_for_error()
    assert result.stdout.splitlines() == [
        "module top level", "print to stdout", "os.write fd 1", "libc dprintf", "child stdout",
        "os.system stdout", "forked child", "unflushed at return",
    ]
    assert result.stderr.splitlines() == ["print to stderr", "os.write fd 2", "child stderr"]
    assert not result.stdout_truncated and not result.stderr_truncated


def test_output_limit_truncates_each_stream(server):
    result = server.execute(call(EMIT, "emit", 100, 5), output_limit_bytes=10).raise_for_error()
    assert (result.stdout, result.stdout_truncated) == ("o" * 10, True)
    assert (result.stderr, result.stderr_truncated) == ("e" * 5, False)


def test_output_exactly_at_the_limit_is_not_truncated(server):
    result = server.execute(call(EMIT, "emit", 10, 0), output_limit_bytes=10).raise_for_error()
    assert (result.stdout, result.stdout_truncated) == ("o" * 10, False)
    assert (result.stderr, result.stderr_truncated) == ("", False)


def test_large_output_does_not_block_the_program(server):
    size = 8 << 20  # more than any pipe holds
    result = server.execute(call(EMIT, "emit", size, size), output_limit_bytes=1000)
    result.raise_for_error()
    assert result["out"] == [size, size]
    assert len(result.stdout) == len(result.stderr) == 1000
    assert result.stdout_truncated and result.stderr_truncated


def test_truncation_inside_a_character_stays_valid_text(server):
    result = server.execute(call(EMIT, "emit_unicode", 10), output_limit_bytes=5)
    result.raise_for_error()
    assert result.stdout.startswith("żż") and result.stdout_truncated
    assert len(result.stdout.encode()) <= 7


def test_output_limit_zero_turns_capture_off(server):
    result = server.execute(call(EMIT, "emit", 100, 100), output_limit_bytes=0).raise_for_error()
    assert (result.stdout, result.stderr) == ("", "")
    assert not result.stdout_truncated and not result.stderr_truncated


def test_output_of_one_program_is_not_in_the_next(server):
    server.execute(call(EMIT, "emit", 50, 50)).raise_for_error()
    result = server.execute(call("def quiet():\n    return 1\n", "quiet")).raise_for_error()
    assert (result.stdout, result.stderr) == ("", "")


@pytest.mark.slow
def test_server_output_limits_default_and_clamp(start_server):
    server = start_server("--num-workers", "1", "--output-limit-bytes", "20",
                          "--max-output-limit-bytes", "50")
    result = server.execute(call(EMIT, "emit", 100, 10)).raise_for_error()
    assert (len(result.stdout), result.stdout_truncated) == (20, True)
    assert (result.stderr, result.stderr_truncated) == ("e" * 10, False)
    result = server.execute(call(EMIT, "emit", 100, 10), output_limit_bytes=10**9)
    assert (len(result.stdout), result.stdout_truncated) == (50, True)
    result = server.execute(call(EMIT, "emit", 100, 10), output_limit_bytes=30)
    assert (len(result.stdout), result.stdout_truncated) == (30, True)
