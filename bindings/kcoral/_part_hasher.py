"""Hashing the parts of a large multipart answer on a thread while its bytes arrive.

The client checks every binary part of an answer against its SHA-256 name. Hashed after
the body's last byte, a 64 MiB part adds the hash's whole time to the call (43-54 ms on
the machines measured); hashed while the body arrives, on a core the receiving leaves
idle, it adds almost none.

:class:`PartHasher` follows a body being received into one buffer: told how far the bytes
have come, its thread has a :class:`PartFollower` find the parts (a line with the boundary,
header lines up to a blank one, then the payload up to the next delimiter) and hash each
payload as far as it can yet be sure the payload goes. Nothing it finds is trusted: its digests are keyed
by each payload's exact range in the body, and the decoder, which parses and judges the
whole body itself afterwards, takes a digest only for a part it finds at that very
range, and hashes any other.

A payload may be one of the program's own uploads coming back (a program that returns
its input, or passes it through): while a payload's bytes so far equal the start of a
large upload's, they are compared with it (``memcmp``, several times faster than the hash)
rather than hashed, and one that turns out equal to the whole upload takes the digest the
client computed for it. One that differs after all is then hashed from its start. A
hostile body costs at most one hash of its bytes (the ranges hashed never overlap), and
each of its bytes compared at most once with each of MAX_CANDIDATES uploads: a payload that
could still be more of them (uploads sharing their start) is hashed instead.
"""

from __future__ import annotations

import hashlib
import mmap
import threading
from collections.abc import Mapping
from types import MappingProxyType

# The thread goes on once this much more of the body has arrived (or all of it), and takes
# what has arrived this much at a time: each step hands the GIL back and forth with the
# receiving thread, and stop() waits for one step at most.
FEED_BYTES = 1 << 20
# The SHA-256 of payloads by their (start, end) offsets in the body; each end is where the
# first delimiter from its start on begins.
PartDigests = Mapping[tuple[int, int], str]
# Uploads from this size on are compared with the payloads that may be them; smaller ones
# cost their hash little.
COMPARED_FROM_BYTES = 1 << 20
# A payload is compared with at most this many uploads at once; beyond, it is hashed.
MAX_CANDIDATES = 4
# No uploads: the default where a caller has none to give.
NO_UPLOADS: Mapping[str, bytes] = MappingProxyType({})


class PartHasher:
    """Runs ``follower`` (a :class:`PartFollower` of the body being received) on a thread
    of its own, up to where the body has arrived.

    The receiver calls :meth:`advance` with the length received so far (only ever
    growing), then :meth:`finish` once the whole body is there, which waits for the
    thread and returns the digests; or :meth:`stop` when the body will not be used.
    """

    def __init__(self, follower: PartFollower) -> None:
        self._follower = follower
        self._arrived = 0
        self._last = False  # no more bytes will arrive
        self._stopped = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="kcoral-part-hasher", daemon=True)
        self._thread.start()

    def advance(self, arrived: int) -> None:
        with self._changed:
            self._arrived = arrived
            self._changed.notify()

    def finish(self) -> PartDigests:
        with self._changed:
            self._last = True
            self._changed.notify()
        self._thread.join()
        return self._follower.digests

    def stop(self) -> None:
        with self._changed:
            self._last = self._stopped = True
            self._changed.notify()
        self._thread.join()

    def _run(self) -> None:
        fed, last = 0, False
        try:
            while not last:
                with self._changed:
                    while self._arrived < fed + FEED_BYTES and not self._last:
                        self._changed.wait()
                    arrived, last = self._arrived, self._last
                # However far the body has come meanwhile, a step at a time, so that stop()
                # never waits for more than one step's hash.
                while fed < arrived and not self._stopped:
                    fed = min(arrived, fed + FEED_BYTES)
                    self._follower.feed(fed)
                if self._stopped:
                    return
        finally:
            self._follower.close()


class PartFollower:
    """The parts of a multipart body in ``buffer`` found, and their payloads hashed, as it
    arrives: each :meth:`feed` takes the bytes up to where the body has come. Payloads equal
    to one of ``uploads`` (bytes by their SHA-256) take its digest instead. One thread at a
    time."""

    def __init__(
        self,
        buffer: mmap.mmap | bytearray,
        boundary: bytes,
        uploads: Mapping[str, bytes] = NO_UPLOADS,
    ) -> None:
        self.digests: dict[tuple[int, int], str] = {}
        self._find = buffer.find
        self._view = memoryview(buffer)
        self._dash = b"--" + boundary
        self._delimiter = b"\r\n" + self._dash
        self._uploads = [item for item in uploads.items() if len(item[1]) >= COMPARED_FROM_BYTES]
        self._position = 0  # where the next search starts
        self._payload = -1  # where the payload being followed starts; -1 between payloads
        self._headers = False  # a boundary line was found, its headers not yet ended
        self._hasher = hashlib.sha256()
        self._followed = 0  # the payload is hashed or compared up to here
        self._candidates: list[tuple[str, bytes]] = []  # uploads the payload may yet be

    def feed(self, arrived: int) -> None:
        """Go on through the body's first ``arrived`` bytes (never fewer than before)."""
        find, delimiter = self._find, self._delimiter
        while True:
            if self._payload < 0 and not self._headers:
                found = find(self._dash, self._position, arrived)
                if found < 0:
                    self._position = max(self._position, arrived - len(self._dash) + 1)
                    return
                self._position, self._headers = found + len(self._dash), True
            if self._headers:
                found = find(b"\r\n\r\n", self._position, arrived)
                if found < 0:
                    self._position = max(self._position, arrived - 3)
                    return
                self._payload = self._position = self._followed = found + 4
                self._headers, self._hasher = False, hashlib.sha256()
                self._candidates = list(self._uploads)
            end = find(delimiter, self._position, arrived)
            # Short of a delimiter, the payload goes at least to where one could begin.
            reach = end if end >= 0 else max(self._followed, arrived - len(delimiter) + 1)
            if reach > self._followed:
                self._follow(reach)
            if end < 0:
                self._position = reach
                return
            self.digests[(self._payload, end)] = self._digest(end)
            self._payload, self._position = -1, end + 2

    def _follow(self, reach: int) -> None:
        """The payload's bytes up to ``reach`` compared with the uploads it may still be, or
        once it can be none of them, hashed (from its start, if it was compared so far)."""
        start = self._followed
        self._followed = reach
        if self._candidates:
            piece, offset = self._view[start:reach], start - self._payload
            self._candidates = [
                (digest, upload)
                for digest, upload in self._candidates
                if upload.startswith(piece, offset)  # memcmp, with no copy
            ]
            if len(self._candidates) > MAX_CANDIDATES:
                self._candidates = []
            if self._candidates:
                return
            start = self._payload
        self._hasher.update(self._view[start:reach])  # lets the GIL go

    def _digest(self, end: int) -> str:
        """The digest of the payload ending at ``end``, all of it followed."""
        for digest, upload in self._candidates:
            if len(upload) == end - self._payload:
                return digest
        if self._candidates:  # the start of an upload, not all of it: hashed after all
            self._hasher.update(self._view[self._payload : end])
        return self._hasher.hexdigest()

    def close(self) -> None:
        """Let go of the buffer (a mapping cannot be closed while a view of it exists)."""
        self._view.release()
