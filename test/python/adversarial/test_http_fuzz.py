"""Hostile clients at the socket: a seeded stream of malformed, mutated and oversized HTTP
requests of up to megabytes, sent to a real server over real connections while another
client's program runs beside them. Whatever a request is, the server answers it with a
well-formed HTTP response (a JSON error for 4xx and 5xx) or closes the connection; it never
dies, never answers 500, and serves the next client.

The requests start from a valid POST /execute (a module, a 1 MiB blob and a return) and
are broken in the ways a careless or hostile client breaks them: bytes flipped, inserted
or cut anywhere; request lines, headers and header counts of megabytes; Content-Length
and Transfer-Encoding that lie or disagree; chunked bodies with bad sizes, megabyte
extensions or no end; multipart bodies with boundaries, part headers and blob names
changed; several requests pipelined on one connection; and plain random bytes.

KCORAL_HTTP_FUZZ_CASES (default 240) and KCORAL_HTTP_FUZZ_SEED (default 1) choose the run;
a failure names the case's seed, so ``KCORAL_HTTP_FUZZ_SEED=<seed>
KCORAL_HTTP_FUZZ_CASES=1`` replays it alone.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
from collections import Counter
from collections.abc import Callable

import h11
import pytest
from e2e.harness import Server
from kcoral import Program

from adversarial.victim import assert_serves, victim_beside

pytestmark = pytest.mark.slow

MiB = 1 << 20
CASES = int(os.environ.get("KCORAL_HTTP_FUZZ_CASES", "240"))
SEED = int(os.environ.get("KCORAL_HTTP_FUZZ_SEED", "1"))
HEALTH_EVERY = 20
ANSWER_TIMEOUT_S = 15.0


@pytest.fixture(scope="module")
def front(start_module_server) -> Server:
    return start_module_server("--num-workers", "2", "--queue-timeout-seconds", "60")


def valid_execute(rng: random.Random) -> tuple[str, bytes]:
    """A valid POST /execute body: a module, a blob of up to 1 MiB, a run and a return."""
    program = Program()
    module = program.upload(id="m", kind="module", source="def size(b):\n    return len(b)\n")
    blob = program.upload(id="b", kind="bytes", value=rng.randbytes(rng.choice([0, 1, 4096, MiB])))
    size = program.get_function(id="size", module=module, name="size")
    program.return_(key="n", value=program.run(id="r", fn=size, args=[blob]))
    return program.to_request()


# Sources of the module a well-framed request runs: a program that fails in each way a
# program can, so that mutated requests that still parse meet every outcome.
HOSTILE_SOURCES = [
    "deO size(b):\n    return len(b)\n",
    "def size(b):\n    raise ValueError('no size for you')\n",
    "def size(b):\n    return b\n",
    "def size(b):\n    return [b] * 3\n",
    "def size(b):\n    import os\n    os._exit(3)\n",
    "def size(b):\n    import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
    "def size(b):\n    return object()\n",
    "def size(b):\n    return {'x' * 100000: float('nan')}\n",
    "import sys\nsys.setrecursionlimit(10**5)\ndef size(b):\n    return size(b)\n",
    "def size(b):\n    print('x' * (1 << 22))\n    return 1\n",
]


def hostile_program(rng: random.Random) -> tuple[str, bytes]:
    """A well-framed POST /execute whose module fails in one of HOSTILE_SOURCES' ways."""
    program = Program()
    module = program.upload(id="m", kind="module", source=rng.choice(HOSTILE_SOURCES))
    blob = program.upload(id="b", kind="bytes", value=rng.randbytes(rng.choice([0, 4096])))
    size = program.get_function(id="size", module=module, name="size")
    program.return_(key="n", value=program.run(id="r", fn=size, args=[blob]))
    return program.to_request()


def request(content_type: str, body: bytes, *, extra: bytes = b"", method: bytes = b"POST",
            target: bytes = b"/execute", length: bytes | None = None) -> bytes:
    head = (method + b" " + target + b" HTTP/1.1\r\nHost: fuzz\r\nContent-Type: " + content_type.encode()
            + b"\r\nContent-Length: " + (str(len(body)).encode() if length is None else length) + b"\r\n")
    return head + extra + b"\r\n" + body


def flip_bytes(rng: random.Random, data: bytes) -> bytes:
    mutable = bytearray(data)
    for _ in range(rng.randint(1, 16)):
        position = rng.randrange(len(mutable))
        mutable[position] = rng.randrange(256)
    return bytes(mutable)


def insert_bytes(rng: random.Random, data: bytes) -> bytes:
    position = rng.randrange(len(data) + 1)
    junk = rng.choice([b"\r\n", b"\r\n\r\n", b"\x00", b"--", b":", rng.randbytes(rng.choice([1, 100, MiB]))])
    return data[:position] + junk + data[position:]


def cut(rng: random.Random, data: bytes) -> bytes:
    return data[:rng.randrange(len(data) + 1)]


def chunked(rng: random.Random, body: bytes, content_type: str) -> bytes:
    pieces = []
    position = 0
    while position < len(body):
        size = rng.choice([1, 7, 4096, 65536, MiB])
        piece = body[position:position + size]
        position += size
        extension = rng.choice([b"", b";a=b", b";" + b"x" * rng.choice([100, 70000, 2 * MiB])])
        size_text = rng.choice([b"%x" % len(piece), b"%X" % len(piece), b"%x" % (len(piece) + 1),
                                b"0x%x" % len(piece), b"-1", b"ffffffffffffffffff", b""])
        if rng.random() < 0.8:
            size_text = b"%x" % len(piece)
        pieces.append(size_text + extension + b"\r\n" + piece + b"\r\n")
    ending = rng.choice([b"0\r\n\r\n", b"0\r\nX-Trailer: y\r\n\r\n", b"", b"0\r\n"])
    return (b"POST /execute HTTP/1.1\r\nHost: fuzz\r\nContent-Type: " + content_type.encode()
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(pieces) + ending)


def framing_lies(rng: random.Random, content_type: str, body: bytes) -> bytes:
    lie = rng.choice([
        lambda: request(content_type, body, length=str(len(body) + rng.randint(1, 1000)).encode()),
        lambda: request(content_type, body, length=str(max(len(body) - rng.randint(1, 1000), 0)).encode()),
        lambda: request(content_type, body, length=b"-1"),
        lambda: request(content_type, body, length=b"18446744073709551616"),
        lambda: request(content_type, body, length=b"1e3"),
        lambda: request(content_type, body, extra=b"Content-Length: 7\r\n"),
        lambda: request(content_type, body, extra=b"Transfer-Encoding: chunked\r\n"),
        lambda: request(content_type, body, extra=b"Transfer-Encoding: gzip, chunked\r\n"),
        lambda: request(content_type, body, extra=b"Content-Encoding: gzip\r\n"),
        lambda: request(content_type, body, extra=b"Expect: 100-continue\r\n"),
    ])
    return lie()


def header_floods(rng: random.Random, content_type: str, body: bytes) -> bytes:
    flood = rng.choice([
        lambda: b"X-Junk: " + b"a" * rng.choice([8192, 70000, 2 * MiB]) + b"\r\n",
        lambda: b"".join(b"X-%d: v\r\n" % i for i in range(rng.choice([100, 5000, 100000]))),
        lambda: b"Authorization: Bearer " + rng.randbytes(rng.choice([16, 100000])).hex().encode() + b"\r\n",
        lambda: b"X-Request-ID: " + b"r" * rng.choice([200, 100000]) + b"\r\n",
        lambda: b"X-Request-ID: \xff\xfe\r\n",
        lambda: b"Content-Type: text/plain\r\n",
    ])
    return request(content_type, body, extra=flood())


def request_lines(rng: random.Random, content_type: str, body: bytes) -> bytes:
    method, target = rng.choice([
        (b"PUT", b"/execute"), (b"GET", b"/execute"), (b"POST", b"/health"), (b"POST", b"/metrics"),
        (b"POST", b"/execute?" + b"&".join(b"a%d=b" % i for i in range(20000))),
        (b"POST", b"/" + b"e" * rng.choice([100, 70000, 2 * MiB])),
        (b"POST", b"http://fuzz/execute"), (b"POST", b"*"), (b"POST", b"/execute#x"),
        (b"POST", b"/%00"), (b"BREW", b"/execute"), (b"P" * 10000, b"/execute"),
    ])
    data = request(content_type, body, method=method, target=target)
    if rng.random() < 0.2:
        data = data.replace(b"HTTP/1.1", rng.choice([b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9.9", b"HTTP/1.1.1", b""]), 1)
    return data


def multipart_mutations(rng: random.Random, content_type: str, body: bytes) -> bytes:
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    mutated = rng.choice([
        lambda: body.replace(b"--" + boundary, b"--" + boundary[:-1], rng.randint(1, 3)),
        lambda: body.replace(b'name="program"', b'name="program"; name="blob"', 1),
        lambda: body.replace(b"Content-Type: application/octet-stream",
                             b"Content-Type: application/octet-stream\r\nX: " + b"y" * 100000, 1),
        lambda: body.replace(b'name="', b'name="' + b"f" * rng.choice([1, 64, 100000]), 2),
        lambda: body + body,
        lambda: body.replace(b"--" + boundary + b"--", b"", 1),
        lambda: body.replace(b"\r\n\r\n", b"\n\n", rng.randint(1, 4)),
        lambda: body.replace(b'"kind"', b'"kind" ' * rng.choice([1, 10000]), 1),
        lambda: body.replace(b'"version"', b'"v\\u0000ersion"', 1),
    ])
    return request(content_type, mutated())


def pipelined(rng: random.Random, content_type: str, body: bytes) -> bytes:
    good = request(content_type, body)
    parts = [good, flip_bytes(rng, good), b"GET /health HTTP/1.1\r\nHost: fuzz\r\n\r\n", cut(rng, good)]
    rng.shuffle(parts)
    return b"".join(parts[:rng.randint(2, 4)])


def random_bytes(rng: random.Random, content_type: str, body: bytes) -> bytes:
    return rng.randbytes(rng.choice([1, 100, 65536, 4 * MiB]))


Mutation = Callable[[random.Random, str, bytes], bytes]
MUTATIONS: dict[str, Mutation] = {
    "flipped": lambda rng, ct, body: flip_bytes(rng, request(ct, body)),
    "inserted": lambda rng, ct, body: insert_bytes(rng, request(ct, body)),
    "cut": lambda rng, ct, body: cut(rng, request(ct, body)),
    "chunked": lambda rng, ct, body: chunked(rng, body, ct),
    "framing": framing_lies,
    "headers": header_floods,
    "request line": request_lines,
    "multipart": multipart_mutations,
    "pipelined": pipelined,
    "random": random_bytes,
    "program": lambda rng, ct, body: request(*hostile_program(rng)),
}


def holds_a_whole_request(data: bytes) -> bool:
    """Whether `data` begins with a whole request by HTTP's framing (h11's reading): the
    server then answers it, where for a request still missing bytes it would wait."""
    if not data:  # h11 reads no bytes as the end of the connection
        return False
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=len(data) + 1)
    connection.receive_data(data)
    try:
        while (event := connection.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
            if isinstance(event, h11.EndOfMessage):
                return True
            if isinstance(event, h11.ConnectionClosed):
                break
    except h11.RemoteProtocolError:
        pass
    return False


def answered(answer: bytes) -> bool:
    """Whether `answer` holds a whole final response (or one that HTTP does not allow, which
    check_answers will report)."""
    try:
        return any(code >= 200 for code, _ in read_answers(answer)[0])
    except h11.RemoteProtocolError:
        return True


class Stuck(Exception):
    """The server neither answered nor closed a connection in ANSWER_TIMEOUT_S."""


def connection_state(sock: socket.socket) -> str:
    """Both ends of `sock` as the kernel sees them (queues, timers, TCP state)."""
    port = sock.getsockname()[1]
    return subprocess.run(["ss", "-tanoi", f"( sport = :{port} or dport = :{port} )"],
                          capture_output=True, text=True, check=False).stdout


def exchange(server: Server, data: bytes) -> bytes:
    """Sends `data` on a fresh connection and returns what came back until the server
    closed it (which it may do before reading everything). The sending side is ended at
    once where `data` holds no whole request, else after the first final answer has come:
    a client that closes its side while its program waits or runs has left, and the server
    drops the program without answering. Raises Stuck, saying where the exchange was and
    what the connection's ends hold, where the server let it hang."""
    answer = bytearray()
    with socket.create_connection((server.host, server.port), timeout=ANSWER_TIMEOUT_S) as sock:
        wait_for_answer = holds_a_whole_request(data)
        sent_bytes = 0
        try:
            try:
                view = memoryview(data)
                while view:
                    sent = sock.send(view[:MiB])
                    view = view[sent:]
                    sent_bytes += sent
                if not wait_for_answer:
                    sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                wait_for_answer = False  # refused part-way: what it answered is still to be read
            try:
                while chunk := sock.recv(1 << 16):
                    answer += chunk
                    if wait_for_answer and answered(bytes(answer)):
                        sock.shutdown(socket.SHUT_WR)
                        wait_for_answer = False
            except ConnectionResetError:
                pass
        except TimeoutError as error:
            raise Stuck(f"sent {sent_bytes} of {len(data)} bytes (a whole request by h11: "
                        f"{holds_a_whole_request(data)}; still waiting for an answer before closing: "
                        f"{wait_for_answer}); received {len(answer)} bytes: {bytes(answer[:300])!r}\n"
                        f"the connection:\n{connection_state(sock)}") from error
    return bytes(answer)


def read_answers(answer: bytes, closed: bool = False) -> tuple[list[tuple[int, bytes]], bytes]:
    """The whole responses at the start of `answer` as (status, body), read by h11, and what
    follows them (a response not yet whole). `closed`: the server has closed the connection
    after `answer`. A response HTTP does not allow raises h11.RemoteProtocolError."""
    answers: list[tuple[int, bytes]] = []
    rest = answer
    while rest:
        reader = h11.Connection(h11.CLIENT)
        reader.send(h11.Request(method="POST", target="/", headers=[("Host", "fuzz"), ("Content-Length", "0")]))
        reader.send(h11.EndOfMessage())
        reader.receive_data(rest)
        if closed:
            reader.receive_data(b"")
        status, body = 0, bytearray()
        while not isinstance(event := reader.next_event(), h11.EndOfMessage):
            if event is h11.NEED_DATA:
                return answers, rest
            if isinstance(event, h11.InformationalResponse):
                answers.append((event.status_code, b""))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
        answers.append((status, bytes(body)))
        rest = reader.trailing_data[0]
    return answers, rest


def check_answers(answer: bytes, case: str) -> list[str]:
    """Every response in `answer` (all that came before the server closed the connection) is
    one HTTP allows, whole, a JSON error for 4xx and 5xx, and never 500. Returns each final
    answer as its status and outcome ("200 FAILED", "400 parse")."""
    try:
        answers, rest = read_answers(answer, closed=True)
    except h11.RemoteProtocolError as error:
        raise AssertionError(f"{case}: a malformed answer ({error}): {answer[:300]!r}") from error
    assert not rest, f"{case}: after {len(answers)} whole answers, {len(rest)} bytes: {rest[:300]!r}"
    outcomes = []
    for code, body in answers:
        assert code != 500, f"{case}: 500: {body[:500]!r}"
        if code < 200:
            continue
        document = json.loads(body) if body.startswith(b"{") else {}
        if code >= 400:
            assert document["status"] == "ERROR" and document["error"]["kind"], f"{case}: {body[:300]!r}"
            outcomes.append(f"{code} {document['error']['kind']}")
        else:
            outcomes.append(f"{code} {document.get('status', 'other')}")
    return outcomes


def test_a_stream_of_hostile_requests_never_kills_the_server(front):
    seen: Counter[str] = Counter()
    with victim_beside(front, seconds=5):
        for number in range(CASES):
            seed = SEED + number
            rng = random.Random(seed)
            name = rng.choice(sorted(MUTATIONS))
            case = f"case {name} (KCORAL_HTTP_FUZZ_SEED={seed})"
            content_type, body = valid_execute(rng)
            try:
                answer = exchange(front, MUTATIONS[name](rng, content_type, body))
            except Stuck as stuck:
                pytest.fail(f"{case}: neither answered nor closed in {ANSWER_TIMEOUT_S} s: {stuck}\n"
                            f"the server's log ends:\n{front.stderr_text()[-3000:]}")
            for outcome in check_answers(answer, case):
                seen[outcome] += 1
            if not answer:
                seen["closed"] += 1
            assert front.process.poll() is None, f"{case}: the server exited:\n{front.stderr_text()[-3000:]}"
            if number % HEALTH_EVERY == HEALTH_EVERY - 1:
                assert front.get("/health").status_code == 200, case
    assert_serves(front)
    print(f"outcomes of {CASES} cases:", dict(sorted(seen.items())))
    # The stream reached the programs: some mutated requests ran, some were refused.
    assert seen["200 COMPLETED"] and seen["200 FAILED"] and seen["400 parse"], dict(seen)
