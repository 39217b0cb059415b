"""Workspace-relative paths: the canonical form the wire uses and the upload conflict rule.

A program's files live under its working directory on the server, so every path names a
place inside it: relative, ``/``-separated, with no ``..`` component. ``.`` and empty
components carry no meaning and are dropped, which makes the normalized form unique.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from itertools import pairwise

MAX_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 4096
# Opening with these refuses a symbolic link instead of following it.
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def normalize_path(path: object) -> str:
    """Validate a workspace path and return its canonical form; ValueError if invalid.

    ``..`` is checked on the raw components, before anything is dropped, so that
    ``a/../b`` is refused rather than quietly read as some other path.
    """
    if not isinstance(path, str):
        raise TypeError(f"a workspace path must be a str, not {type(path).__name__}")
    if not path:
        raise ValueError("a workspace path must not be empty")
    if "\x00" in path or "\\" in path:
        raise ValueError(f"workspace path {path!r} contains NUL or a backslash")
    if path.startswith("/"):
        raise ValueError(f"workspace path {path!r} must be relative")
    # On the path as written, as the server checks it: "./" padding counts.
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise ValueError(f"workspace path {path[:64]!r}... is over 4096 bytes")
    raw = path.split("/")
    if ".." in raw:
        raise ValueError(f"workspace path {path!r} must not contain a '..' component")
    components = [c for c in raw if c not in ("", ".")]
    if not components:
        raise ValueError(f"workspace path {path!r} names no file or folder")
    for component in components:
        if len(component.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise ValueError(f"workspace path {path!r} has a component over 255 bytes")
    return "/".join(components)


def check_no_conflicts(existing: Iterable[str], added: Iterable[str]) -> None:
    """Refuse normalized upload paths that repeat one another or nest inside a file.

    Sorting by components puts each path right before the paths beneath it (``a`` then
    ``a/b``, even with ``a-b`` around), so comparing neighbours finds every conflict.
    """
    ordered = sorted([*existing, *added], key=lambda p: p.split("/"))
    for before, after in pairwise(ordered):
        if before == after:
            raise ValueError(f"two file uploads share the path {after!r}")
        if after.startswith(before + "/"):
            raise ValueError(f"file upload {after!r} would sit inside the file {before!r}")


def open_directory_beneath(root_fd: int, relative: str) -> int:
    """Open ``relative`` (``/``-separated, may be "") under ``root_fd`` without following links.

    Each component is opened with O_NOFOLLOW from its parent's descriptor, so no symbolic
    link anywhere on the way is traversed, even one swapped in concurrently. The caller
    closes the returned descriptor.
    """
    fd = os.dup(root_fd)
    for component in relative.split("/") if relative else []:
        try:
            child = os.open(component, DIRECTORY_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd
