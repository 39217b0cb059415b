"""Client: the HTTP conversation with a kcoral server, including blob-cache negotiation.

The server caches uploaded blobs by SHA-256, so a program is first sent without them. If
the server misses some, it says which and runs nothing; the client then sends those, and
after a second miss (the cache may have evicted others meanwhile) every blob. A third
miss means the server is not keeping its side of the protocol.

Everything the server sends is read as if an attacker wrote it: an answer is read only up
to a size limit once decoded (see ``_body.py``), and a whole call ends by one deadline,
every attempt and every byte included (see ``_deadline.py``).
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ParamSpec, overload

import httpx

from kcoral._body import ACCEPT_ENCODING, Received, read_body
from kcoral._codec import loads_json
from kcoral._deadline import Deadline, DeadlineTransport, within
from kcoral._errors import DeadlineExceeded, ProtocolError, TransportError
from kcoral._part_hasher import NO_UPLOADS
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
# The server's default --max-timeout-seconds: the longest a program runs there when it
# asks for no timeout (or for more), unless the server was started with a larger maximum.
SERVER_MAX_TIMEOUT_SECONDS = 900.0
# A call's default deadline is its read timeout (as above; with neither timeout given,
# SERVER_MAX_TIMEOUT_SECONDS + the margin) plus this, for connecting, the upload, the cache
# negotiation's extra round trips and the answer's transfer.
DEADLINE_MARGIN_SECONDS = 60.0
# The largest answer the server sends with its default limits: 256 MiB of returned values
# (--max-response-bytes), up to 16 MiB each of stdout and stderr (--max-output-limit-bytes),
# and room for the JSON around them. Raise it with Client(max_response_bytes=...) for a
# server whose limits are raised.
MAX_RESPONSE_BYTES = 320 << 20
# /health answers a small JSON object; error answers a small JSON object or a proxy's page,
# of which no more than this is kept.
HEALTH_MAX_RESPONSE_BYTES = 1 << 20
ERROR_BODY_BYTES = 1 << 20


class Client:
    """A connection pool to one kcoral server.

    Usage::

        with Client("http://localhost:8000") as client:
            result = client.execute(program, timeout_seconds=120)

    ``token`` (default: the ``KCORAL_TOKEN`` environment variable) is sent as a bearer token,
    for a server started with ``--token-file``; without it such a server answers 401
    (:class:`Unauthorized`) to everything but ``health``.
    ``headers`` are sent with every request. ``connect_timeout_seconds`` bounds opening a
    connection. ``read_timeout_seconds`` bounds each wait for the server; left as ``None``,
    ``execute`` waits ``timeout_seconds + 60`` when given a timeout and as long as its
    deadline allows otherwise, and ``health`` waits 60 seconds.

    ``deadline_seconds`` bounds each call as a whole: every attempt of the blob negotiation
    and every byte of every answer, however slowly the server sends them; past it the call
    raises :class:`DeadlineExceeded`. Left as ``None``, an ``execute`` call's deadline is its
    read timeout plus 60 seconds: ``timeout_seconds + 120``, or 1020 seconds without a
    timeout (the server runs a program for at most 900 seconds by default), or
    ``read_timeout_seconds + 60``; a ``health`` call's is its read timeout. Raise it for
    large uploads on a slow link. ``max_response_bytes`` (default 320 MiB: the server's
    default limits, 256 MiB of returned values and 16 MiB per captured stream, with room
    to spare) bounds an answer once decoded; a larger one raises :class:`ProtocolError`.
    ``/health`` answers are bounded to 1 MiB.

    ``transport`` replaces the HTTP transport (``httpx.MockTransport`` in tests, say); the
    default one keeps the deadline in every socket operation, while one of your own keeps
    it only between the pieces of an answer it delivers. Connections are kept alive between
    calls. The Client keeps no per-call state of its own, so sharing one between threads is
    as safe as sharing the ``httpx.Client`` it owns.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str] | None = None,
        connect_timeout_seconds: float = 10.0,
        read_timeout_seconds: float | None = None,
        deadline_seconds: float | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if deadline_seconds is not None and not (
            math.isfinite(deadline_seconds) and deadline_seconds > 0
        ):
            raise ValueError(f"deadline_seconds must be a positive number, not {deadline_seconds}")
        if isinstance(max_response_bytes, bool) or not (
            isinstance(max_response_bytes, int) and max_response_bytes > 0
        ):
            raise ValueError(
                f"max_response_bytes must be a positive int, not {max_response_bytes!r}"
            )
        self._connect_timeout_seconds = connect_timeout_seconds
        self._read_timeout_seconds = read_timeout_seconds
        self._deadline_seconds = deadline_seconds
        self._max_response_bytes = max_response_bytes
        all_headers = dict(headers or {})
        token = token if token is not None else os.environ.get("KCORAL_TOKEN") or None
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        # Only codings the client decodes itself, within its limit (see _body.py).
        all_headers["Accept-Encoding"] = ACCEPT_ENCODING
        url = httpx.URL(base_url.rstrip("/"))
        self._http = httpx.Client(
            base_url=url,
            headers=all_headers,
            transport=transport if transport is not None else DeadlineTransport(url),
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
        gpu_count: int | None = None,
    ) -> ProgramResult:
        """Run ``program`` on the server and return its result.

        ``timeout_seconds`` and ``output_limit_bytes`` (per captured stream; 0 turns
        capture off) are requests the server clamps to its maxima; ``None`` takes the
        server's defaults. ``gpu_count`` (1-8) asks for that many GPUs at once; a server
        that cannot give them refuses the request (RequestRejected, saying how many it
        has); ``result.gpu_ids`` names the GPUs a program on a GPU server held. A failed
        program is returned, not raised: check ``result.completed`` or call
        ``result.raise_for_error()``.

        Raises ServerError (a subclass per error kind) when the server refuses or cannot
        finish the request, TransportError when no response arrives (DeadlineExceeded when
        none is complete by the call's deadline, see :class:`Client`), and ProtocolError
        when the response breaks the protocol or passes ``max_response_bytes``.
        """
        if not isinstance(program, Program):
            raise TypeError(f"execute takes a Program, not {type(program).__name__}")
        if self._read_timeout_seconds is not None:
            read_timeout = self._read_timeout_seconds
        elif timeout_seconds is not None:
            read_timeout = timeout_seconds + READ_TIMEOUT_MARGIN_SECONDS
        else:
            read_timeout = None
        if self._deadline_seconds is not None:
            deadline = Deadline.after(self._deadline_seconds)
        else:
            longest_wait = read_timeout or SERVER_MAX_TIMEOUT_SECONDS + READ_TIMEOUT_MARGIN_SECONDS
            deadline = Deadline.after(longest_wait + DEADLINE_MARGIN_SECONDS)
        # One id for the whole negotiation, so the server's logs tie the attempts together.
        request_id = str(uuid.uuid4())
        all_blobs = set(program.blobs)
        attempts: list[set[str]] = [set()]
        while True:
            content_type, chunks = program._request_chunks(
                attempts[-1],
                timeout_seconds=timeout_seconds,
                output_limit_bytes=output_limit_bytes,
                gpu_count=gpu_count,
            )
            status_code, headers, answer = self._exchange(
                "POST",
                "/execute",
                deadline,
                read_timeout,
                self._max_response_bytes,
                uploads=program.blobs,
                # The pieces go out one after another, never joined: a 64 MiB blob is not
                # copied. The length makes it one Content-Length body, not a chunked one.
                content=chunks,
                headers={
                    "Content-Type": content_type,
                    "Content-Length": str(sum(len(chunk) for chunk in chunks)),
                    "X-Request-ID": request_id,
                },
            )
            outcome = decode_response(
                status_code,
                headers.get("content-type"),
                answer.body,
                headers.get,
                answer.digests,
                program.blobs,
            )
            if isinstance(outcome, ProgramResult):
                return outcome
            attempts.append(self._next_blobs(outcome, attempts, all_blobs))

    @overload
    def function(self, fn: Callable[P, Any], /) -> RemoteFunction[P]: ...

    # ``self`` is positional-only, as in the implementation, where ``fn`` is.
    @overload
    def function(
        self,
        /,
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
        read_timeout = (
            HEALTH_READ_TIMEOUT_SECONDS
            if self._read_timeout_seconds is None
            else self._read_timeout_seconds
        )
        deadline = Deadline.after(
            read_timeout if self._deadline_seconds is None else self._deadline_seconds
        )
        status_code, headers, (body, _) = self._exchange(
            "GET", "/health", deadline, read_timeout, HEALTH_MAX_RESPONSE_BYTES
        )
        if status_code != 200:
            raise error_from_response(status_code, body, headers.get)
        try:
            document = loads_json(body)
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

    def _exchange(
        self,
        method: str,
        path: str,
        deadline: Deadline,
        read_seconds: float | None,
        limit: int,
        uploads: Mapping[str, bytes] = NO_UPLOADS,
        **kwargs: Any,
    ) -> tuple[int, httpx.Headers, Received]:
        """One request and its whole answer, (status, headers, decoded body), by ``deadline``.

        The answer of a 200 may hold ``limit`` bytes; an error answer's first
        ERROR_BODY_BYTES are kept, which is all that identifies it. ``uploads``: the
        program's blobs by SHA-256, which parts of the answer may be (kcoral._body).
        """
        what = f"{method} {path}"
        left = deadline.remaining()
        if left <= 0:
            raise DeadlineExceeded(f"{what}: the call's deadline of {deadline.seconds:g} s passed")
        # Each wait is bounded by the time left as well: for a transport of the caller's,
        # which does not keep the deadline in its socket operations, that bounds them.
        timeout = httpx.Timeout(
            None,
            pool=left,
            connect=min(self._connect_timeout_seconds, left),
            read=left if read_seconds is None else min(read_seconds, left),
            write=left,
        )
        try:
            with within(deadline), self._http.stream(
                method, path, timeout=timeout, **kwargs
            ) as response:
                ok = response.status_code == 200
                received = read_body(
                    response,
                    limit if ok else ERROR_BODY_BYTES,
                    what,
                    deadline,
                    truncate=not ok,
                    advice=(
                        "Client(max_response_bytes=...) raises it, for a server whose "
                        "--max-response-bytes or --max-output-limit-bytes is larger"
                    )
                    if path == "/execute"
                    else "",
                    uploads=uploads,
                )
                return response.status_code, response.headers, received
        except httpx.HTTPError as error:
            if deadline.passed():
                raise DeadlineExceeded(
                    f"{what}: no complete answer within the call's deadline of "
                    f"{deadline.seconds:g} s ({str(error) or type(error).__name__})"
                ) from error
            raise TransportError(f"{what} failed: {error}") from error
