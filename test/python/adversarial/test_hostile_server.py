"""A hostile server against the client: everything it sends is written by an attacker.

The server is the test's own, on 127.0.0.1 with raw sockets, so that it controls every
byte and every pause: compression bombs, answers dribbled a byte at a time (the head, the
body, on a fresh connection or a kept-alive one), endless ``100 Continue`` heads, an upload
read at a trickle, malformed bodies and numbers beyond a float, and answers to ``kcoral
run`` with impossible exit statuses and terminal escape sequences. Each attack must end in
one of the client's documented exceptions (or, for ``kcoral run``, exit 125 or escaped
output), within its deadline and its memory bound.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import kcoral._body
import kcoral._client
import kcoral._result
from kcoral import Client, DeadlineExceeded, Program, ProtocolError, TransportError, _cli
from kcoral._codec import Part, encode_multipart, sha256_hex

MiB = 1 << 20


# -- the server ----------------------------------------------------------------------------


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


@pytest.fixture
def hostile() -> Iterator[Callable[[Callable[[Exchange], bool | None]], HostileServer]]:
    servers: list[HostileServer] = []

    def start(answer: Callable[[Exchange], bool | None]) -> HostileServer:
        servers.append(HostileServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


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


# -- bombs ---------------------------------------------------------------------------------


def bomb(wbits: int, inflated_mib: int) -> bytes:
    """A gzip (wbits 31) or zlib (15) stream of ``inflated_mib`` MiB of zeros, ~1 KiB per MiB.

    Each MiB is compressed after a full flush, so one compressed MiB repeats byte for byte;
    the stream never ends (no trailer), since the client must stop long before one.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(MiB)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + again * (inflated_mib - 1)


@pytest.mark.parametrize(("coding", "wbits"), [("gzip", 31), ("deflate", 15)])
def test_a_2_mb_bomb_for_2_gib_stops_at_the_limit_holding_no_more(hostile, coding, wbits):
    body = bomb(wbits, 2048)
    assert len(body) < 3 * MiB
    server = hostile(answer_with(body, Content_Encoding=coding))
    tracemalloc.start()
    try:
        with Client(server.url, max_response_bytes=16 * MiB) as client:
            _, error, elapsed = run_within(30, lambda: client.execute(program()))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(error, ProtocolError), error
    assert "16 MiB" in str(error) and "max_response_bytes" in str(error)
    assert peak < 16 * MiB + 8 * MiB, f"{peak / MiB:.0f} MiB held"


def test_a_health_bomb_stops_at_one_mib(hostile):
    server = hostile(answer_with(bomb(31, 2048), Content_Encoding="gzip"))
    tracemalloc.start()
    try:
        with Client(server.url) as client:
            _, error, _ = run_within(30, client.health)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(error, ProtocolError) and "1 MiB" in str(error), error
    assert peak < 8 * MiB, f"{peak / MiB:.0f} MiB held"


def test_a_plain_answer_over_the_limit_is_refused_by_its_declared_length(hostile):
    server = hostile(lambda exchange: exchange.send(head(Content_Length=64 * MiB)))
    with Client(server.url, max_response_bytes=MiB) as client:
        _, error, elapsed = run_within(10, lambda: client.execute(program()))
    assert isinstance(error, ProtocolError) and "declares 67108864 bytes" in str(error), error
    assert elapsed < 5


def test_an_answer_cut_short_of_its_declared_length_is_an_error_not_a_short_body(hostile):
    # The client reads a declared length into one buffer of that size as it comes: a server
    # that promises 64 MiB, sends 1 and hangs up must not leave a zero-filled tail behind.
    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        exchange.send(head(Content_Type="application/json", Content_Length=64 * MiB) + b"{" * MiB)
        exchange.conn.shutdown(socket.SHUT_RDWR)
        return False

    server = hostile(answer)
    with Client(server.url) as client:
        _, error, _ = run_within(20, lambda: client.execute(program()))
    assert isinstance(error, TransportError), repr(error)


def test_a_large_answer_of_declared_length_comes_back_whole(hostile):
    data, body, content_type = bytes_answer(48)
    server = hostile(answer_with(body, content_type))
    with Client(server.url) as client:
        result, error, _ = run_within(60, lambda: client.execute(program()))
    assert error is None, repr(error)
    assert type(result["b"]) is bytes and result["b"] == data


def test_a_large_answer_is_received_past_h11_and_what_follows_it_is_never_read(hostile, monkeypatch):
    # The rest of a large plain answer is received straight into its buffer, and its
    # connection is then closed: bytes sent after its declared length (here a forged answer
    # to the next request) are never taken for anything, and the next call connects anew.
    direct: list[int] = []
    real = kcoral._body._receive_rest
    monkeypatch.setattr(
        kcoral._body, "_receive_rest", lambda *args: direct.append(args[2]) or real(*args)
    )
    data, large, large_type = bytes_answer(24)
    forged = json.dumps(completed({"x": {"type": "string", "value": "forged"}})).encode()
    honest = json.dumps(completed({"x": {"type": "string", "value": "honest"}})).encode()
    connections: list[socket.socket] = []

    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        connections.append(exchange.conn)
        if exchange.number == 0:
            forged_answer = head(Content_Type="application/json", Content_Length=len(forged)) + forged
            exchange.send(head(Content_Type=large_type, Content_Length=len(large)) + large + forged_answer)
        else:
            exchange.send(head(Content_Type="application/json", Content_Length=len(honest)) + honest)
        return True

    server = hostile(answer)
    with Client(server.url) as client:
        result, error, _ = run_within(60, lambda: client.execute(program()))
        assert error is None, repr(error)
        assert result["b"] == data
        second, error, _ = run_within(20, lambda: client.execute(program()))
    assert error is None, repr(error)
    assert second["x"] == "honest"
    assert len(direct) == 1 and direct[0] < 24 * MiB  # most of it came past h11
    assert connections[0] is not connections[1]


def test_a_large_chunked_answer_that_declares_a_length_too_is_read_as_chunks(hostile):
    # HTTP reads a body by its chunks where it has both: the length must not make the
    # client take the chunks' framing for the body's bytes.
    data, body, content_type = bytes_answer(24)
    step = 3 * MiB
    chunked = b"".join(
        b"%x\r\n" % len(body[at : at + step]) + body[at : at + step] + b"\r\n"
        for at in range(0, len(body), step)
    ) + b"0\r\n\r\n"

    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        exchange.send(
            head(Content_Type=content_type, Content_Length=len(body), Transfer_Encoding="chunked") + chunked
        )
        return True

    server = hostile(answer)
    with Client(server.url) as client:
        result, error, _ = run_within(60, lambda: client.execute(program()))
    assert error is None, repr(error)
    assert result["b"] == data


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip, gzip, gzip", "compress"])
def test_codings_the_client_did_not_ask_for_are_refused(hostile, coding):
    requests: list[Exchange] = []

    def answer(exchange: Exchange) -> bool:
        requests.append(exchange)
        return answer_with(b"\x0b\x02\x80{}\x03", Content_Encoding=coding)(exchange)

    server = hostile(answer)
    with Client(server.url) as client:
        _, error, _ = run_within(10, lambda: client.execute(program()))
    assert isinstance(error, ProtocolError) and "content coding" in str(error), error
    assert requests[0].headers["accept-encoding"] == "gzip, deflate"


# -- slow answers and the deadline ---------------------------------------------------------


def dribble(exchange: Exchange, data: bytes, interval: float) -> None:
    for index in range(len(data)):
        exchange.send(data[index : index + 1])
        time.sleep(interval)


def endless_body(interval: float, length: int = 10 * MiB):
    def answer(exchange: Exchange) -> None:
        exchange.read_body()
        exchange.send(head(Content_Type="application/json", Content_Length=length))
        dribble(exchange, b" " * length, interval)

    return answer


def endless_head(interval: float, after_a_cache_miss: bool = False):
    digest = sha256_hex(b"x")

    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        if after_a_cache_miss and exchange.number == 0:
            miss = json.dumps({"status": "CACHE_MISS", "request_id": "r",
                               "missing_blobs": [digest]}).encode()
            exchange.send(head(Content_Type="application/json", Content_Length=len(miss)) + miss)
            return True  # the next request comes on this kept-alive connection
        dribble(exchange, b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"a" * (100 << 10), interval)
        return False

    return answer


def endless_continue(exchange: Exchange) -> None:
    exchange.read_body()
    while True:
        exchange.send(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("attack", "interval"),
    [
        (endless_body, 0.2),
        (endless_body, 1.5),
        (endless_head, 0.2),
        (lambda interval: endless_head(interval, after_a_cache_miss=True), 0.2),
        (lambda interval: endless_continue, 0),
    ],
    ids=["body-0.2s", "body-1.5s", "head", "head-on-a-kept-connection", "100-continue"],
)
def test_an_answer_that_never_ends_is_cut_at_the_deadline(hostile, attack, interval):
    server = hostile(attack(interval))
    with Client(server.url, deadline_seconds=3) as client:
        _, error, elapsed = run_within(20, lambda: client.execute(program(), timeout_seconds=1))
    assert isinstance(error, DeadlineExceeded), error
    assert "deadline of 3 s" in str(error)
    assert 2.9 < elapsed < 4.5


@pytest.mark.slow
def test_the_default_deadline_follows_the_timeout(hostile, monkeypatch):
    # timeout_seconds + both margins: 1 + 1 + 1 seconds here.
    monkeypatch.setattr(kcoral._client, "READ_TIMEOUT_MARGIN_SECONDS", 1.0)
    monkeypatch.setattr(kcoral._client, "DEADLINE_MARGIN_SECONDS", 1.0)
    server = hostile(endless_body(0.2))
    with Client(server.url) as client:
        _, error, elapsed = run_within(20, lambda: client.execute(program(), timeout_seconds=1))
    assert isinstance(error, DeadlineExceeded) and "deadline of 3 s" in str(error), error
    assert 2.9 < elapsed < 4.5


@pytest.mark.slow
def test_health_is_cut_at_its_deadline(hostile):
    server = hostile(endless_body(0.5, length=1000))
    with Client(server.url, deadline_seconds=2) as client:
        _, error, elapsed = run_within(20, client.health)
    assert isinstance(error, DeadlineExceeded), error
    assert 1.9 < elapsed < 3.5


@pytest.mark.slow
def test_an_upload_read_at_a_trickle_is_cut_at_the_deadline(hostile):
    """The server asks for the blob, then reads 16 KiB every 0.1 s: every send moves on, so
    only the deadline, not a write timeout, can end it."""
    blob = bytes(64 * MiB)
    digest = sha256_hex(blob)
    built = Program()
    built.return_(key="x", value=built.upload(kind="bytes", value=blob))

    def answer(exchange: Exchange) -> bool:
        if exchange.number == 0:
            exchange.read_body()
            miss = json.dumps({"status": "CACHE_MISS", "request_id": "r",
                               "missing_blobs": [digest]}).encode()
            exchange.send(head(Content_Type="application/json", Content_Length=len(miss)) + miss)
            return True
        while exchange.conn.recv(16 << 10):
            time.sleep(0.1)
        return False

    server = hostile(answer)
    with Client(server.url, deadline_seconds=3) as client:
        _, error, elapsed = run_within(30, lambda: client.execute(built))
    assert isinstance(error, DeadlineExceeded), error
    assert 2.9 < elapsed < 4.5


# -- malformed answers ---------------------------------------------------------------------


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


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_answer_is_a_protocol_error(hostile, name):
    body, content_type = MALFORMED[name]
    server = hostile(answer_with(body, content_type))
    with Client(server.url) as client:
        _, error, _ = run_within(20, lambda: client.execute(program()))
    assert isinstance(error, ProtocolError), repr(error)
    assert len(str(error)) < 2000
    if "sha256" in name:
        assert "does not match its sha256" in str(error), str(error)


@pytest.mark.parametrize(
    ("body", "coding"),
    [
        (zlib.compress(json.dumps(completed()).encode())[:-6], "deflate"),  # cut short
        (zlib.compress(json.dumps(completed()).encode()) + b"more", "deflate"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
    ],
    ids=["truncated", "trailing-data", "garbage"],
)
def test_an_undecodable_coded_answer_is_a_protocol_error(hostile, body, coding):
    server = hostile(answer_with(body, Content_Encoding=coding))
    with Client(server.url) as client:
        _, error, _ = run_within(20, lambda: client.execute(program()))
    assert isinstance(error, ProtocolError) and "undecodable" in str(error), repr(error)


def test_a_gzip_answer_in_several_members_is_read(hostile):
    text = json.dumps(completed({"x": {"type": "integer", "value": 7}})).encode()
    members = b"".join(zlib.compress(text[i : i + 10], wbits=31) for i in range(0, len(text), 10))
    server = hostile(answer_with(members, Content_Encoding="gzip"))
    with Client(server.url) as client:
        result, error, _ = run_within(20, lambda: client.execute(program()))
    assert error is None and result["x"] == 7


# -- kcoral run ----------------------------------------------------------------------------


def tool_answer(exit_code: Any, stdout: str = "", stderr: str = ""):
    results = {"tool": {"type": "object", "value": {"exit_code": exit_code}}}
    return answer_with(json.dumps(completed(results, stdout=stdout, stderr=stderr)).encode())


@pytest.mark.parametrize(
    "exit_code",
    [
        {"type": "integer", "value": 256},
        {"type": "integer", "value": -1},
        {"type": "integer", "value": 1 << 70},
        {"type": "string", "value": "0"},
        {"type": "boolean", "value": True},
        {"type": "number", "value": 0.0},
    ],
    ids=["256", "-1", "2**70", "'0'", "True", "0.0"],
)
def test_kcoral_run_exits_125_for_an_exit_status_outside_0_255(hostile, capsys, exit_code):
    server = hostile(tool_answer(exit_code))
    code, error, _ = run_within(
        20, lambda: _cli.main(["run", "--url", server.url, "shell", "--no-upload", "true"])
    )
    assert error is None and code == 125, (code, error)
    assert "exit status" in capsys.readouterr().err


HOSTILE_OUTPUT = (
    "\x1b]0;owned\x07"  # retitles the window
    "\x1b]52;c;cm0gLXJmIH4=\x07"  # sets the clipboard
    "\x1b[2J\x1b[1;1H"  # clears the screen, homes the cursor
    "\x9b31m"  # a C1 CSI on its own
    "\u202eevil\u202c"  # a bidi override
    "fake prompt\rreal\r\n"  # a bare CR rewrites the line; CR LF ends one
    "tab\tand newline\n"
)
SHOWN = (
    "\\x1b]0;owned\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\x1b[1;1H\\x9b31m"
    "\\u202eevil\\u202cfake prompt\\x0dreal\r\ntab\tand newline\n"
)


def test_kcoral_run_prints_terminal_controls_as_escapes(hostile, capsys):
    server = hostile(tool_answer({"type": "integer", "value": 0}, HOSTILE_OUTPUT, HOSTILE_OUTPUT))
    code, error, _ = run_within(
        20, lambda: _cli.main(["run", "--url", server.url, "shell", "--no-upload", "true"])
    )
    assert error is None and code == 0
    printed = capsys.readouterr()
    assert printed.out == SHOWN and printed.err == SHOWN
    code, error, _ = run_within(20, lambda: _cli.main(
        ["run", "--url", server.url, "shell", "--raw-output", "--no-upload", "true"]))
    assert error is None and code == 0
    printed = capsys.readouterr()
    assert printed.out == HOSTILE_OUTPUT and printed.err == HOSTILE_OUTPUT


def test_kcoral_run_shows_a_failed_programs_error_and_traceback_escaped(hostile, capsys):
    error = {"kind": "runtime", "message": "boom\x1b[2J", "instruction_index": 0,
             "instruction_op": "run", "instruction_id": None, "traceback": "tb\x1b]0;x\x07"}
    document = completed(status="FAILED", error=error)
    server = hostile(answer_with(json.dumps(document).encode()))
    code, failure, _ = run_within(
        20, lambda: _cli.main(["run", "--url", server.url, "shell", "--no-upload", "true"])
    )
    assert failure is None and code == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "boom\\x1b[2J" in err and "tb\\x1b]0;x\\x07" in err


# -- answers hashed while they arrive ----------------------------------------------------------
#
# Where the client may use several cores, a large multipart answer's parts are hashed while
# it arrives (kcoral._part_hasher), whatever the body says of itself: forced on here.


@pytest.fixture
def hashed_while_received(monkeypatch):
    monkeypatch.setattr(kcoral._body, "HASH_WHILE_RECEIVING_CORES", 1)
    yield
    hashers = [thread for thread in threading.enumerate() if thread.name == "kcoral-part-hasher"]
    assert not hashers, "the hasher's thread outlived the call"


def hashed_after_receiving(monkeypatch) -> list[int]:
    """The sizes of what the client's decoder hashes itself, after the answer arrived."""
    hashed: list[int] = []
    real = kcoral._result.sha256_hex
    monkeypatch.setattr(kcoral._result, "sha256_hex", lambda b: hashed.append(len(b)) or real(b))
    return hashed


@pytest.mark.parametrize("name", [name for name in MALFORMED if "mapped" in name])
def test_a_malformed_answer_hashed_while_it_arrives_is_a_protocol_error(
    hostile, hashed_while_received, name
):
    body, content_type = MALFORMED[name]
    server = hostile(answer_with(body, content_type))
    with Client(server.url) as client:
        _, error, _ = run_within(20, lambda: client.execute(program()))
    assert isinstance(error, ProtocolError), repr(error)
    if "sha256" in name:
        assert "does not match its sha256" in str(error), str(error)


def test_a_large_answer_hashed_while_it_arrives_is_checked_by_that_hash(
    hostile, hashed_while_received, monkeypatch
):
    data = bytes(range(256)) * (24 * MiB // 256)
    node = {"type": "bytes", "part": "return:0", "sha256": sha256_hex(data)}
    body, content_type = multipart(completed({"b": node, "c": {**node, "part": "return:1"}}), data, data)
    hashed_after = hashed_after_receiving(monkeypatch)
    server = hostile(answer_with(body, content_type))
    with Client(server.url) as client:
        result, error, _ = run_within(60, lambda: client.execute(program()))
    assert error is None, repr(error)
    assert result["b"] == data and result["c"] == data
    assert hashed_after == []  # both parts' digests came from the receiving


def test_a_preamble_dressed_as_a_part_is_hashed_but_never_taken(hostile, hashed_while_received):
    """A preamble holding "--boundary" and a blank line: the hasher takes it for a part and
    hashes it; the decoder, which skips a preamble up to the first delimiter after CRLF,
    never sees that part, and the real one comes back as it was sent."""
    data, body, content_type = bytes_answer(5)
    boundary = content_type.split("boundary=")[1].encode()
    body = b"x--" + boundary + b"\r\n\r\n" + bytes(MiB) + b"\r\n" + body
    server = hostile(answer_with(body, content_type))
    with Client(server.url) as client:
        result, error, _ = run_within(60, lambda: client.execute(program()))
    assert error is None, repr(error)
    assert result["b"] == data


def test_an_answer_that_stops_midway_while_hashed_ends_at_the_deadline(hostile, hashed_while_received):
    def answer(exchange: Exchange) -> bool:
        exchange.read_body()
        exchange.send(head(Content_Type="multipart/form-data; boundary=b", Content_Length=64 * MiB))
        exchange.send(b'--b\r\nContent-Disposition: form-data; name="result"\r\n\r\n' + bytes(8 * MiB))
        time.sleep(10)
        return False

    server = hostile(answer)
    with Client(server.url, deadline_seconds=2) as client:
        _, error, _ = run_within(20, lambda: client.execute(program()))
    assert isinstance(error, (DeadlineExceeded, TransportError)), repr(error)


def test_a_large_answer_received_into_a_bytearray_is_hashed_while_it_arrives_too(
    hostile, hashed_while_received, monkeypatch
):
    """Where Python has no madvise (macOS, say) a large body goes into a bytearray."""
    monkeypatch.setattr(kcoral._body, "_receive_buffer", bytearray)
    data, body, content_type = bytes_answer(6)
    hashed_after = hashed_after_receiving(monkeypatch)
    server = hostile(answer_with(body, content_type))
    with Client(server.url) as client:
        result, error, _ = run_within(60, lambda: client.execute(program()))
    assert error is None, repr(error)
    assert result["b"] == data and hashed_after == []
