"""Local files crossing the wire: folders read for upload, and returned files and folders.

Both directions share one discipline: a symbolic link is never followed on the way in or
out, so a link planted in a shared directory can neither smuggle a file into an upload nor
redirect a save. A returned file or folder is complete in memory when the result arrives;
nothing refers back to the server's workspace, which is gone by then, and saving never
leaves half-written output behind.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import MappingProxyType

from kcoral._paths import DIRECTORY_FLAGS, normalize_path, open_directory_beneath

_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


class ReturnedFile:
    """The contents of one file a program returned with ``return_file``."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        if not isinstance(data, bytes):
            raise TypeError("ReturnedFile holds bytes")
        self._data = data

    def read_bytes(self) -> bytes:
        """The file's contents."""
        return self._data

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the contents to ``path``, whose parent directory must exist; returns it.

        The file appears whole or not at all: it is written under a temporary name beside
        the destination, then linked (or, with ``overwrite=True``, renamed) into place.
        Without ``overwrite`` an existing destination raises FileExistsError, even one
        that appears during the write; with it, only a regular file may be replaced.
        A symbolic link among the parent directories raises OSError. The file is created
        with mode 0600.
        """
        with _parent_directory(path) as (parent_fd, name):
            _check_destination(parent_fd, name, overwrite)
            staging = f".kcoral-{secrets.token_hex(8)}.partial"
            fd = os.open(staging, _NEW_FILE_FLAGS, 0o600, dir_fd=parent_fd)
            try:
                with os.fdopen(fd, "wb") as stream:
                    stream.write(self._data)
                if overwrite:
                    # Checked again: a link swapped in meanwhile is replaced, never followed.
                    _check_destination(parent_fd, name, overwrite)
                    os.replace(staging, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
                else:
                    # link() fails if the name exists: an atomic exclusive publish.
                    os.link(
                        staging,
                        name,
                        src_dir_fd=parent_fd,
                        dst_dir_fd=parent_fd,
                        follow_symlinks=False,
                    )
            finally:
                with suppress(FileNotFoundError):
                    os.unlink(staging, dir_fd=parent_fd)
        return Path(path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReturnedFile) and other._data == self._data

    def __hash__(self) -> int:
        return hash(self._data)

    def __repr__(self) -> str:
        return f"ReturnedFile(<{len(self._data)} bytes>)"


class ReturnedFolder:
    """A folder a program returned with ``return_folder``.

    ``files`` maps each file's path relative to the folder (``/``-separated, sorted,
    hidden files included) to a :class:`ReturnedFile`; ``directories`` lists every
    subdirectory, empty ones included, sorted, each after its parent.
    """

    __slots__ = ("_directories", "_files")

    def __init__(self, files: Mapping[str, ReturnedFile], directories: Iterable[str] = ()) -> None:
        files = dict(files)
        directories = tuple(directories)
        check_manifest(files, directories)
        if not all(isinstance(f, ReturnedFile) for f in files.values()):
            raise TypeError("ReturnedFolder files must be ReturnedFile objects")
        self._files: Mapping[str, ReturnedFile] = MappingProxyType(files)
        self._directories: tuple[str, ...] = directories

    @property
    def files(self) -> Mapping[str, ReturnedFile]:
        """Read-only mapping of relative path to file."""
        return self._files

    @property
    def directories(self) -> tuple[str, ...]:
        """Relative paths of all subdirectories (the folder itself excluded)."""
        return self._directories

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Recreate the folder as a new directory ``path``, whose parent must exist.

        ``path`` must not exist yet (FileExistsError). Directories get mode 0700 and files
        0600. If anything fails, what was created is removed before the error propagates.
        """
        with _parent_directory(path) as (parent_fd, name):
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            try:
                root = os.open(name, DIRECTORY_FLAGS, dir_fd=parent_fd)
                try:
                    self._write_into(root)
                finally:
                    os.close(root)
            except BaseException:
                # The original error matters more than a failed cleanup.
                with suppress(OSError):
                    _remove_tree(parent_fd, name)
                raise
        return Path(path)

    def _write_into(self, root: int) -> None:
        # Sorted directories list each parent before its children.
        for directory in self._directories:
            parent, _, leaf = directory.rpartition("/")
            fd = open_directory_beneath(root, parent)
            try:
                os.mkdir(leaf, 0o700, dir_fd=fd)
            finally:
                os.close(fd)
        for relative, file in self._files.items():
            parent, _, leaf = relative.rpartition("/")
            fd = open_directory_beneath(root, parent)
            try:
                out = os.open(leaf, _NEW_FILE_FLAGS, 0o600, dir_fd=fd)
            finally:
                os.close(fd)
            with os.fdopen(out, "wb") as stream:
                stream.write(file.read_bytes())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ReturnedFolder)
            and dict(other._files) == dict(self._files)
            and other._directories == self._directories
        )

    __hash__ = None  # type: ignore[assignment]  # equal folders compare by contents

    def __repr__(self) -> str:
        return f"ReturnedFolder(<{len(self._files)} files, {len(self._directories)} directories>)"


def check_manifest(files: Iterable[str], directories: Iterable[str]) -> None:
    """Check a folder's listing as the wire defines it; ValueError if it breaks a rule.

    Every path is canonical, both lists are sorted, no path repeats or is both a file and a
    directory, and the parent of every entry is a listed directory.
    """
    names, dirs = list(files), list(directories)
    for entry in names + dirs:
        if normalize_path(entry) != entry:
            raise ValueError(f"folder entry {entry!r} is not a canonical relative path")
    if names != sorted(names) or dirs != sorted(dirs):
        raise ValueError("folder entries are not sorted")
    if len(set(names + dirs)) != len(names) + len(dirs):
        raise ValueError("folder entries repeat a path")
    listed = set(dirs)
    for entry in names + dirs:
        parent = entry.rpartition("/")[0]
        if parent and parent not in listed:
            raise ValueError(f"the parent of folder entry {entry!r} is not a listed directory")


def read_folder(folder: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    """(relative path, contents) of every regular file under ``folder``, never following links.

    Each directory is reopened from the root fd component by component with O_NOFOLLOW,
    so a link swapped in during the walk is refused, and only one directory at a time
    is held open however wide the tree.
    """
    if os.path.islink(folder):
        raise ValueError(f"upload_folder refuses the symbolic link {os.fspath(folder)!r}")
    root = os.open(folder, DIRECTORY_FLAGS)
    files: list[tuple[str, bytes]] = []
    pending = [""]
    try:
        while pending:
            relative = pending.pop()
            fd = open_directory_beneath(root, relative)
            try:
                with os.scandir(fd) as scan:
                    entries = [(e.name, e.stat(follow_symlinks=False).st_mode) for e in scan]
                for name, mode in entries:
                    child = f"{relative}/{name}" if relative else name
                    if stat.S_ISDIR(mode):
                        pending.append(child)
                    elif stat.S_ISREG(mode):
                        files.append((child, _read_regular_file(fd, name, child)))
                    else:
                        raise ValueError(
                            f"upload_folder refuses {child!r}: not a regular "
                            "file or directory (a link or special file)"
                        )
            finally:
                os.close(fd)
    finally:
        os.close(root)
    return files


def _read_regular_file(dir_fd: int, name: str, shown: str) -> bytes:
    # O_NONBLOCK: a FIFO swapped in after the scan must not hang the open.
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            raise ValueError(f"upload_folder refuses {shown!r}: not a regular file")
        return stream.read()


@contextmanager
def _parent_directory(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """Yield (descriptor of the destination's parent, final name), opened link-free.

    The walk starts at ``/`` or the current directory, which are taken as they are.
    """
    target = Path(path)
    if target.name in ("", ".", ".."):
        raise ValueError(f"save destination {os.fspath(path)!r} names no file or folder")
    parents = target.parent.parts
    start = os.open(target.anchor or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        parent_fd = open_directory_beneath(start, "/".join(parents[1 if target.anchor else 0 :]))
    finally:
        os.close(start)
    try:
        yield parent_fd, target.name
    finally:
        os.close(parent_fd)


def _check_destination(parent_fd: int, name: str, overwrite: bool) -> None:
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not overwrite:
        raise FileExistsError(f"save destination {name!r} already exists")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"overwrite replaces only a regular file; {name!r} is not one")


def _remove_tree(parent_fd: int, name: str) -> None:
    """Delete the directory ``name`` and all beneath it, never following a link.

    Iterative, so a deep tree cannot exhaust the recursion limit; a directory is
    revisited once its subdirectories are gone, then removed.
    """
    root = os.open(name, DIRECTORY_FLAGS, dir_fd=parent_fd)
    try:
        pending = [""]
        while pending:
            relative = pending[-1]
            fd = open_directory_beneath(root, relative)
            try:
                with os.scandir(fd) as scan:
                    entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in scan]
                subdirectories = [n for n, is_dir in entries if is_dir]
                for entry_name, is_dir in entries:
                    if not is_dir:
                        os.unlink(entry_name, dir_fd=fd)
            finally:
                os.close(fd)
            if subdirectories:
                pending += [f"{relative}/{n}" if relative else n for n in subdirectories]
                continue
            pending.pop()
            if relative:
                parent, _, leaf = relative.rpartition("/")
                fd = open_directory_beneath(root, parent)
                try:
                    os.rmdir(leaf, dir_fd=fd)
                finally:
                    os.close(fd)
    finally:
        os.close(root)
    os.rmdir(name, dir_fd=parent_fd)
