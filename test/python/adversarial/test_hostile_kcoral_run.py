"""A hostile server's answers to ``kcoral run``: impossible exit statuses exit 125, and
terminal escape sequences in output, errors and tracebacks are printed escaped.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from adversarial.hostile_server import answer_with, completed, run_within
from kcoral import _cli

# -- kcoral run ----------------------------------------------------------------------------


def tool_answer(exit_code: Any, stdout: str = "", stderr: str = ""):
    results = {"tool": {"type": "object", "value": {"exit_code": exit_code}}}
    return answer_with(json.dumps(completed(results, stdout=stdout, stderr=stderr)).encode())


@pytest.mark.parametrize(
    "exit_code",
    [
        {"type": "integer", "value": 256},
        {"type": "integer", "value": -1},
        {"type": "integer", "value": 1 << 70},
        {"type": "string", "value": "0"},
        {"type": "boolean", "value": True},
        {"type": "number", "value": 0.0},
    ],
    ids=["256", "-1", "2**70", "'0'", "True", "0.0"],
)
def test_kcoral_run_exits_125_for_an_exit_status_outside_0_255(hostile, capsys, exit_code):
    server = hostile(tool_answer(exit_code))
    code, error, _ = run_within(
        20, lambda: _cli.main(["run", "--url", server.url, "shell", "--no-upload", "true"])
    )
    assert error is None and code == 125, (code, error)
    assert "exit status" in capsys.readouterr().err


HOSTILE_OUTPUT = (
    "\x1b]0;owned\x07"  # retitles the window
    "\x1b]52;c;cm0gLXJmIH4=\x07"  # sets the clipboard
    "\x1b[2J\x1b[1;1H"  # clears the screen, homes the cursor
    "\x9b31m"  # a C1 CSI on its own
    "\u202eevil\u202c"  # a bidi override
    "fake prompt\rreal\r\n"  # a bare CR rewrites the line; CR LF ends one
    "tab\tand newline\n"
)
SHOWN = (
    "\\x1b]0;owned\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\x1b[1;1H\\x9b31m"
    "\\u202eevil\\u202cfake prompt\\x0dreal\r\ntab\tand newline\n"
)


def test_kcoral_run_prints_terminal_controls_as_escapes(hostile, capsys):
    server = hostile(tool_answer({"type": "integer", "value": 0}, HOSTILE_OUTPUT, HOSTILE_OUTPUT))
    code, error, _ = run_within(
        20, lambda: _cli.main(["run", "--url", server.url, "shell", "--no-upload", "true"])
    )
    assert error is None and code == 0
    printed = capsys.readouterr()
    assert printed.out == SHOWN and printed.err == SHOWN
    code, error, _ = run_within(20, lambda: _cli.main(
        ["run", "--url", server.url, "shell", "--raw-output", "--no-upload", "true"]))
    assert error is None and code == 0
    printed = capsys.readouterr()
    assert printed.out == HOSTILE_OUTPUT and printed.err == HOSTILE_OUTPUT


def test_kcoral_run_shows_a_failed_programs_error_and_traceback_escaped(hostile, capsys):
    error = {"kind": "runtime", "message": "boom\x1b[2J", "instruction_index": 0,
             "instruction_op": "run", "instruction_id": None, "traceback": "tb\x1b]0;x\x07"}
    document = completed(status="FAILED", error=error)
    server = hostile(answer_with(json.dumps(document).encode()))
    code, failure, _ = run_within(
        20, lambda: _cli.main(["run", "--url", server.url, "shell", "--no-upload", "true"])
    )
    assert failure is None and code == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "boom\\x1b[2J" in err and "tb\\x1b]0;x\\x07" in err
