"""Text from a server, made safe to print on a terminal.

A program's output comes back from the server as text that anyone who could run code
there wrote. Printed raw, its escape sequences drive the terminal: they move the cursor to
hide or rewrite lines, retitle the window, set the clipboard (OSC 52), or make links that
say one thing and open another. :func:`printable` shows every control character as an
escape (``\\x1b``) instead, so ``ESC [ 2 J`` reads ``\\x1b[2J`` rather than clearing the
screen; newlines, tabs and CR LF line ends pass unchanged.
"""

from __future__ import annotations

import re

# C0 controls but \t and \n, DEL, a CR not ending a line, the C1 controls (0x9b is CSI and
# 0x9d OSC on their own), and the bidirectional marks, embeddings, overrides and isolates,
# which reorder what is shown (Trojan Source).
_CONTROLS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
    "|\r(?!\n)"
)


def printable(text: str) -> str:
    """``text`` with every terminal control shown as a ``\\xNN`` or ``\\uNNNN`` escape."""
    return _CONTROLS.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
