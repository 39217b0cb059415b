"""Remote functions (``Client.function``) against the real server.

Values of each kind in and out, keyword arguments, stdout, failures with their remote
traceback, timeouts, the prelude, the refusals, and the module blob that the server's
cache keeps, so that a second call does not send it again (seen through a forwarding
proxy that records every request, and in the server's own cache-miss counter).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest

import kcoral
from kcoral import CorrectnessFailed, ExecutionTimeout, RuntimeFailed
from kcoral._codec import sha256_hex

from e2e.programs import split_multipart

README = Path(__file__).resolve().parents[3] / "README.md"


def line_of(marker: str) -> int:
    """The line of this file that ends with the comment ``# <marker>``."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.endswith(f"# {marker}"))


# -- values ----------------------------------------------------------------------------------


def test_plain_values_and_keywords(server):
    with server.client() as client:

        @client.function
        def describe(a, b, *rest, scale=1, **options):
            return {"sum": (a + b) * scale, "rest": rest, "options": options,
                    "types": [type(v).__name__ for v in (a, b, *rest)]}

        value = describe(2, 3.5, "s", None, [1, {"k": True}], scale=2, flag={"$ref": "x"})
    assert value == {"sum": 11.0, "rest": ["s", None, [1, {"k": True}]],
                     "options": {"flag": {"$ref": "x"}},
                     "types": ["int", "float", "str", "NoneType", "list"]}


def test_numpy_arrays_in_and_out(server):
    with server.client() as client:

        @client.function(timeout_seconds=60)
        def combine(a, b, *, weights):
            return {"sum": a + b, "weighted": (a * weights).sum(), "shape": list(weights.shape),
                    "kinds": [type(v).__name__ for v in (a, b, weights)]}

        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        weights = np.full((2, 3), 0.5, dtype=np.float64)
        value = combine(a, np.int64(1), weights=weights)
    np.testing.assert_array_equal(value["sum"], a + 1)
    assert value["sum"].dtype == np.float32 and value["sum"].shape == (2, 3)
    # A numpy scalar result comes back as a Python number.
    assert value["weighted"] == 7.5 and type(value["weighted"]) is float
    assert value["shape"] == [2, 3]
    # On this (CPU) server a tensor upload arrives as a numpy array; numpy scalars travel
    # as JSON numbers.
    assert value["kinds"] == ["ndarray", "int", "ndarray"]


def test_the_same_array_twice_is_uploaded_once(server):
    with server.client() as client:

        @client.function
        def same(x, y):
            return x is y

        values = np.arange(4, dtype=np.int32)
        program = same.program(values, y=values)
        assert [i["id"] for i in program.instructions if i["op"] == "upload"] == [
            "kcoral:loader", "kcoral:source", "args[0]"]
        assert same(values, y=values) is True


def test_bytes_in_and_out(server):
    with server.client() as client:

        @client.function
        def swap(data, more):
            return [type(data).__name__, data[::-1], bytes(more) + data]

        kind, reversed_data, joined = swap(b"\x00abc\xff", bytearray(b"xy"))
    assert (kind, reversed_data, joined) == ("bytes", b"\xffcba\x00", b"xy\x00abc\xff")


def test_stdout_and_stderr_are_captured(server):
    with server.client() as client:

        @client.function(output_limit_bytes=64)
        def chatty(n):
            import sys

            print("out:", n)
            print("err:", n, file=sys.stderr)
            return n

        result = chatty.call(7)
        assert (result.status, result["value"]) == ("COMPLETED", 7)
        assert (result.stdout, result.stderr) == ("out: 7\n", "err: 7\n")
        assert result.elapsed_ms > 0

        long = chatty.call("x" * 200)
        assert long.stdout_truncated and len(long.stdout.encode()) <= 64


def test_prelude_supplies_imports_helpers_and_constants(server):
    def clamp(value, low, high):
        return max(low, min(high, value))

    with server.client() as client:

        @client.function(prelude=["import math\nLIMIT = 10", clamp])
        def bounded_root(x):
            return clamp(math.sqrt(x), 0, LIMIT)

        assert (bounded_root(16), bounded_root(400)) == (4.0, 10)
        # The same function for other options (or another client) keeps its prelude.
        quick = client.function(timeout_seconds=30)(bounded_root)
        assert quick.source == bounded_root.source and quick(9) == 3.0


def test_cpu_only_runs_off_the_lease(server):
    with server.client() as client:

        @client.function(cpu_only=True)
        def host_work(n):
            return sum(range(n))

        program = host_work.program(10)
        assert [i.get("cpu_only") for i in program.instructions if i["op"] == "get_function"] == [
            True]
        result = host_work.call(10).raise_for_error()
    assert result["value"] == 45


# -- failures --------------------------------------------------------------------------------


def test_remote_exception_raises_with_the_remote_traceback(server):
    with server.client() as client:

        @client.function
        def fail(x):
            print("before the failure")
            raise ValueError(f"bad input {x}")  # remote raise

        with pytest.raises(RuntimeFailed) as raised:
            fail(3)
    error = raised.value
    assert error.kind == "runtime" and error.message == "ValueError: bad input 3"
    assert error.instruction_op == "run" and error.instruction_id == "fail"
    # The remote frame names this file and the line of the raise, with its text.
    assert f'File "{__file__}", line {line_of("remote raise")}, in fail' in error.traceback
    assert 'raise ValueError(f"bad input {x}")' in error.traceback
    assert error.traceback.rstrip().endswith("ValueError: bad input 3")
    if sys.version_info >= (3, 11):
        assert any("Remote traceback:" in note and "bad input 3" in note
                   for note in error.__notes__)
    assert error.result.stdout == "before the failure\n"
    assert error.__cause__ is None


def test_failed_assertion_is_correctness_and_call_returns_the_failure(server):
    with server.client() as client:

        @client.function
        def check(x):
            assert x > 0, f"{x} is not positive"
            return x

        with pytest.raises(CorrectnessFailed, match="AssertionError: -1 is not positive"):
            check(-1)
        result = check.call(-2)
    assert result.status == "FAILED" and result.error["kind"] == "correctness"
    assert "value" not in result.results


def test_a_missing_module_is_reported_from_the_call(server):
    with server.client() as client:

        @client.function
        def needs(x):
            import kcoral_no_such_module  # noqa: F401

            return x

        with pytest.raises(RuntimeFailed, match="ModuleNotFoundError"):
            needs(1)


@pytest.mark.slow
def test_a_call_past_its_timeout_raises_execution_timeout(server):
    with server.client() as client:

        @client.function(timeout_seconds=1)
        def sleepy():
            import time

            time.sleep(60)

        with pytest.raises(ExecutionTimeout) as raised:
            sleepy()
        assert raised.value.status_code == 504 and raised.value.kind == "timeout"
        with pytest.raises(ExecutionTimeout):
            sleepy.call()


# -- what cannot travel is refused before anything is sent ------------------------------------


def test_refusals_send_nothing(server):
    spy = Spy(server.url)
    try:
        with kcoral.Client(spy.url, read_timeout_seconds=60) as client:
            with pytest.raises(TypeError, match="lambda"):
                client.function(lambda x: x)

            offset = 1

            def closure(x):
                return x + offset

            with pytest.raises(ValueError, match="uses offset from the function enclosing"):
                client.function(closure)

            namespace: dict = {}
            exec("def generated(x):\n    return x\n", namespace)
            with pytest.raises(ValueError, match="source of generated is not available"):
                client.function(namespace["generated"])

            with pytest.raises(ValueError, match=r"np \(a module: put 'import numpy as np'"):
                client.function(uses_module_numpy)

            @client.function
            def takes_two(a, b):
                return a

            with pytest.raises(TypeError, match="takes_two\\(\\): missing a required argument"):
                takes_two(1)
            with pytest.raises(TypeError, match="travel only as arguments of their own"):
                takes_two([np.zeros(2)], 1)
        assert spy.exchanges == []
    finally:
        spy.close()


def uses_module_numpy(x):
    return np.asarray(x)


# -- the module blob is cached -----------------------------------------------------------------


def test_a_second_call_does_not_send_the_module_again(start_server):
    server = start_server("--num-workers", "1")
    spy = Spy(server.url)
    try:
        with kcoral.Client(spy.url, read_timeout_seconds=60) as client:

            # A large module (64 KiB of prelude), so that sending it again would show.
            @client.function(prelude=f"TABLE = {'0123456789abcdef' * 4096!r}")
            def checksum(data):
                return (int(data.astype("int64").sum()) + len(TABLE)) % 251

            digest = sha256_hex(checksum.source.encode())
            values = np.arange(100, dtype=np.uint8)
            expected = (sum(range(100)) + 16 * 4096) % 251
            assert checksum(values) == expected
            first = list(spy.exchanges)
            spy.exchanges.clear()
            assert checksum(values) == expected
            second = list(spy.exchanges)
    finally:
        spy.close()
    # First call: sent without blobs, told which are missing, sent again with them.
    assert [e.status for e in first] == ["CACHE_MISS", "COMPLETED"]
    assert first[0].blob_parts == set()
    assert f"blob:{digest}" in first[1].blob_parts
    assert len(first[1].body) > len(checksum.source)
    # Second call: one request, no blob parts, and much smaller than the module.
    assert [e.status for e in second] == ["COMPLETED"]
    assert second[0].blob_parts == set()
    assert len(second[0].body) < len(checksum.source) // 4
    assert b"0123456789abcdef" not in second[0].body
    assert server.metric('kcoral_execute_requests_total{outcome="cache_miss"}') == 1
    assert server.metric('kcoral_execute_requests_total{outcome="completed"}') == 2


# -- the README section -------------------------------------------------------------------------


def readme_examples() -> list[str]:
    text = README.read_text()
    start = text.index("### Remote functions")
    section = text[start:text.index("\n### ", start)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_section_has_examples():
    assert len(readme_examples()) == 2


@pytest.mark.parametrize("index", range(2))
def test_readme_example_runs_and_prints_what_it_says(server, tmp_path, index):
    source = readme_examples()[index].replace("http://localhost:8000", server.url)
    # Each `print(...)  # text` line of the example says what it prints.
    expected = [match.group(1) for match in
                re.finditer(r"^\s*print\(.*\)\s+# (.*)$", source, re.M)]
    assert expected
    path = tmp_path / f"readme_example_{index}.py"
    path.write_text(source)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == expected


# -- a recording proxy ---------------------------------------------------------------------------


class Exchange:
    """One POST /execute seen by the Spy: the request body and the answer's status."""

    def __init__(self, content_type: str, body: bytes, response: httpx.Response) -> None:
        self.body = body
        self.blob_parts = {name for name, _, _ in split_multipart(content_type, body)
                           if name.startswith("blob:")}
        document = (json.loads(response.content)
                    if response.headers["content-type"].startswith("application/json")
                    else json.loads(split_multipart(response.headers["content-type"],
                                                    response.content)[0][2]))
        self.status = document["status"]


class Spy:
    """A forwarding HTTP proxy in front of a server, recording every request it passes on."""

    def __init__(self, target: str) -> None:
        self.exchanges: list[Exchange] = []
        upstream = httpx.Client(base_url=target, timeout=httpx.Timeout(120))
        spy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {key: self.headers[key] for key in ("Content-Type", "X-Request-ID")
                           if self.headers.get(key)}
                response = upstream.post(self.path, content=body, headers=headers)
                spy.exchanges.append(Exchange(headers["Content-Type"], body, response))
                self.send_response(response.status_code)
                for key in ("content-type", "x-request-id", "retry-after"):
                    if key in response.headers:
                        self.send_header(key, response.headers[key])
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            def log_message(self, *args: object) -> None:
                pass

        self._upstream = upstream
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._upstream.close()
