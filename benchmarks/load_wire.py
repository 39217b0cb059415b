"""The wire of benchmarks/load.py: requests built byte by byte, sent at any pace, and
responses read back with their timing, over raw asyncio streams (so that partial, slow
and abandoned requests are the client's to make).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import json
import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

CONNECT_TIMEOUT_S = 10.0
CHUNK_BYTES = 64 * 1024
SOURCE = "def f(token, data):\n    return token + ':' + str(len(data))\n"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def program_json(token: str, blob_sha: str) -> bytes:
    program = {
        "instructions": [
            {"op": "upload", "id": "data", "kind": "bytes", "blob": blob_sha},
            {"op": "upload", "id": "m", "kind": "module", "source": SOURCE},
            {"op": "get_function", "id": "f", "module": {"$ref": "m"}, "name": "f"},
            {"op": "run", "id": "r", "fn": {"$ref": "f"}, "args": [token, {"$ref": "data"}]},
            {"op": "return", "key": "token", "value": {"$ref": "r"}},
        ],
        "options": {"timeout_seconds": 60},
    }
    return json.dumps(program, separators=(",", ":")).encode()


def multipart(parts: list[tuple[str, str, bytes]]) -> tuple[str, list[bytes]]:
    """(Content-Type, body pieces) of multipart/form-data; pieces keep a large payload
    uncopied. The boundary is random hex, which neither JSON nor our blobs contain
    (the random miss blobs are too short for a 32-hex-digit match to be likely)."""
    boundary = "load-" + uuid.uuid4().hex
    pieces: list[bytes] = []
    for name, content_type, data in parts:
        pieces.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n'
                      f"Content-Type: {content_type}\r\n\r\n".encode())
        pieces += [data, b"\r\n"]
    pieces.append(f"--{boundary}--\r\n".encode())
    return f"multipart/form-data; boundary={boundary}", pieces


def execute_request(host: str, request_id: str, token: str, blob_sha: str,
                    blob: bytes | None = None, chunked: bool = False) -> tuple[bytes, list[bytes]]:
    """(head, body pieces) of one POST /execute; with ``chunked`` the pieces are already
    framed as chunks."""
    parts = [("program", "application/json", program_json(token, blob_sha))]
    if blob is not None:
        parts.append((f"blob:{blob_sha}", "application/octet-stream", blob))
    content_type, pieces = multipart(parts)
    if chunked:
        framed: list[bytes] = []
        for piece in pieces:
            for start in range(0, len(piece), CHUNK_BYTES):
                chunk = piece[start:start + CHUNK_BYTES]
                framed += [f"{len(chunk):x}\r\n".encode(), chunk, b"\r\n"]
        pieces = [*framed, b"0\r\n\r\n"]
        length = "Transfer-Encoding: chunked"
    else:
        length = f"Content-Length: {sum(len(piece) for piece in pieces)}"
    head = (f"POST /execute HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
            f"{length}\r\nX-Request-ID: {request_id}\r\n\r\n").encode()
    return head, pieces


def write_pieces(pieces: list[bytes]) -> Iterator[bytes]:
    """The pieces in writes of at most CHUNK_BYTES, so that a large body is paced by
    the socket (drain) instead of queued whole in the transport."""
    for piece in pieces:
        view = memoryview(piece)
        for start in range(0, len(view), CHUNK_BYTES):
            yield bytes(view[start:start + CHUNK_BYTES])


@dataclasses.dataclass
class Response:
    status: int
    headers: dict[str, str]  # lowercase names
    body: bytes

    def json(self) -> dict[str, Any]:
        try:
            value = json.loads(self.body)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def label(self) -> str:
        """``200 COMPLETED``, ``200 CACHE_MISS``, ``413 request_too_large``, ``503 busy``."""
        body = self.json()
        if self.status == 200 and "status" in body:
            return f"200 {body['status']}"
        error = body.get("error")
        kind = error.get("kind") if isinstance(error, dict) else None
        return f"{self.status} {kind}" if kind else str(self.status)

    def closes(self) -> bool:
        return self.headers.get("connection", "").lower() == "close"


class NoResponse(Exception):
    """The connection ended, or the time ran out, before a whole response came."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def read_response(reader: asyncio.StreamReader) -> Response:
    started = False
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            started = True
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name:
                    headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200:
                continue
            if "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                pieces = []
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    pieces.append(await reader.readexactly(size + 2))  # no trailers
                    if size == 0:
                        break
                body = b"".join(piece[:-2] for piece in pieces)
            else:
                body = await reader.read()
            return Response(status, headers, body)
    except asyncio.IncompleteReadError as error:
        started = started or bool(error.partial)
        raise NoResponse("closed mid-response" if started else "closed") from None
    except (ConnectionResetError, BrokenPipeError):
        raise NoResponse("reset mid-response" if started else "reset") from None
    except (asyncio.LimitOverrunError, ValueError, IndexError):
        raise NoResponse("malformed response") from None


class Link:
    """One client connection of a loader, reopened when either side has ended it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.uses = 0  # requests begun on the current connection

    async def open(self) -> bool:
        """Connects if needed; True when the request goes on a reused connection."""
        if self.reader is None or self.reader.at_eof():
            self.close()
            try:
                self.reader, self.writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), CONNECT_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as error:
                raise NoResponse(f"connect failed ({type(error).__name__})") from None
            self.uses = 0
        self.uses += 1
        return self.uses > 1

    def close(self, reset: bool = False) -> None:
        if self.writer is None:
            return
        if reset:  # SO_LINGER 0: the close sends RST, and unsent bytes are dropped
            sock = self.writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.writer.transport.abort()
        else:
            self.writer.close()
        self.reader = self.writer = None


async def _send(writer: asyncio.StreamWriter, chunks: Iterator[bytes]) -> None:
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()


def _quiet(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # the server may close while we send: not an error of the run


async def exchange(link: Link, head: bytes, pieces: list[bytes], timeout: float) -> Response:
    """Sends a request while reading its answer (a server may answer before the body is
    all sent: 413, 503). Raises NoResponse, after closing the link, when none comes."""
    reused = await link.open()
    assert link.reader is not None and link.writer is not None
    sender = asyncio.create_task(_send(link.writer, itertools.chain([head], write_pieces(pieces))))
    sender.add_done_callback(_quiet)
    try:
        response = await asyncio.wait_for(read_response(link.reader), timeout)
    except asyncio.TimeoutError:
        link.close()
        raise NoResponse("timeout") from None
    except NoResponse as error:
        link.close()
        if reused and error.reason in ("closed", "reset"):
            error.reason += " (reused connection)"
        raise
    finally:
        if not sender.done():
            sender.cancel()
    if not sender.done() or sender.cancelled() or sender.exception() or response.closes():
        link.close()  # answered early, or the server ends the connection: not reusable
    return response
