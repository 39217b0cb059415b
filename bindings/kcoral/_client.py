"""Client: the HTTP conversation with a kcoral server, including blob-cache negotiation.

The server caches uploaded blobs by SHA-256, so a program is first sent without them. If
the server misses some, it says which and runs nothing; the client then sends those, and
after a second miss (the cache may have evicted others meanwhile) every blob. A third
miss means the server is not keeping its side of the protocol.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, ParamSpec, overload

import httpx

from kcoral._codec import loads_json
from kcoral._errors import ProtocolError, TransportError
from kcoral._program import Program
from kcoral._remote import RemoteFunction
from kcoral._result import CacheMiss, ProgramResult, decode_response, error_from_response

P = ParamSpec("P")

# Added to the server-side timeout to get the client's read timeout. The server does not
# count time spent waiting for the GPU lease against timeout_seconds, so the margin has to
# cover lease waits as well as queueing and transfer; pass read_timeout_seconds to Client
# when a busy server makes a minute too short.
READ_TIMEOUT_MARGIN_SECONDS = 60.0
# /health does no work worth waiting for; a server silent this long is not healthy.
HEALTH_READ_TIMEOUT_SECONDS = 60.0


class Client:
    """A connection pool to one kcoral server.

    Usage::

        with Client("http://localhost:8000") as client:
            result = client.execute(program, timeout_seconds=120)

    ``token`` (default: the ``KCORAL_TOKEN`` environment variable) is sent as a bearer token,
    for a server started with ``--token-file``; without it such a server answers 401
    (:class:`Unauthorized`) to everything but ``health``.
    ``headers`` are sent with every request. ``connect_timeout_seconds`` bounds opening a
    connection. ``read_timeout_seconds`` bounds waiting for a response; left as ``None``,
    ``execute`` waits ``timeout_seconds + 60`` when given a timeout and indefinitely
    otherwise, and ``health`` waits 60 seconds. Connections are kept alive between calls.
    The Client keeps no per-call state of its own, so sharing one between threads is as
    safe as sharing the ``httpx.Client`` it owns.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str] | None = None,
        connect_timeout_seconds: float = 10.0,
        read_timeout_seconds: float | None = None,
        token: str | None = None,
    ) -> None:
        self._connect_timeout_seconds = connect_timeout_seconds
        self._read_timeout_seconds = read_timeout_seconds
        all_headers = dict(headers or {})
        token = token if token is not None else os.environ.get("KCORAL_TOKEN") or None
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=all_headers,
            timeout=self._timeout(read_timeout_seconds),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def execute(
        self,
        program: Program,
        *,
        timeout_seconds: float | None = None,
        output_limit_bytes: int | None = None,
    ) -> ProgramResult:
        """Run ``program`` on the server and return its result.

        ``timeout_seconds`` and ``output_limit_bytes`` (per captured stream; 0 turns
        capture off) are requests the server clamps to its maxima; ``None`` takes the
        server's defaults. A failed program is returned, not raised: check
        ``result.completed`` or call ``result.raise_for_error()``.

        Raises ServerError (a subclass per error kind) when the server refuses or cannot
        finish the request, TransportError when no response arrives, and ProtocolError
        when the response breaks the protocol.
        """
        if not isinstance(program, Program):
            raise TypeError(f"execute takes a Program, not {type(program).__name__}")
        if self._read_timeout_seconds is not None:
            read_timeout = self._read_timeout_seconds
        elif timeout_seconds is not None:
            read_timeout = timeout_seconds + READ_TIMEOUT_MARGIN_SECONDS
        else:
            read_timeout = None
        # One id for the whole negotiation, so the server's logs tie the attempts together.
        request_id = str(uuid.uuid4())
        all_blobs = set(program.blobs)
        attempts: list[set[str]] = [set()]
        while True:
            content_type, body = program.to_request(
                attempts[-1], timeout_seconds=timeout_seconds, output_limit_bytes=output_limit_bytes
            )
            response = self._send(
                "POST",
                "/execute",
                content=body,
                headers={"Content-Type": content_type, "X-Request-ID": request_id},
                timeout=self._timeout(read_timeout),
            )
            outcome = decode_response(
                response.status_code,
                response.headers.get("content-type"),
                response.content,
                response.headers.get,
            )
            if isinstance(outcome, ProgramResult):
                return outcome
            attempts.append(self._next_blobs(outcome, attempts, all_blobs))

    @overload
    def function(self, fn: Callable[P, Any], /) -> RemoteFunction[P]: ...

    @overload
    def function(
        self,
        *,
        timeout_seconds: float | None = None,
        output_limit_bytes: int | None = None,
        cpu_only: bool = False,
        prelude: str | Sequence[str | Callable[..., Any]] = (),
    ) -> Callable[[Callable[P, Any]], RemoteFunction[P]]: ...

    def function(
        self,
        fn: Callable[P, Any] | None = None,
        /,
        *,
        timeout_seconds: float | None = None,
        output_limit_bytes: int | None = None,
        cpu_only: bool = False,
        prelude: str | Sequence[str | Callable[..., Any]] = (),
    ) -> RemoteFunction[P] | Callable[[Callable[P, Any]], RemoteFunction[P]]:
        """Decorator: make a local ``def`` a :class:`RemoteFunction` that runs on the server.

        Usage::

            @client.function(timeout_seconds=60)
            def add(a, b):
                return a + b

            add(np.arange(3), 1)   # array([1, 2, 3]), computed remotely

        Only source travels: the function's, without its decorators, after the
        ``prelude`` (source text such as ``"import numpy as np"``, and functions or
        classes given by their source). Imports belong inside the function or in the
        prelude. ``timeout_seconds`` and ``output_limit_bytes`` apply to every call as in
        :meth:`execute`; ``cpu_only`` runs the call without the GPU lease, as
        ``Program.get_function(cpu_only=True)`` does. Also usable bare: ``@client.function``.

        Raises TypeError for what cannot be a remote function (a lambda, a method, an
        async or generator function, one wrapped by another decorator), ValueError for a
        function whose source cannot stand alone (no source available, variables of an
        enclosing function or globals that the server would not have), and SyntaxError
        for prelude text that does not compile.
        """

        def decorate(function: Callable[P, Any]) -> RemoteFunction[P]:
            return RemoteFunction(
                self,
                function,
                timeout_seconds=timeout_seconds,
                output_limit_bytes=output_limit_bytes,
                cpu_only=cpu_only,
                prelude=prelude,
            )

        return decorate if fn is None else decorate(fn)

    def health(self) -> dict[str, Any]:
        """GET /health: status, load, compile target and installed versions.

        Raises ServerError for an HTTP error and ProtocolError unless the server reports
        ``"status": "ok"``.
        """
        response = self._send(
            "GET",
            "/health",
            timeout=self._timeout(
                HEALTH_READ_TIMEOUT_SECONDS
                if self._read_timeout_seconds is None
                else self._read_timeout_seconds
            ),
        )
        if response.status_code != 200:
            raise error_from_response(response.status_code, response.content, response.headers.get)
        try:
            document = loads_json(response.content)
        except ValueError as error:
            raise ProtocolError(f"/health did not answer JSON: {error}") from error
        if not isinstance(document, dict) or document.get("status") != "ok":
            raise ProtocolError("/health did not report status 'ok'")
        return document

    def target(self) -> dict[str, Any]:
        """The GPU target to build libraries for, e.g. ``{"arch": "sm_90a"}``.

        Raises ProtocolError when the server reports none, as a CPU server does.
        """
        target = self.health().get("target")
        if not isinstance(target, dict) or not isinstance(target.get("arch"), str):
            raise ProtocolError("the server reports no GPU target 'arch' (is it a CPU server?)")
        return target

    @staticmethod
    def _next_blobs(miss: CacheMiss, attempts: list[set[str]], all_blobs: set[str]) -> set[str]:
        unknown = miss.missing_blobs - all_blobs
        if unknown:
            raise ProtocolError(f"the server asks for blobs this program lacks: {sorted(unknown)}")
        if len(attempts) == 1:
            return set(miss.missing_blobs)
        if len(attempts) == 2:
            return all_blobs
        raise ProtocolError("the server still reports CACHE_MISS after receiving every blob")

    def _timeout(self, read_seconds: float | None) -> httpx.Timeout:
        # Writes and pool waits are unbounded: a large upload on a slow link is legitimate.
        return httpx.Timeout(None, connect=self._connect_timeout_seconds, read=read_seconds)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.DecodingError as error:
            raise ProtocolError(f"undecodable response body: {error}") from error
        except httpx.HTTPError as error:
            raise TransportError(f"{method} {path} failed: {error}") from error
