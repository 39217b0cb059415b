"""Writes the fuzz targets' seed corpora, one folder per target, from the test suite.

The seeds are made at test time rather than kept in the repository, so that they follow
the tests they come from:

- requests (``multipart_fuzzer``, ``execute_request_fuzzer``): every malformed request of
  ``test/python/corpus/cases.py`` and its valid one, and the requests that the programs of
  ``examples/`` encode to (when the ``kcoral`` package is importable), each as
  ``<Content-Type>\\n<body>`` (``fuzz/request_input.hpp``);
- programs (``program_fuzzer``): the ``program`` part of each of those requests, and the
  programs and instructions written out in ``test/libkcoral/*_test.cpp``;
- channel frames (``wire_decode_fuzzer``): the frames written out in
  ``test/kcoral-server/*/*_test.cpp`` and one of each message type, each as a byte (the
  descriptors the message declares) followed by the frame's text;
- ``returned_values_fuzzer``: the returned values of those frames and a few more, each
  after a byte (its number of result parts);
- ``large_values_fuzzer``, ``large_frame_fuzzer``: recipes of large texts
  (``fuzz/large_text.hpp``): nesting a million deep, megabyte numbers and strings, floods;
- ``response_codec_fuzzer``: a few fixed pseudo-random inputs (FuzzedDataProvider gives
  them their structure).

Usage: python fuzz/make_seeds.py [--out fuzz/corpus]
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import random
import re
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MAX_SEED_BYTES = 16 * 1024  # larger inputs would raise libFuzzer's -max_len for every run
DIGEST = hashlib.sha256(b"seed").hexdigest()
RAW_STRING = re.compile(r'R"\((.*?)\)"', re.S)


def request_seed(content_type: str, body: bytes) -> bytes:
    return content_type.encode() + b"\n" + body


def program_part(content_type: str, body: bytes) -> bytes | None:
    """The data of the part named ``program``, found by its header (good enough for seeds)."""
    match = re.search(r"boundary=([^;\s]+)", content_type)
    start = body.find(b'name="program"')
    if not match or start < 0:
        return None
    data_start = body.find(b"\r\n\r\n", start)
    data_end = body.find(b"\r\n--" + match.group(1).strip('"').encode(), data_start)
    if data_start < 0 or data_end < 0:
        return None
    return body[data_start + 4:data_end]


def corpus_requests() -> dict[str, tuple[str, bytes]]:
    sys.path.insert(0, str(ROOT / "test" / "python"))
    from corpus.cases import CASES, valid_body  # type: ignore[import-not-found]

    requests = {"valid": valid_body()}
    for case in CASES:
        if case.method == "POST" and case.path == "/execute":
            requests[case.name] = (case.content_type or "", case.body)
    return requests


def annotation_name(annotation: Any) -> str:
    """``Program`` for both the class and the text (under ``from __future__ import annotations``)."""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")


def example_requests() -> dict[str, tuple[str, bytes]]:
    """The requests of the examples' ``-> Program`` functions, called with stand-in arguments."""
    try:
        from kcoral import Program  # noqa: F401  (the examples import it)
    except ImportError:
        print("make_seeds: kcoral is not importable; no seeds from examples/", file=sys.stderr)
        return {}
    stand_ins: dict[str, Any] = {"str": "sm_90", "int": 256, "bytes": b"\x7fELF\x02\x01\x01" + bytes(57)}
    sys.path.insert(0, str(ROOT / "examples"))
    requests = {}
    for path in sorted((ROOT / "examples").glob("*.py")):
        module = __import__(path.stem)
        for name, function in inspect.getmembers(module, inspect.isfunction):
            signature = inspect.signature(function)
            if function.__module__ != path.stem or annotation_name(signature.return_annotation) != "Program":
                continue
            try:
                args = [stand_ins[annotation_name(p.annotation)] for p in signature.parameters.values()]
                requests[f"{path.stem}.{name}"] = function(*args).to_request()
            except Exception as error:  # an example that needs more than stand-ins
                print(f"make_seeds: skipped {path.stem}.{name}: {error!r}", file=sys.stderr)
    return requests


def test_programs() -> dict[str, bytes]:
    """Programs and instructions written out as raw strings in the libkcoral tests."""
    programs = {}
    for path in sorted((ROOT / "test" / "libkcoral").glob("*_test.cpp")):
        for index, text in enumerate(RAW_STRING.findall(path.read_text())):
            text = text.replace("$A", DIGEST).replace("$B", DIGEST)
            if text.startswith('{"instructions"'):
                programs[f"{path.stem}.{index}"] = text.encode()
            elif '"op"' in text:
                programs[f"{path.stem}.{index}"] = ('{"instructions":[' + text.strip(",") + "]}").encode()
    return programs


def descriptors_of(frame: str) -> int:
    """The descriptors a frame's message declares (messages.cpp, descriptor_count)."""
    try:
        message = json.loads(frame)
    except ValueError:
        return 0
    if not isinstance(message, dict):
        return 0
    kind = message.get("type")
    if kind == "run":
        return 1
    if kind == "blobs" and isinstance(message.get("file_count"), int):
        return min(max(message["file_count"], 0), 255)
    if kind == "blobs" and isinstance(message.get("digests"), list):  # one memfd per blob
        return min(len(message["digests"]), 255)
    if kind == "forked":
        return 1
    if kind == "result" and isinstance(message.get("part_sizes"), list):
        # One memfd when any part is not named as one of the program's blobs (part_blobs).
        names = message["part_blobs"] if isinstance(message.get("part_blobs"), list) else []
        return int(any(i >= len(names) or not names[i] for i in range(len(message["part_sizes"]))))
    return 0


ONE_OF_EACH = [
    {"type": "fork", "visible_devices": "GPU-0f0e", "cuda_connections": 1, "refuse_multi_stream": True},
    {"type": "zygote_ready", "versions": {"python": "3.11.2", "numpy": "1.26.4"}, "fork_parents": [4243]},
    {"type": "forked", "pid": 4242},
    {"type": "exited", "pid": 4242, "exit_code": 0},
    {"type": "zygote_failed", "message": "no interpreter"},
    {"type": "fork_failed", "message": "socketpair: Too many open files"},
    {"type": "blobs", "digests": [DIGEST, DIGEST[::-1]]},
    {"type": "blobs", "digests": [DIGEST, DIGEST[::-1]], "files": [0, 0], "offsets": [0, 4096],
     "sizes": [3, 0], "file_count": 1},
    {"type": "run", "request_id": "r1", "output_limit_bytes": 1024, "max_returned_bytes": 1 << 20},
    {"type": "lease_granted"},
    {"type": "ready"},
    {"type": "progress", "index": 2},
    {"type": "lease", "acquire": True},
    {"type": "init_lease", "acquire": False},
    {"type": "gpu_access"},
    {"type": "failed", "message": "cannot prepare"},
    {"type": "result", "continues": True, "results": '{"out":{"type":"integer","value":1}}',
     "stdout": "out", "stdout_truncated": False, "stderr": "", "stderr_truncated": True,
     "elapsed_ms": 12.5, "part_sizes": [3, 0], "retired": "", "multi_stream": False,
     "part_blobs": ["", DIGEST]},
    {"type": "result", "continues": False, "results": "{}", "stdout": "", "stdout_truncated": False,
     "stderr": "Traceback", "stderr_truncated": False, "elapsed_ms": 0.25, "part_sizes": [],
     "error": {"kind": "gpu_access", "message": "m", "index": 1, "op": "run", "traceback": "tb",
               "id": "x", "cuda_call": "cuMemAlloc", "location": "k.py:3"},
     "retired": "threads: 3 after the program, 2 before", "multi_stream": True, "part_blobs": []},
]


def frame_text(message: dict) -> str:
    """A message's frame: its object, then a result's values after a newline, then its
    stdout and stderr (their sizes in the object)."""
    if "results" not in message:
        return json.dumps(message, separators=(",", ":"))
    fields = {key: value for key, value in message.items() if key not in ("results", "stdout", "stderr")}
    fields.update(stdout_bytes=len(message["stdout"].encode()), stderr_bytes=len(message["stderr"].encode()))
    return (json.dumps(fields, separators=(",", ":")) + "\n" + message["results"] + message["stdout"]
            + message["stderr"])


def frames() -> dict[str, bytes]:
    texts = {f"type.{m['type']}.{i}": frame_text(m) for i, m in enumerate(ONE_OF_EACH)}
    for path in sorted((ROOT / "test" / "kcoral-server").glob("*/*_test.cpp")):
        for index, text in enumerate(RAW_STRING.findall(path.read_text())):
            if '"type"' in text:
                texts[f"{path.stem}.{index}"] = text
    return {name: bytes([descriptors_of(text)]) + text.encode() for name, text in texts.items()}


def returned_values() -> dict[str, bytes]:
    """Returned values as workers send them: those of the channel frames written out in the
    C++ tests, and a few more, each after a byte giving its number of result parts."""
    texts = [message["results"] for message in ONE_OF_EACH if "results" in message]
    for frame in frames().values():
        _, newline, results = frame[1:].decode(errors="replace").partition("\n")
        if newline:
            texts.append(results)
    texts += ['{"out":{"type":"integer","value":1' + "0" * 400 + "}}",
              '{"b":{"type":"bytes","part":"return:0","sha256":"' + DIGEST + '"}}',
              '{"a":{"type":"array","value":[{"type":"number","value":1e300},{"type":"null"}]}}']
    seeds = {}
    for index, text in enumerate(texts):
        parts = text.count('"part"')
        seeds[f"results.{index}"] = bytes([parts]) + text.encode()
    return seeds


# The pieces of fuzz/large_text.hpp, by their index there.
PIECES = ["[", "]", '{"k":', "}", "7", "0", '"', "x", r"\u00e9", r"\ud83d\ude00", ",1", ",", ":", " ", "-",
          ".", "e", "\n", '{"type":"array","value":[', "]}", '"part":"return:0"', '{"type":"bytes","part":"return:',
          '"}', "true", "null", "\\"]


HUGE = 1 << 20  # the times of a huge step
HUGE_ONE_IN = 256  # huge steps count in inputs whose FNV-1a hash is a multiple of this


def fnv1a(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def recipe(*steps: tuple[str, int]) -> bytes:
    """The input of large_text.hpp that writes each piece the number of times given:
    huge steps of 2^20, then ordinary steps of up to 4095. A recipe with huge steps ends
    with steps that write nothing (the piece "x" zero times) chosen so that its hash lets
    them count."""
    out = bytearray()
    for piece, times in steps:
        what = PIECES.index(piece)
        while times >= HUGE:
            out += bytes([0xFF, 0xFF, what])
            times -= HUGE
        while times > 0:
            count = min(times, 0xFFF)
            out += bytes([what | 0xE0, count & 0xFF, count >> 8])
            times -= count
    if bytes([0xFF, 0xFF]) not in out:
        return bytes(out)
    nothing = [bytes([PIECES.index("x") | high << 5, 0, third]) for high in range(7) for third in range(256)]
    for first in [b""] + nothing:
        for second in nothing:
            if fnv1a(out + first + second) % HUGE_ONE_IN == 0:
                return bytes(out + first + second)
    raise AssertionError("no padding found")


def large_recipes() -> dict[str, bytes]:
    """The shapes of large inputs: nesting a million deep, megabyte numbers and strings,
    floods of values, each as large_values_fuzzer and large_frame_fuzzer read them; and the
    same shapes a thousand times smaller, so that the corpus starts with inputs that are
    cheap to mutate as well as with megabytes."""
    def shapes(million: int) -> dict[str, bytes]:
        open_k, close = ('{"k":', 1), ("}", 1)
        return {
            "deep-arrays": recipe(open_k, ("[", million), ("]", million), close),
            "deep-typed-tree": recipe(open_k, ('{"type":"array","value":[', million), close),
            "deep-unclosed": recipe(('{"k":', million)),
            "megabyte-integer": recipe(open_k, ("-", 1), ("7", million), close),
            "megabyte-fraction": recipe(open_k, ("0", 1), (".", 1), ("7", million), ("e", 1), ("-", 1), ("7", million),
                                        close),
            "long-string": recipe(open_k, ('"', 1), ("x", million), ('"', 1), close),
            "escapes": recipe(open_k, ('"', 1), (r"\u00e9", million), ('"', 1), close),
            "surrogates": recipe(open_k, ('"', 1), (r"\ud83d\ude00", million), ('"', 1), close),
            "flood": recipe(open_k, ("[", 1), ("0", 1), (",1", million), ("]", 1), close),
            "parts": recipe(open_k, ("[", 1), ('{"type":"bytes","part":"return:', 1), ("0", 1), ('"}', 1), ("]", 1),
                            close),
        }
    return shapes(HUGE) | {f"{name}.small": data for name, data in shapes(1000).items()}


def write(folder: Path, seeds: dict[str, bytes]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in seeds.items():
        if len(data) <= MAX_SEED_BYTES:
            (folder / re.sub(r"[^\w.-]", "_", name)).write_bytes(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "fuzz" / "corpus", help="where the folders go")
    out = parser.parse_args().out

    requests = corpus_requests() | example_requests()
    request_seeds = {name: request_seed(*request) for name, request in requests.items()}
    programs = {name: part for name, request in requests.items() if (part := program_part(*request)) is not None}
    generator = random.Random(20261203)
    write(out / "multipart_fuzzer", request_seeds)
    write(out / "execute_request_fuzzer", request_seeds)
    write(out / "program_fuzzer", programs | test_programs())
    write(out / "wire_decode_fuzzer", frames())
    write(out / "returned_values_fuzzer", returned_values())
    write(out / "large_values_fuzzer", {name: bytes([1 if name.startswith("parts") else 0]) + data
                                        for name, data in large_recipes().items()})
    write(out / "large_frame_fuzzer", {f"{name}.{where}": bytes([where]) + data
                                       for name, data in large_recipes().items() for where in range(4)})
    write(out / "response_codec_fuzzer",
          {f"random.{i}": generator.randbytes(64 << (i % 7)) for i in range(16)})
    counts = {folder.name: len(list(folder.iterdir())) for folder in sorted(out.iterdir()) if folder.is_dir()}
    print("make_seeds: " + ", ".join(f"{name} {count}" for name, count in counts.items()))


if __name__ == "__main__":
    main()
