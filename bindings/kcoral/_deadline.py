"""Deadlines that hold against a hostile server: every network operation of a call ends by one time.

httpx bounds each wait by itself (the read timeout is per read), so a server that sends a
byte every few seconds, or an endless run of ``100 Continue`` heads, keeps a call alive for
ever. A :class:`Deadline` is one point in time for a whole call. While a call runs
:func:`within` it, the network streams of :class:`DeadlineTransport` give each socket
operation at most the time left, and a watchdog shuts the socket down should one operation
outlive it anyway (a write is a loop of sends, each with a timeout of its own).

Connections stay pooled: a stream reads the deadline of the call using it, so a connection
kept alive between calls of different threads bounds each by its own.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore  # httpx's own transport layer, installed with it
import httpx

# How long past the deadline an operation may still run before its socket is shut down:
# the operation's own timeout ends it at the deadline, the watchdog only backs it up.
WATCHDOG_GRACE_SECONDS = 0.25
# The most one socket read takes. httpcore asks for 64 KiB at a time; taking what a
# loopback or fast link has ready, up to this, cuts a 64 MiB answer's reads (and their
# Python overhead in h11) from about a thousand to a few dozen.
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class Deadline:
    """The time by which a call ends: ``seconds`` after it started (``time.monotonic``)."""

    seconds: float
    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(seconds, time.monotonic() + seconds)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def passed(self) -> bool:
        return self.remaining() <= 0


_CURRENT: ContextVar[Deadline | None] = ContextVar("kcoral_deadline", default=None)


@contextlib.contextmanager
def within(deadline: Deadline) -> Iterator[None]:
    """Bound the network operations of this thread's DeadlineTransport streams by ``deadline``."""
    token = _CURRENT.set(deadline)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport, on streams that keep the calling thread's :func:`within` deadline.

    httpx offers no way to hand its connection pool a network backend, so the pool's is
    wrapped once it is built; everything else (pooling, TLS, proxies, errors) stays httpx's.
    ``bounds_every_operation`` says whether that worked (a unit test holds it true).
    The environment's proxy for ``url`` (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
    ``NO_PROXY``) is used, as httpx would.
    """

    def __init__(self, url: httpx.URL) -> None:
        super().__init__(proxy=environment_proxy(url))
        pool: Any = getattr(self, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _Backend):
            pool._network_backend = _Backend(backend)

    @property
    def bounds_every_operation(self) -> bool:
        pool: Any = getattr(self, "_pool", None)
        return isinstance(getattr(pool, "_network_backend", None), _Backend)


def receiver_into(response: httpx.Response) -> Callable[[memoryview], int] | None:
    """For a response on a plain (not TLS) socket of a DeadlineTransport, a function that
    receives what has arrived of its body straight into a buffer, up to its length, and
    returns how much (0: the server closed the connection), keeping the call's deadline and
    the request's read timeout; None for any other response.

    Reading so bypasses httpcore and h11 (four copies of each byte, and their Python, per
    read); h11 then never sees the body end, and httpcore closes the connection when the
    response closes, rather than reusing it. So: only for the rest of a large body, once h11
    has given what it held (each of its Data events takes all it has buffered).
    """
    stream = response.extensions.get("network_stream")
    if not isinstance(stream, _Stream) or not stream.plain:
        return None
    timeout = response.request.extensions.get("timeout", {}).get("read")
    return functools.partial(stream.read_into, timeout=timeout)


def environment_proxy(url: httpx.URL) -> str | None:
    """The proxy the environment names for ``url``, read as httpx reads it, or None."""
    proxies = urllib.request.getproxies()
    # Defined by urllib.request on every platform, though its stubs leave it out.
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if not proxies or bypass(url.host, proxies):
        return None
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if not proxy:
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _bounded(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` cut to the current deadline; ``expired`` raised when it has passed."""
    deadline = _CURRENT.get()
    if deadline is None:
        return timeout
    left = deadline.remaining()
    if left <= 0:
        raise expired(f"the call's deadline of {deadline.seconds:g} s passed")
    return left if timeout is None else min(timeout, left)


class _Backend(httpcore.NetworkBackend):
    """Opens connections within the current deadline, as streams that keep it."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout)
        return _Stream(
            self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _Stream(httpcore.NetworkStream):
    """A connection whose every operation ends by the deadline of the call using it."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def _guard(self) -> contextlib.AbstractContextManager[None]:
        deadline = _CURRENT.get()
        sock = self._stream.get_extra_info("socket")
        if deadline is None or not isinstance(sock, socket.socket):
            return contextlib.nullcontext()
        return _WATCHDOG.guard(sock, deadline.at + WATCHDOG_GRACE_SECONDS)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        timeout = _bounded(timeout, httpcore.ReadTimeout)
        with self._guard():
            return self._stream.read(max(max_bytes, READ_BYTES), timeout)

    @property
    def plain(self) -> bool:
        """Whether this is a socket of its own, without TLS (nor TLS within TLS, whose
        socket carries another connection's records)."""
        sock = self._stream.get_extra_info("socket")
        return (
            isinstance(sock, socket.socket)
            and not isinstance(sock, ssl.SSLSocket)
            and self._stream.get_extra_info("ssl_object") is None
        )

    def read_into(self, buffer: memoryview, timeout: float | None = None) -> int:
        """What has arrived, up to ``len(buffer)`` bytes, received into ``buffer`` (a plain
        stream's only: see :func:`receiver_into`); httpx's errors, as its reads raise them."""
        timeout = _bounded(timeout, httpx.ReadTimeout)
        sock: socket.socket = self._stream.get_extra_info("socket")
        with self._guard():
            try:
                sock.settimeout(timeout)
                return sock.recv_into(buffer)
            except TimeoutError as error:
                raise httpx.ReadTimeout(str(error) or "timed out") from error
            except OSError as error:
                raise httpx.ReadError(str(error) or type(error).__name__) from error

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        timeout = _bounded(timeout, httpcore.WriteTimeout)
        with self._guard():
            self._stream.write(buffer, timeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout)
        with self._guard():
            return _Stream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Watchdog:
    """Shuts down the socket of any operation still running when its time is up.

    One daemon thread for the process, started on first use; it sleeps until the earliest
    time among the operations in progress, which are few (one per thread in a call).
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._condition = threading.Condition()
        self._running: dict[int, tuple[float, socket.socket]] = {}
        self._keys = itertools.count()
        self._wakes_at = math.inf
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guard(self, sock: socket.socket, at: float) -> Iterator[None]:
        with self._condition:
            key = next(self._keys)
            self._running[key] = (at, sock)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="kcoral-deadline-watchdog", daemon=True
                )
                self._thread.start()
            elif at < self._wakes_at:
                self._condition.notify()
        try:
            yield
        finally:
            with self._condition:
                self._running.pop(key, None)

    def _watch(self) -> None:
        with self._condition:
            while True:
                now = time.monotonic()
                for key, (at, sock) in list(self._running.items()):
                    if at <= now:
                        del self._running[key]
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                self._wakes_at = min((at for at, _ in self._running.values()), default=math.inf)
                wait = None if self._wakes_at == math.inf else self._wakes_at - now
                self._condition.wait(wait)


_WATCHDOG = _Watchdog()
