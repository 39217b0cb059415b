"""Reading an answer body from a server that may be hostile: bounded once decoded, by a deadline.

The body is read as it arrives and decoded here, not by httpx, whose decoders inflate each
network read whole: one 64 KiB read of a gzip bomb is 64 MiB, and a 2 MB body 2 GiB. Here
zlib never produces more than :data:`CHUNK_BYTES` at a time, so reading stops once the
decoded bytes pass the limit, having held at most the limit plus one chunk. The client
asks for gzip and deflate only; an answer in another coding (br, zstd) is refused rather
than passed on undecoded.

A large body of declared length is received into a private memory mapping that asks the
kernel for transparent huge pages: on a virtual machine, faulting in 64 MiB a 4 KiB page
at a time costs five times copying it (a bytearray of 64 MiB, zeroed: 34 ms; the mapping,
filled: 10 ms). Where the kernel gives no huge pages on request, or Python has no
``madvise``, the mapping costs what a bytearray does. A large ``bytes`` value decoded from
the body is made the same way (:func:`bytes_copy`). On a plain socket, the rest of such a
body is received straight into the mapping (:data:`DIRECT_FROM_BYTES`), not through h11.
"""

from __future__ import annotations

import contextlib
import functools
import math
import mmap
import os
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

import httpx

from kcoral._codec import Body, parse_header_value, shown
from kcoral._deadline import READ_BYTES, Deadline, receiver_into
from kcoral._errors import DeadlineExceeded, ProtocolError
from kcoral._part_hasher import NO_UPLOADS, PartDigests, PartFollower, PartHasher

ACCEPT_ENCODING = "gzip, deflate"
CHUNK_BYTES = 64 << 10
# Bodies of declared length from this size on are received into a mapping (above).
MAPPED_FROM_BYTES = 4 << 20
# The rest of a plain-socket body of declared length is received straight into its buffer,
# past httpcore and h11, from this many bytes left (kcoral._deadline.receiver_into): the
# connection is then closed after the answer, not reused, which costs a new connection,
# a small price beside this many bytes' copies.
DIRECT_FROM_BYTES = 8 << 20
# Content codings stacked on one body; real servers use one.
MAX_CODINGS = 2
_GZIP_WBITS = zlib.MAX_WBITS | 16  # a gzip header and trailer
_ZLIB_WBITS = zlib.MAX_WBITS  # "deflate" is the zlib format (RFC 9110, 8.4.1.2)
_CODINGS = {"gzip": _GZIP_WBITS, "x-gzip": _GZIP_WBITS, "deflate": _ZLIB_WBITS}
# A multipart body of declared length from MAPPED_FROM_BYTES has its parts hashed while
# it arrives (kcoral._part_hasher) where this process may run on this many cores or more:
# the hash then takes a core of its own. With fewer, it would take the receiving's (and,
# on a machine shared with the server, the server's) turn instead.
HASH_WHILE_RECEIVING_CORES = 4
_NO_DIGESTS: PartDigests = MappingProxyType({})


class Received(NamedTuple):
    """An answer's decoded body, and the SHA-256 of multipart payloads that were hashed
    while it arrived, by their (start, end) offsets in it (kcoral._part_hasher)."""

    body: Body
    digests: PartDigests = _NO_DIGESTS


def read_body(
    response: httpx.Response,
    limit: int,
    what: str,
    deadline: Deadline,
    *,
    truncate: bool = False,
    advice: str = "",
    uploads: Mapping[str, bytes] = NO_UPLOADS,
) -> Received:
    """The decoded body of a streamed ``response``, at most ``limit`` bytes.

    Past the limit: ProtocolError naming ``what`` (``"POST /execute"``), the limit and
    ``advice`` (how to raise it), or with ``truncate`` the first ``limit`` bytes. Raises
    ProtocolError for an unknown or undecodable content coding, DeadlineExceeded when
    ``deadline`` passes before the body ends, and lets httpx's errors through.

    A body of declared length in no coding is read into one buffer of that length as it
    arrives (a bytearray, or from MAPPED_FROM_BYTES a private mapping), so a large answer
    is copied once, while it comes, not again after its last byte; a large multipart one
    has its parts hashed meanwhile, where there are cores to spare, or compared with
    ``uploads`` (the program's blobs by SHA-256) where they are those coming back.
    """
    if response.is_stream_consumed:
        # A transport that read the body itself (httpx.MockTransport given content=, say)
        # has decoded it too: only its size is left to check.
        whole = response.content
        if len(whole) > limit and not truncate:
            raise _too_large(what, limit, advice, "")
        return Received(whole[:limit])
    decoders = [_Inflater(wbits) for wbits in reversed(_codings(response, what))]
    declared = response.headers.get("content-length", "")
    if not decoders and not truncate and declared.isdigit() and len(declared) < 20:
        if int(declared) > limit:
            raise _too_large(what, limit, advice, f" (it declares {int(declared)} bytes)")
        return _read_declared(response, int(declared), what, deadline, uploads)
    # The pieces are joined once at the end: one copy of the body, however large.
    body: list[bytes] = []
    size = 0
    received = 0

    def take(pieces: Iterator[bytes]) -> bool:
        nonlocal size
        for piece in pieces:
            if size + len(piece) > limit:
                if truncate:
                    body.append(piece[: limit - size])
                    return False
                raise _too_large(what, limit, advice, "")
            body.append(piece)
            size += len(piece)
        return True

    try:
        for raw in _pieces(response, what, deadline):
            received += len(raw)
            if not take(_through(decoders, raw)):
                return Received(b"".join(body))
        if received:  # an empty body is empty in any coding
            for decoder in decoders:
                decoder.finish()
    except (zlib.error, ValueError) as error:
        raise ProtocolError(f"{what}: undecodable {_names(response)} body: {error}") from error
    return Received(b"".join(body))


def _read_declared(
    response: httpx.Response,
    length: int,
    what: str,
    deadline: Deadline,
    uploads: Mapping[str, bytes],
) -> Received:
    """A body of ``length`` bytes (its Content-Length, within the limit) in no coding."""
    body = _receive_buffer(length)
    hasher = _part_hasher(response, body, uploads)
    view = memoryview(body)
    size = 0
    # A body in chunks (which h11 takes over Content-Length, as HTTP says) is h11's to read.
    direct_from = math.inf if "transfer-encoding" in response.headers else DIRECT_FROM_BYTES
    try:
        for raw in _pieces(response, what, deadline):
            # h11 delivers no more than the declared length; checked all the same.
            if size + len(raw) > length:
                raise ProtocolError(f"{what}: the answer is longer than its Content-Length")
            view[size : size + len(raw)] = raw
            size += len(raw)
            if hasher is not None:
                hasher.advance(size)
            receive = receiver_into(response) if length - size >= direct_from else None
            if receive is not None:
                size = _receive_rest(receive, view, size, what, deadline, hasher)
                break
    except BaseException:
        if hasher is not None:
            hasher.stop()
        raise
    view.release()
    digests = hasher.finish() if hasher is not None else _NO_DIGESTS
    if size < length:
        return Received(body[:size])
    return Received(body, digests)


def _receive_rest(
    receive: Callable[[memoryview], int],
    view: memoryview,
    size: int,
    what: str,
    deadline: Deadline,
    hasher: PartHasher | None,
) -> int:
    """Receives the body's bytes after its first ``size`` straight into ``view``, to its end."""
    while size < len(view):
        _keep(deadline, what)
        received = receive(view[size : size + READ_BYTES])
        if received == 0:
            raise httpx.RemoteProtocolError(
                f"{what}: the server closed the connection {len(view) - size} bytes before "
                "the end of the answer's declared length"
            )
        size += received
        if hasher is not None:
            hasher.advance(size)
    return size


def _pieces(response: httpx.Response, what: str, deadline: Deadline) -> Iterator[bytes]:
    """The body's raw pieces as they arrive; DeadlineExceeded once ``deadline`` passes."""
    for raw in response.iter_raw():
        _keep(deadline, what)
        yield raw


def _keep(deadline: Deadline, what: str) -> None:
    """DeadlineExceeded once ``deadline`` has passed, the answer not complete."""
    if deadline.passed():
        raise DeadlineExceeded(
            f"{what}: the answer was not complete within the call's deadline of "
            f"{deadline.seconds:g} s"
        )


def _part_hasher(
    response: httpx.Response, body: bytearray | mmap.mmap, uploads: Mapping[str, bytes]
) -> PartHasher | None:
    """A hasher following the receipt of ``body``, for a large multipart answer where
    this process has cores to spare; None otherwise."""
    if len(body) < MAPPED_FROM_BYTES or _usable_cores() < HASH_WHILE_RECEIVING_CORES:
        return None
    try:
        media_type, params = parse_header_value(response.headers.get("content-type", ""))
    except ValueError:
        return None  # the decoder says what is wrong with it
    boundary = params.get("boundary", "")
    if media_type != "multipart/form-data" or not boundary or not boundary.isascii():
        return None
    return PartHasher(PartFollower(body, boundary.encode("ascii"), uploads))


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _receive_buffer(length: int) -> bytearray | mmap.mmap:
    """Room for ``length`` bytes: a private mapping asking for huge pages, when large."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only
    if length < MAPPED_FROM_BYTES or advice is None:
        return bytearray(length)
    mapping = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # a kernel without transparent huge pages: 4 KiB ones
        mapping.madvise(advice)
    return mapping


def bytes_copy(data: bytes | bytearray | memoryview) -> bytes:
    """``bytes(data)``; from MAPPED_FROM_BYTES, in memory that asks for huge pages.

    ``bytes(data)`` copies into memory that faults in 4 KiB at a time: 44-54 ms for 64 MiB,
    against 15-19 ms into huge pages. CPython makes a ``bytes`` object of a given length
    uninitialized, for its maker to fill before anyone sees it
    (``PyBytes_FromStringAndSize(NULL, n)``); here its interior 2 MiB pages are advised
    ``MADV_HUGEPAGE`` before the copy. Where that C API or ``madvise`` is not at hand
    (another Python, another system), or the value is small, this is ``bytes(data)``.
    A ``bytes`` is returned as it is, as ``bytes(data)`` does: it cannot change.
    """
    if type(data) is bytes:
        return data
    make = _uninitialized_bytes() if len(data) >= MAPPED_FROM_BYTES else None
    if make is None:
        return bytes(data)
    value, target = make(len(data))
    with target:
        target[:] = memoryview(data).cast("B")
    return value


_HUGE_PAGE_BYTES = 2 << 20
_PYBUF_WRITE = 0x200  # PyMemoryView_FromMemory's flag for a writable view


@functools.cache
def _uninitialized_bytes() -> Callable[[int], tuple[bytes, memoryview]] | None:
    """A maker of (new ``bytes`` of n bytes, a writable view of its contents), or None."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if sys.implementation.name != "cpython" or advice is None:
        return None
    try:
        import ctypes

        api = ctypes.pythonapi
        libc = ctypes.CDLL(None, use_errno=True)
        new = api.PyBytes_FromStringAndSize
        contents = api.PyBytes_AsString
        view_of = api.PyMemoryView_FromMemory
        madvise = libc.madvise
    except (ImportError, OSError, AttributeError):
        return None
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_ssize_t]
    contents.restype, contents.argtypes = ctypes.c_void_p, [ctypes.py_object]
    view_of.restype = ctypes.py_object
    view_of.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def make(length: int) -> tuple[bytes, memoryview]:
        value: bytes = new(None, length)  # raises MemoryError when there is no room
        address: int = contents(value)
        start = -(-address // _HUGE_PAGE_BYTES) * _HUGE_PAGE_BYTES
        end = (address + length) // _HUGE_PAGE_BYTES * _HUGE_PAGE_BYTES
        if end > start:
            madvise(start, end - start, advice)  # refused: 4 KiB pages, as bytes() has
        target: memoryview = view_of(address, length, _PYBUF_WRITE)
        return value, target

    return make


def _codings(response: httpx.Response, what: str) -> list[int]:
    """zlib window settings for the response's content codings, in the order applied."""
    names = [
        name.strip().lower()
        for name in response.headers.get_list("content-encoding", split_commas=True)
    ]
    names = [name for name in names if name and name != "identity"]
    unknown = sorted({name for name in names if name not in _CODINGS})
    if unknown:
        raise ProtocolError(
            f"{what}: the answer is in content coding {', '.join(map(shown, unknown[:3]))}; "
            f"the client asks for {ACCEPT_ENCODING} only"
        )
    if len(names) > MAX_CODINGS:
        raise ProtocolError(f"{what}: the answer stacks {len(names)} content codings")
    return [_CODINGS[name] for name in names]


def _names(response: httpx.Response) -> str:
    return shown(response.headers.get("content-encoding", "identity"))


def _too_large(what: str, limit: int, advice: str, declared: str) -> ProtocolError:
    size = f"{limit / (1 << 20):g} MiB" if limit >= 1 << 20 else f"{limit} bytes"
    return ProtocolError(
        f"{what}: the answer is over the client's limit of {size} decoded{declared}"
        + (f"; {advice}" if advice else "")
    )


def _through(decoders: Sequence[_Inflater], data: bytes) -> Iterator[bytes]:
    """``data`` decoded by each of ``decoders`` in turn, lazily, a chunk at a time."""
    if not decoders:
        if data:
            yield data
        return
    for piece in decoders[0].feed(data):
        yield from _through(decoders[1:], piece)


class _Inflater:
    """One gzip or zlib stream decoded at most CHUNK_BYTES at a time.

    gzip may hold several members one after another (RFC 1952, 2.2); zlib one stream, with
    nothing after it.
    """

    def __init__(self, wbits: int) -> None:
        self._wbits = wbits
        self._zlib = zlib.decompressobj(wbits)

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            if self._zlib.eof:
                data = self._zlib.unused_data + data
                if not data:
                    return
                if self._wbits != _GZIP_WBITS:
                    raise ValueError("data follows the end of the deflate stream")
                self._zlib = zlib.decompressobj(self._wbits)
            piece = self._zlib.decompress(data, CHUNK_BYTES)
            data = self._zlib.unconsumed_tail
            if piece:
                yield piece
            # A full chunk may leave output inside zlib: ask again, with no new input.
            if not data and len(piece) < CHUNK_BYTES and not self._zlib.eof:
                return

    def finish(self) -> None:
        if not self._zlib.eof:
            raise ValueError("the coded stream ends before its end marker")
