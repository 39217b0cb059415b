"""The client's hostile server: a test's own, on 127.0.0.1 with raw sockets, so that it
controls every byte and every pause of its answers; and what it answers with.

Each test starts one with the ``hostile`` fixture (conftest.py), given a function that
answers each request (an :class:`Exchange`), and calls it with a real :class:`Client`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kcoral import Client, Program
from kcoral._codec import Part, encode_multipart, sha256_hex

MiB = 1 << 20



@dataclass
class Exchange:
    """One request as the hostile server sees it; the answer is written to ``conn``."""

    conn: socket.socket
    method: str
    path: str
    headers: dict[str, str]
    number: int  # 0 for the server's first request, counted over all connections
    pending: bytearray = field(default_factory=bytearray)

    def read_body(self) -> bytes:
        length = int(self.headers.get("content-length", "0"))
        while len(self.pending) < length:
            data = self.conn.recv(1 << 16)
            if not data:
                break
            self.pending += data
        body, self.pending[:] = bytes(self.pending[:length]), self.pending[length:]
        return body

    def send(self, data: bytes) -> None:
        self.conn.sendall(data)


class HostileServer:
    """Answers every request with ``answer(exchange)``; a True result keeps the connection."""

    def __init__(self, answer: Callable[[Exchange], bool | None]) -> None:
        self._answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests = 0
        self._stopping = threading.Event()
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._stopping.set()
        self._listener.close()
        for conn in self._connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        pending = bytearray()
        with contextlib.suppress(OSError):
            while not self._stopping.is_set():
                while b"\r\n\r\n" not in pending:
                    data = conn.recv(1 << 16)
                    if not data:
                        return
                    pending += data
                head, _, rest = bytes(pending).partition(b"\r\n\r\n")
                request_line, *lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                exchange = Exchange(conn, method, path, headers, self.requests, bytearray(rest))
                self.requests += 1
                if not self._answer(exchange):
                    return
                pending = exchange.pending
        conn.close()



def head(status: int = 200, **headers: str | int) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [
        f"{name.replace('_', '-')}: {value}" for name, value in headers.items()
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer_with(body: bytes, content_type: str = "application/json", **headers: str | int):
    """An answer that reads the request and sends ``body`` whole; keeps the connection."""

    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        exchange.send(head(Content_Type=content_type, Content_Length=len(body), **headers) + body)
        return True

    return answer


def run_within(seconds: float, call: Callable[[], Any]) -> tuple[Any, BaseException | None, float]:
    """(result, exception, elapsed) of ``call``; fails the test, not hangs it, past ``seconds``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = call()
        except BaseException as error:  # reported to the test
            outcome["error"] = error

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call still runs after {seconds} s"
    return outcome.get("result"), outcome.get("error"), time.monotonic() - started


def completed(results: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    document = {
        "status": "COMPLETED", "request_id": "r", "queue_ms": 0.0, "elapsed_ms": 1.0,
        "lease_wait_ms": 0.0, "lease_held_ms": 0.0, "results": results or {}, "stdout": "",
        "stderr": "", "stdout_truncated": False, "stderr_truncated": False,
    }  # fmt: skip
    document.update(fields)
    return document


def program() -> Program:
    built = Program()
    built.return_(key="x", value=built.upload(kind="bytes", value=b"x"))
    return built


def executed(
    server: HostileServer, seconds: float, **client: Any
) -> tuple[Any, BaseException | None, float]:
    """:func:`run_within` of ``program()`` on a Client of ``server`` (made with ``client``)."""
    with Client(server.url, **client) as connected:
        return run_within(seconds, lambda: connected.execute(program()))


def multipart(document: dict[str, Any], *blobs: bytes) -> tuple[bytes, str]:
    parts = [Part("result", "application/json", json.dumps(document).encode())]
    parts += [Part(f"return:{i}", "application/octet-stream", blob) for i, blob in enumerate(blobs)]
    content_type, body = encode_multipart(parts)
    return body, content_type


def bytes_answer(mib: int) -> tuple[bytes, bytes, str]:
    """``mib`` MiB of bytes, and a multipart answer returning them as "b": (data, body, type)."""
    data = bytes(range(256)) * (mib * MiB // 256)
    node = {"type": "bytes", "part": "return:0", "sha256": sha256_hex(data)}
    body, content_type = multipart(completed({"b": node}), data)
    return data, body, content_type


def number_node(literal: str) -> bytes:
    text = json.dumps(completed({"x": {"type": "number", "value": 0.5}}))
    return text.replace("0.5", literal).encode()


BYTES_NODE = {"type": "bytes", "part": "return:0", "sha256": sha256_hex(b"data")}
BIG = bytes(range(256)) * (3 << 12)  # 3 MiB
MALFORMED = {
    "not JSON": (b"{\"status\": ", "application/json"),
    "not UTF-8": (b'{"status": "\xff"}', "application/json"),
    "a list": (b"[]", "application/json"),
    "wrong types": (json.dumps(completed(stdout=7, queue_ms="0")).encode(), "application/json"),
    "1e400": (number_node("1e400"), "application/json"),
    "a 400-digit number": (number_node("1" + "0" * 400), "application/json"),
    "a 400-digit queue_ms": (
        json.dumps(completed()).replace('"queue_ms": 0.0', '"queue_ms": 1' + "0" * 400).encode(),
        "application/json",
    ),
    "a 5000-digit integer": (
        json.dumps(completed({"x": {"type": "integer", "value": 0}})).replace(
            '"value": 0', '"value": 1' + "0" * 5000).encode(),
        "application/json",
    ),
    "nested 100000 deep": (b"[" * 100_000 + b"]" * 100_000, "application/json"),
    "a status nested 900 deep": (
        b'{"status": ' + b"[" * 900 + b"]" * 900 + b"}", "application/json"),
    "no boundary": (b"--x\r\n", "multipart/form-data"),
    "an unterminated part": (
        b'--b\r\nContent-Disposition: form-data; name="result"\r\n'
        b"Content-Type: application/json\r\n\r\n{}", "multipart/form-data; boundary=b"),
    "a part that does not match its sha256": multipart(completed({"b": BYTES_NODE}), b"tampered"),
    "a part no value names": multipart(completed(), b"extra"),
    "a tensor of an impossible shape": multipart(completed({"t": {
        "type": "tensor", "dtype": "float32", "shape": [0, 10**30], "part": "return:0",
        "sha256": sha256_hex(b"")}}), b""),
    "a status of an HTML page": (b"<html>hello</html>", "text/html"),
    # Megabyte parts are hashed on a thread beside their copy: a mismatch is still refused,
    # and it is the error even where the copy fails too (a tensor its bytes cannot fill).
    "a 3 MiB part that does not match its sha256": multipart(
        completed({"b": {"type": "bytes", "part": "return:0", "sha256": sha256_hex(BIG)}}),
        BIG[:-1] + b"!"),
    "a 3 MiB tensor part of another sha256 and the wrong shape": multipart(completed({"t": {
        "type": "tensor", "dtype": "float32", "shape": [5], "part": "return:0",
        "sha256": sha256_hex(b"other")}}), BIG),
    # Bodies from 4 MiB on are received into a memory mapping, not a bytearray.
    "a part in a mapped body that does not match its sha256": multipart(
        completed({"b": {"type": "bytes", "part": "return:0", "sha256": sha256_hex(BIG * 3)}}),
        BIG * 3 + b"!"),
    "a mapped body of JSON that is not UTF-8": (
        b'{"status": "' + b"a" * (8 * MiB) + b'\xff"}', "application/json"),
    "a mapped body whose boundary never closes": (
        b'--b\r\nContent-Disposition: form-data; name="result"\r\n'
        b"Content-Type: application/json\r\n\r\n" + b" " * (8 * MiB), "multipart/form-data; boundary=b"),
}

