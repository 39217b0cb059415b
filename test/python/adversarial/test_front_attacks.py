"""Attacks on the front itself: what a worker sends it, what clients make it hold, and who
may take its connections. Each runs against a real server while another client's program
runs beside it and must complete with its own result; then the server must still serve.

- a program's worker is its own: a program can lift Python's limit on integer digits, or
  replace the worker's encoder of returned values (as ctypes could patch anything in the
  process) and send the front numbers of megabytes, nesting a million deep, or text that
  would break the response's JSON, or break the encoder's contract with the executor;
- small requests naming a large cached blob make the front copy it for each program: the
  copies are held to the in-flight budget;
- what parsing a program part takes, and what the parsed program keeps, are held there too;
- answers arriving from workers are held to the in-flight budget from their arrival, their
  output twice (as text and as JSON), and an error's message and traceback are cut;
- a client that never reads a large answer is cut off within seconds;
- a header folded onto a continuation line (obs-fold) is refused, Content-Length included;
- a header of more than 128 fields is refused before it is parsed;
- a chunk's size line or a trailer without end is refused at the header's limit;
- with tokens, connections without one cannot take the slots of those with one.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

import pytest
from e2e.harness import Server, wait_until
from e2e.programs import call
from kcoral import EngineError, Program, ProtocolError, RequestTooLarge, ServerBusy

from adversarial.victim import assert_serves, victim_beside

pytestmark = pytest.mark.slow

MiB = 1 << 20

# The program replaces the worker's encoder of returned values: from then on, what the
# front receives as this program's returned values is the text `shape` makes. Built in the
# worker, so that megabytes need not travel in the request.
PATCHED_ENCODER = r'''
import sys

SHAPES = {
    "typed_tree_200000_deep": lambda: '{"type":"array","value":[' * 200000 + "]}" * 200000,
    "arrays_million_deep": lambda: "[" * 1000000 + "]" * 1000000,
    "integer_of_4_mb": lambda: '{"type":"integer","value":' + "7" * (4 << 20) + "}",
    "string_of_16_mb": lambda: '{"type":"string","value":"' + "x" * (16 << 20) + '"}',
    "breaks_out": lambda: '{"type":"null"}},"status":"COMPLETED","x":{"y":1',
    "unterminated": lambda: '{"type":"string","value":"' + "\\u00e9" * 100000,
}

def patch(shape):
    text = SHAPES[shape]().encode()
    support = sys.modules["_kcoral_executor"]
    support.encode_value = lambda value, key, first_part, budget_bytes: ([], lambda digests: text)
    return None
'''

# The program replaces the encoder with one that breaks its contract with the executor:
# gives no (parts, text function) pair, parts without bytes, or text that is not bytes.
BROKEN_ENCODER = r'''
import sys

BROKEN = {
    "no_pair": lambda value, key, first_part, budget_bytes: None,
    "parts_not_a_sequence": lambda value, key, first_part, budget_bytes: (42, lambda d: b"{}"),
    "part_without_bytes": lambda value, key, first_part, budget_bytes: ([object()], lambda d: b"{}"),
    "text_not_bytes": lambda value, key, first_part, budget_bytes: ([], lambda d: "{}"),
    "text_raises": lambda value, key, first_part, budget_bytes: ([b"x" * 4096], lambda d: 1 / 0),
}

def patch(how):
    sys.modules["_kcoral_executor"].encode_value = BROKEN[how]
    return None
'''

BIG_INT = r'''
import sys

def big():
    sys.set_int_max_str_digits(0)
    return 10 ** 39999
'''


@pytest.fixture(scope="module")
def front(start_module_server) -> Server:
    return start_module_server("--num-workers", "2", "--queue-timeout-seconds", "60")


def patched(shape: str) -> Program:
    return call(PATCHED_ENCODER, "patch", shape)


# -- what a worker sends -----------------------------------------------------------------------


def test_an_integer_of_40000_digits_fails_its_return_and_the_server_lives(front):
    with victim_beside(front):
        result = front.execute(call(BIG_INT, "big"))
    assert result.status == "FAILED"
    assert result.error["kind"] == "serialization"
    assert "more than 4300 digits" in result.error["message"]
    assert result.error["instruction_op"] == "return"
    assert_serves(front)


@pytest.mark.parametrize("shape", ["typed_tree_200000_deep", "arrays_million_deep"])
def test_values_nested_past_the_limit_fail_the_program_as_serialization(front, shape):
    with victim_beside(front):
        result = front.execute(patched(shape), read_timeout_s=120)
    assert result.status == "FAILED"
    assert result.error["kind"] == "serialization"
    assert "return 'out': returned values nested deeper than 256 levels" in result.error["message"]
    assert (result.error["instruction_op"], result.error["instruction_index"]) == ("return", 3)
    assert_serves(front)


def test_a_number_of_megabytes_passes_the_front_and_the_client_refuses_it_cleanly(front):
    with victim_beside(front):
        with pytest.raises(ProtocolError, match="digits"):
            front.execute(patched("integer_of_4_mb"), read_timeout_s=120)
    assert_serves(front)


def test_a_string_of_16_mb_passes_whole(front):
    with victim_beside(front):
        result = front.execute(patched("string_of_16_mb"), read_timeout_s=120)
    assert result.raise_for_error()["out"] == "x" * (16 << 20)


@pytest.mark.parametrize(
    "how", ["no_pair", "parts_not_a_sequence", "part_without_bytes", "text_not_bytes", "text_raises"]
)
def test_an_encoder_that_breaks_its_contract_fails_the_return_as_serialization(front, how):
    with victim_beside(front):
        result = front.execute(call(BROKEN_ENCODER, "patch", how))
    assert result.status == "FAILED"
    assert result.error["kind"] == "serialization"
    assert result.error["instruction_op"] == "return"
    assert_serves(front)


@pytest.mark.parametrize("shape", ["breaks_out", "unterminated"])
def test_text_that_would_break_the_response_is_an_engine_error(front, shape):
    with victim_beside(front):
        with pytest.raises(EngineError, match="broke the channel protocol"):
            front.execute(patched(shape))
    assert_serves(front)


# -- what clients make the front hold ----------------------------------------------------------


SLOW_LENGTH = r'''
import time

def slow_length(data, seconds):
    time.sleep(seconds)
    return len(data)
'''


def length_of(*blobs: bytes, seconds: float = 0) -> Program:
    program = Program()
    module = program.upload(id="m", kind="module", source=SLOW_LENGTH)
    fn = program.get_function(id="f", module=module, name="slow_length")
    for i, blob in enumerate(blobs):
        data = program.upload(id=f"b{i}", kind="bytes", value=blob)
        program.return_(key=f"len{i}", value=program.run(id=f"r{i}", fn=fn, args=[data, seconds]))
    return program


def test_small_requests_naming_a_large_cached_blob_are_held_to_the_budget(start_server):
    server = start_server("--num-workers", "6", "--max-inflight-bytes", str(300 * MiB),
                          "--max-request-bytes", str(200 * MiB))
    large = os.urandom(100 * MiB)
    # Uploaded with another blob: both in one memfd, so a program naming the large one
    # alone needs a copy of its own (it must not see the other).
    assert server.execute(length_of(large, b"another"), read_timeout_s=120).raise_for_error()["len0"] == len(large)
    outcomes: list[object] = []

    def name_it() -> None:
        try:  # the request carries no blob: the server has it
            outcomes.append(server.execute(length_of(large, seconds=3), read_timeout_s=120).raise_for_error()["len0"])
        except ServerBusy as error:
            outcomes.append(error)

    most_held = 0.0
    with victim_beside(server, seconds=4):
        threads = [threading.Thread(target=name_it) for _ in range(6)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            most_held = max(most_held, server.metric("kcoral_inflight_bytes"))
            time.sleep(0.05)
    busy = [outcome for outcome in outcomes if isinstance(outcome, ServerBusy)]
    assert busy, outcomes  # six copies of 100 MiB do not fit 300 MiB
    assert all("bytes of cached blobs" in str(error) for error in busy)
    assert len(large) in outcomes
    assert most_held <= 300 * MiB
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 0, 10)


COUNT = r'''
import time

def count(*args):
    return len(args)

def wait(seconds):
    time.sleep(seconds)
'''


def current_rss(server: Server) -> int:
    """The front's resident size now, in bytes (VmRSS)."""
    with open(f"/proc/{server.process.pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def peak_rss(server: Server) -> int:
    """The front's peak resident size so far, in bytes (VmHWM)."""
    with open(f"/proc/{server.process.pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def test_a_program_whose_parse_would_pass_the_budget_is_refused_before_it_is_parsed(start_server):
    """A run's arguments cost the front dozens of bytes each to parse and to keep (4 million
    zeros, 8 MB of text: 280 MB at the parse's peak, 170 MB kept while the program waits),
    and none of it was in its in-flight budget: three of them at once took the front 1 GB
    past its 256 MiB. Now what parsing may take is held with the body before the parse
    starts, and a request that can never fit the budget is refused as too large."""
    server = start_server("--num-workers", "2", "--max-inflight-bytes", str(256 * MiB),
                          "--max-request-bytes", str(64 * MiB))
    before = peak_rss(server)
    program = call(COUNT, "count", *([0] * 4_000_000))
    outcomes: list[object] = []

    def send() -> None:
        try:
            outcomes.append(server.execute(program, read_timeout_s=120).raise_for_error()["out"])
        except RequestTooLarge as error:
            outcomes.append(error)

    with victim_beside(server):
        threads = [threading.Thread(target=send) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert all(isinstance(outcome, RequestTooLarge) for outcome in outcomes), outcomes
    assert all("literal arguments" in str(outcome) for outcome in outcomes)
    assert peak_rss(server) - before < 100 * MiB
    assert server.execute(call(COUNT, "count", *([0] * 100_000))).raise_for_error()["out"] == 100_000
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 0, 10)


def test_a_request_as_large_as_the_budget_still_passes_with_a_small_program(start_server):
    """What parsing takes beside the program's own parse (the parts' records, the parser's
    buffers) is held only as far as the budget goes: a body of --max-request-bytes passes a
    budget of that size."""
    server = start_server("--num-workers", "1", "--max-inflight-bytes", str(64 * MiB),
                          "--max-request-bytes", str(64 * MiB))
    data = os.urandom(64 * MiB - 4096)
    assert server.execute(length_of(data), read_timeout_s=120).raise_for_error()["len0"] == len(data)
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 0, 10)


def test_what_a_waiting_program_keeps_is_held_in_the_budget(start_server):
    """500,000 arguments are 1 MB of text and 20 MB of the front's memory while their
    program waits for a worker: held in the budget as long as they are kept."""
    server = start_server("--num-workers", "1")
    busy = threading.Thread(target=lambda: server.execute(call(COUNT, "wait", 4), read_timeout_s=60))
    busy.start()
    assert wait_until(lambda: server.metric("kcoral_workers_busy") == 1, 30)
    program = call(COUNT, "count", *([0] * 500_000))
    _, body = program.to_request()
    results: list[int] = []
    waiting = threading.Thread(target=lambda: results.append(
        server.execute(program, read_timeout_s=60).raise_for_error()["out"]))
    waiting.start()
    assert wait_until(lambda: server.metric("kcoral_queue_depth") == 1, 30)
    held = server.metric("kcoral_inflight_bytes")
    busy.join()
    waiting.join()
    assert results == [500_000]
    assert held >= len(body) + 500_000 * 32, held


LARGE_ANSWER = r'''
def large(n):
    return bytes(n)
'''


LARGE_TEXT = r'''
def text(n):
    return "a" * n
'''


def test_a_large_returned_text_is_held_once_while_it_is_answered(start_server):
    """A 96 MB string returned took the front four times its size: the worker's frame, the
    JSON parser's two buffers of the values it unescaped, the answer's copy of them. Now the
    values follow the result's object in the frame as they are, and become the answer's
    text without a copy."""
    server = start_server("--num-workers", "1")
    before = peak_rss(server)
    result = server.execute(call(LARGE_TEXT, "text", 96_000_000), read_timeout_s=120)
    assert len(result.raise_for_error()["out"]) == 96_000_000
    grown = peak_rss(server) - before
    assert grown < 1.5 * 96_000_000, grown


def send_unread(server: Server, program: Program) -> socket.socket:
    """Sends `program` on a connection that will take almost nothing of its answer."""
    content_type, body = program.to_request()
    sock = socket.create_connection((server.host, server.port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(f"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def test_answers_arriving_from_workers_are_held_to_the_budget(start_server):
    """A worker's answer was counted in the in-flight budget only once the front wrote it,
    never refused: answers arriving from several workers at once took the front past its
    budget by their whole size (a returned value may be --max-response-bytes each). Now an
    answer is held from the worker's frame's arrival, before a byte of it is read, and one
    that does not fit is answered busy, with the rest of the server untouched."""
    limit = 96 * MiB
    server = start_server("--num-workers", "2", "--max-inflight-bytes", str(limit),
                          "--max-request-bytes", str(16 * MiB), "--max-response-bytes", str(64 * MiB),
                          "--body-rate-window-seconds", "60")
    unread = send_unread(server, call(LARGE_TEXT, "text", 60_000_000))
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") >= 60_000_000, 60)
    with pytest.raises(ServerBusy, match="did not fit in what the server holds in flight"):
        server.execute(call(LARGE_TEXT, "text", 60_000_000), read_timeout_s=60)
    assert server.metric("kcoral_inflight_bytes") <= limit
    assert server.metric('kcoral_guard_events_total{event="answer_refused"}') == 1
    unread.close()
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 0, 30)
    assert len(server.execute(call(LARGE_TEXT, "text", 60_000_000), read_timeout_s=60)
               .raise_for_error()["out"]) == 60_000_000


SHOUT = r'''
import sys

def shout(n):
    sys.stdout.write("a" * n)
    sys.stdout.flush()
    raise ValueError("x" * n)
'''


def test_a_large_output_and_error_are_held_in_the_budget_and_copied_once(start_server):
    """32 MiB of output took the front five times its size as the answer was made (the
    frame, the JSON parser's buffers, the answer's own copy of the text, its JSON), and the
    budget counted it once; an exception's 32 MB message came back whole, costing as much.
    Now the output follows the values in the worker's frame, unescaped, and moves into the
    JSON that writes it: three times its size at the peak, all of it held in the budget
    from the frame's arrival; and an error's message is cut to 64 KiB where it is made (and
    again in the front)."""
    server = start_server("--num-workers", "1", "--max-output-limit-bytes", str(64 * MiB))
    before = peak_rss(server)
    result = server.execute(call(SHOUT, "shout", 32 * MiB), read_timeout_s=120, output_limit_bytes=32 * MiB)
    assert len(result.stdout) == 32 * MiB
    assert result.error is not None and len(result.error["message"]) < 65 * 1024
    cut = len("ValueError: ") + 32 * MiB - 65536
    assert result.error["message"].endswith(f"... ({cut} more bytes cut)"), result.error["message"][-80:]
    grown = peak_rss(server) - before
    assert grown < 3.6 * 32 * MiB, grown  # it was 6.1 times


def test_a_client_that_never_reads_its_answer_is_cut_off_within_seconds(start_server):
    server = start_server("--num-workers", "2", "--min-body-bytes-per-second", str(1 * MiB),
                          "--body-rate-window-seconds", "1")
    sock = send_unread(server, call(LARGE_ANSWER, "large", 64 * MiB))
    with victim_beside(server):
        # The answer is written, then stalls: the reader takes nothing.
        assert wait_until(lambda: server.metric('kcoral_guard_events_total{event="slow_reader"}') == 1, 30)
    assert wait_until(lambda: server.metric("kcoral_inflight_bytes") == 0, 5)
    sock.close()
    assert_serves(server)


def read_to_end(sock: socket.socket) -> bytes:
    """What the server sends until it closes (a reset after its refusal included)."""
    answer = bytearray()
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            answer += chunk
    return bytes(answer)


# -- what a header may say ---------------------------------------------------------------------


@pytest.mark.parametrize("folded", [
    b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n 10\r\n\r\n0123456789",  # Beast would read 10
    b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n 0\r\n\r\n0123456789",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Note: one\r\n\ttwo\r\n\r\n",
])
def test_a_folded_header_is_refused(front, folded):
    with socket.create_connection((front.host, front.port), timeout=10) as sock:
        sock.sendall(folded)
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"obs-fold" in answer
    assert front.get("/health").status_code == 200


def test_a_header_of_thousands_of_fields_is_refused_and_holds_nothing(front):
    """Beast keeps a node of about 84 bytes per field: 300 connections each sending 64 KiB
    of `a:b` fields, then waiting, held 270 MB of the front (outside every budget) and took
    an I/O thread's CPU to parse. Now more than 128 fields are refused before parsing."""
    head = b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n" + b"a:b\r\n" * 10900 + b"\r\n"
    before = current_rss(front)
    sockets = []
    try:
        for _ in range(300):
            sock = socket.create_connection((front.host, front.port), timeout=30)
            sock.sendall(head)
            sockets.append(sock)
        grown = current_rss(front) - before
        for sock in sockets:
            answer = read_to_end(sock)
            assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
            assert b"more than 128 fields" in answer
    finally:
        for sock in sockets:
            sock.close()
    assert grown < 60 * MiB, grown
    with socket.create_connection((front.host, front.port), timeout=10) as sock:  # a dozen fields pass
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"X-A: b\r\n" * 120 +
                     b"\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")


CHUNKED_HEAD = (b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=zz\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")


@pytest.mark.parametrize(("start", "filler"), [
    (b"10;a=", b"b"),                            # a chunk extension without end
    (b"5\r\n--zz\r\r\n0\r\nX-Trailer: ", b"b"),  # a trailer field without end
    (b"", b"0"),                                 # a chunk size of endless leading zeros
], ids=["extension", "trailer", "zeros"])
def test_a_chunk_size_line_or_trailer_without_end_is_refused_at_the_header_limit(front, start, filler):
    """The parser keeps such a line buffered until it ends; the front used to buffer it
    without bound (a gigabyte from one connection, outside every budget). Now it is held to
    the header's 64 KiB: 8 MiB of it get 400."""
    with socket.create_connection((front.host, front.port), timeout=30) as sock:
        sock.sendall(CHUNKED_HEAD + start)
        with contextlib.suppress(OSError):  # refused while sending: the answer waits below
            for _ in range(128):
                sock.sendall(filler * (64 << 10))
        sock.shutdown(socket.SHUT_WR)
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert b"longer than 65536 bytes" in answer
    assert front.get("/health").status_code == 200


@pytest.mark.parametrize("fields", [128, 129, 1000])
def test_a_trailer_of_more_than_128_fields_is_refused(front, fields):
    """A chunked body's trailer fields join the request's, a node of about 84 bytes each:
    bounded as the header's are."""
    content_type, body = call(COUNT, "count", 1, 2).to_request()
    request = (f"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
               f"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{len(body):x}\r\n").encode()
    request += body + b"\r\n0\r\n" + b"".join(b"T%d: v\r\n" % i for i in range(fields)) + b"\r\n"
    with socket.create_connection((front.host, front.port), timeout=30) as sock:
        sock.sendall(request)
        answer = read_to_end(sock)
    if fields <= 128:
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    else:
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
        assert b"the trailer has more than 128 fields" in answer


# -- who may hold the connections ----------------------------------------------------------------


def open_idle(server: Server, source: str) -> socket.socket | None:
    """A connection from `source` (an address of 127/8) kept alive with GET /health; None
    when the server closed it at once."""
    sock = socket.socket()
    sock.settimeout(5)
    sock.bind((source, 0))
    sock.connect((server.host, server.port))
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        if not sock.recv(65536):
            sock.close()
            return None
    except OSError:
        sock.close()
        return None
    return sock


def test_connections_without_a_token_cannot_lock_out_those_with_one(start_server, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("the-token\n")
    tokens.chmod(0o600)
    server = start_server("--num-workers", "2", "--token-file", str(tokens), "--max-connections", "200",
                          "--max-anonymous-connections", "40", "--max-anonymous-per-address", "8",
                          "--anonymous-idle-timeout-seconds", "3")
    # A connection that has shown the token, kept alive through the flood below.
    kept = socket.create_connection((server.host, server.port), timeout=10)
    kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer the-token\r\n\r\n")
    assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")

    with victim_beside(server, seconds=6, token="the-token"):
        # One address: past 8 connections, the rest are closed at once.
        from_one = [open_idle(server, "127.0.0.2") for _ in range(30)]
        assert sum(sock is not None for sock in from_one) <= 8
        # Many addresses: 30 x 8 anonymous connections churn a pool of 40.
        flood = [open_idle(server, f"127.0.1.{i}") for i in range(1, 31) for _ in range(8)]
        # A token holder still connects and runs its program.
        assert_serves(server, token="the-token")
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer the-token\r\n\r\n")
        assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")
    evicted = 'kcoral_guard_events_total{event="anonymous_evicted"}'
    per_address = 'kcoral_guard_events_total{event="anonymous_per_address"}'
    with server.http() as http:
        metrics = http.get("/metrics", headers={"Authorization": "Bearer the-token"}).text
    counts = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("kcoral_guard")}
    assert counts[per_address] >= 22
    assert counts[evicted] >= 150
    # Idle anonymous connections are closed within seconds; the one with a token is not.
    survivors = [sock for sock in from_one + flood if sock is not None]
    time.sleep(4)
    for sock in survivors:
        sock.settimeout(0.5)
        try:
            assert sock.recv(65536) == b""
        except ConnectionResetError:
            pass
        sock.close()
    kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer the-token\r\n\r\n")
    assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")
    kept.close()
