"""The programs both KCoral implementations run in the compatibility suite, as data.

Each :class:`Case` builds one program through the user guide's builder API
(``Program().upload``, ``upload_file``, ``upload_folder``, ``get_function``, ``run``,
``return_``, ``return_file``, ``return_folder``), which our client and the reference
client (PyPI ``kcoral==0.1.1``) share. The builder class is passed in, so this module
imports neither client: the in-process suite hands it ours, and ``reference_driver.py``,
run by the reference venv's Python, hands it the reference's. Beside the program a case
holds what the suite expects of its outcome: ``expect`` for every client/server pair, a
:class:`Difference` where the servers answer differently (PROTOCOL.md says we differ on
purpose, or the reference breaks the protocol), and ``bugs`` where our side is wrong.

Keep this module importable by Python 3.10+ with only the standard library and numpy.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Context:
    """What a builder may vary by: a nonce unique to one client/server pair of one run
    (so blobs salted with it start cold in the server's cache) and a scratch directory
    for local folders to upload."""

    nonce: str
    scratch: Path


@dataclass(frozen=True)
class Difference:
    """An outcome that differs between the servers, and why.

    ``reason`` quotes the PROTOCOL.md sentence that makes us differ on purpose, or starts
    with "REFERENCE BUG:" where KCoral 0.1.1 breaks the protocol itself. ``masked`` names
    the fields of the normalized outcome left out of the equality check; ``ours`` and
    ``reference`` are what those fields must hold on each server (dotted paths, as in
    ``expect``).
    """

    reason: str
    masked: tuple[str, ...]
    ours: dict[str, Any]
    reference: dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One program, or one call of the Client that is not ``execute``.

    ``action``: ``execute`` (``executions`` times, with ``options``), ``health`` or
    ``target``. ``trace``: record every HTTP attempt of each execute (blob parts sent,
    status answered), for the cache negotiation. ``expect``: dotted paths into the
    normalized outcome and the value each must have, for every client/server pair; the
    paths a ``difference`` masks are taken from its ``ours``/``reference`` instead.
    ``ours_only``: why the reference builder cannot express the program. ``bugs``: the
    tests a bug of ours fails, each to its "BUG: ..." reason (an xfail, strict): keys
    ``builders``, ``reference_client_on_ours``, ``our_client_on_reference``,
    ``directions`` and ``expect:<client>:<server>``.
    """

    name: str
    build: Callable[[Any, Context], Any] | None = None
    action: str = "execute"
    options: dict[str, Any] = field(default_factory=dict)
    executions: int = 1
    trace: bool = False
    expect: dict[str, Any] = field(default_factory=dict)
    difference: Difference | None = None
    ours_only: str | None = None
    bugs: dict[str, str] = field(default_factory=dict)


TIMEOUT_SECONDS = 30

# -- uploaded Python ---------------------------------------------------------------------

VALUES = r'''
import math


def trivial():
    return 1


def scalars():
    return {
        "none": None, "true": True, "false": False, "zero": 0, "int": -42,
        "float": 1.5, "tiny": 5e-324, "huge": 1e300, "negzero": -0.0, "integral": 2.0,
        "string": "plain", "unicode": "h\u00e9 \u2603 \U0001f600", "escapes": "q\"b\\n\n\t\x01",
        "empty": "",
    }


def containers():
    return {
        "list": [1, "two", None, [3.0, [False]]], "tuple": (1, (2, 3)), "empty_list": [],
        "empty_dict": {}, "nested": {"a": {"b": {"c": [{"d": []}]}}},
        "deep": [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]],
        "keys": {"": 0, "$ref": "not a reference", "with space": 1, "\u00e9": 2},
    }


def big_ints():
    return [2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**100, -(10**40)]


def identity(*args):
    return list(args)


def kinds(*args):
    return [type(a).__name__ for a in args]


def blob_bytes(data):
    return {"type": type(data).__name__, "len": len(data), "data": data}


def binary_values():
    return [b"", b"\x00\xff" * 3, {"inner": bytearray(b"ba"), "view": memoryview(b"mv")}, "text"]


def make_adder(n):
    def add(x):
        return x + n
    return add


def not_callable():
    return 5


def nan():
    return math.nan


def infinity():
    return [1.0, -math.inf]


def opaque():
    return object()


def int_keys():
    return {1: "one"}


def set_value():
    return {1, 2}


def numpy_array():
    import numpy
    return numpy.arange(6, dtype=numpy.int16).reshape(2, 3)


def mixed_bad():
    return [b"dropped with its return", object()]


def subclass_values():
    import collections
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        pass

    class Ratio(float):
        pass

    Point = collections.namedtuple("Point", "x y")
    return [Level.HIGH, Name("n"), Ratio(0.5), Point(1, 2),
            collections.OrderedDict([("b", 1), ("a", 2)]), True]


def zero_dim():
    import numpy
    return numpy.array(2.5, dtype=numpy.float64)


def numpy_scalars():
    import numpy
    return [numpy.float32(1.5), numpy.int64(7), numpy.bool_(True)]


LIMIT = 5


def large(n):
    import hashlib
    data = bytes(i * 7 % 251 for i in range(n))
    return {"sha256": hashlib.sha256(data).hexdigest(), "data": data}


def digest(data):
    import hashlib
    return hashlib.sha256(data).hexdigest()


def fail(message):
    raise ValueError(message)


def fail_assert():
    assert 1 + 1 == 3, "arithmetic is broken"


def fail_custom():
    class KernelMismatch(Exception):
        pass
    raise KernelMismatch("out[3] = 7, want 8")


def fail_keyboard():
    raise KeyError("missing")


def exit_call():
    raise SystemExit(3)


def hard_exit():
    import os
    os._exit(3)


def sleep(seconds):
    import time
    time.sleep(seconds)
    return seconds
'''

FILES = r'''
import os


def read_input(path):
    with open(path, "rb") as f:
        data = f.read()
    os.makedirs("out/nested", exist_ok=True)
    with open("out/nested/result.txt", "wb") as f:
        f.write(data[::-1])
    with open("out/.hidden", "w") as f:
        f.write("hidden")
    return {"path": path, "size": len(data), "cwd_relative": os.path.exists(path)}


def decorate_tree(root):
    names = sorted(os.path.relpath(os.path.join(d, f), root)
                   for d, _, fs in os.walk(root) for f in fs)
    os.makedirs(os.path.join(root, "empty", "deeper"))
    with open(os.path.join(root, "made-here.txt"), "w") as f:
        f.write("\n".join(names))
    return names


def result_path():
    os.makedirs("generated", exist_ok=True)
    with open("generated/report.json", "w") as f:
        f.write('{"ok": true}')
    return "generated/report.json"


def make_symlink():
    os.makedirs("links", exist_ok=True)
    with open("links/target.txt", "w") as f:
        f.write("target")
    os.symlink("target.txt", "links/link.txt")
    return "links"


def empty_folder():
    os.makedirs("hollow/a/b")
    os.makedirs("hollow/c")
    return "hollow"
'''

OUTPUT = r'''
import os
import subprocess
import sys


def chatter():
    print("to stdout")
    print("to stderr", file=sys.stderr)
    # Flushed by hand: the reference worker's sys.stderr is block-buffered.
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(1, b"fd 1 \xc3\xa9\n")
    os.write(2, b"fd 2\n")
    subprocess.run(["sh", "-c", "echo child out; echo child err >&2"], check=True)
    return "done"


def flood(n):
    sys.stdout.write("o" * n)
    sys.stderr.write("e" * n)
    return n


def invalid_utf8():
    sys.stdout.flush()
    os.write(1, b"ok \xff\xfe end\n")
    return 0


def control_characters():
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(1, b"nul \x00 bell \x07 esc \x1b[0m\n")
    os.write(2, b"\x00 leading nul\n")
    return 0


def split_character():
    sys.stdout.flush()
    os.write(1, "ab\u00e9cd".encode())  # 'é' is bytes 2..3
    return 0


def top_level_print_then_fail():
    print("before the failure")
    raise RuntimeError("after printing")
'''

CUDA_SOURCE = "__global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }\n"


def _module(program: Any, source: str = VALUES, id: str | None = None) -> Any:
    return program.upload(kind="module", source=source, id=id)


def _call(program_class: Any, name: str, args: list[Any] | None = None,
          source: str = VALUES) -> Any:
    """upload module, get_function name, run, return as "r"."""
    program = program_class()
    function = program.get_function(module=_module(program, source), name=name)
    program.return_(key="r", value=program.run(fn=function, args=args or []))
    return program


# -- builders ----------------------------------------------------------------------------


BIG_INT_ARGS = [2**64 - 1, 2**64, -(2**63) - 1, 2**100, -(10**40), 10**400]
UNICODE_ID = "\u0444\u0443\u043d\u043a\u0446\u0438\u044f"  # "function" in Russian
UNICODE_KEY = "\u043a\u043b\u044e\u0447 \U0001f511"  # "key" and a key emoji
LARGE_UPLOAD = bytes(i * 7 % 251 for i in range(3 * 2**20 + 1))
LARGE_DIGEST = hashlib.sha256(LARGE_UPLOAD).hexdigest()
MADE_DIGEST = hashlib.sha256(bytes(i * 7 % 251 for i in range(2 * 2**20 + 3))).hexdigest()


def trivial(P: Any, ctx: Context) -> Any:
    return _call(P, "trivial")


def scalars(P: Any, ctx: Context) -> Any:
    return _call(P, "scalars")


def containers(P: Any, ctx: Context) -> Any:
    return _call(P, "containers")


def big_ints(P: Any, ctx: Context) -> Any:
    return _call(P, "big_ints")


def literal_args(P: Any, ctx: Context) -> Any:
    """JSON literals pass through run unchanged, a nested $ref-shaped object included."""
    args = [None, True, 0, -7, 2**63 - 1, -(2**63), 0.25, 1e-300, 1e300, -0.0, "s\u00e9", "",
            "\x00", [], {},
            [1, [2, {"k": [None]}]], {"$ref": "upload_0", "x": 1}, [{"$ref": "upload_0"}]]
    return _call(P, "identity", args)


def literal_kinds(P: Any, ctx: Context) -> Any:
    """The Python types the worker hands the function for each JSON literal."""
    return _call(P, "kinds", [None, True, 1, 2**63, 1.0, "s", [1], {"a": 1}])


def big_int_args(P: Any, ctx: Context) -> Any:
    """Integer literals beyond 64 bits: JSON has no limit, nor does Python."""
    return _call(P, "identity", BIG_INT_ARGS)


def multiple_returns(P: Any, ctx: Context) -> Any:
    program = P()
    module = _module(program, id="values")
    for name in ("trivial", "scalars", "big_ints"):
        value = program.run(id=f"run_{name}",
                            fn=program.get_function(id=f"fn_{name}", module=module, name=name))
        program.return_(key=name, value=value)
    program.return_(key="again", value=value)  # the same value returned twice
    return program


def bytes_upload(P: Any, ctx: Context) -> Any:
    program = P()
    data = program.upload(kind="bytes", value=bytes(range(256)))
    empty = program.upload(kind="bytes", value=b"")
    blob_bytes = program.get_function(module=_module(program), name="blob_bytes")
    program.return_(key="data", value=data)
    program.return_(key="empty", value=empty)
    program.return_(key="seen", value=program.run(fn=blob_bytes, args=[data]))
    return program


def binary_values(P: Any, ctx: Context) -> Any:
    """bytes-like values nested in containers: parts numbered depth-first."""
    program = P()
    first = program.upload(kind="bytes", value=b"first")
    values = program.run(fn=program.get_function(module=_module(program), name="binary_values"))
    program.return_(key="first", value=first)
    program.return_(key="values", value=values)
    return program


def subclass_values(P: Any, ctx: Context) -> Any:
    """Subclasses of the JSON types: IntEnum, str and float subclasses, a namedtuple."""
    return _call(P, "subclass_values")


def numpy_scalars(P: Any, ctx: Context) -> Any:
    return _call(P, "numpy_scalars")


def framing_bytes(P: Any, ctx: Context) -> Any:
    """Payloads that look like multipart framing, both ways."""
    nasty = b"--kcoral-\r\n--\r\nContent-Type: text/plain\r\n\r\n--\r\n" * 3
    program = P()
    data = program.upload(kind="bytes", value=nasty)
    program.return_(key="echo", value=data)
    program.return_(key="nested", value=program.run(
        fn=program.get_function(module=_module(program), name="identity"), args=[data, data]))
    return program


def large_bytes(P: Any, ctx: Context) -> Any:
    """A few MiB each way."""
    program = P()
    upload = program.upload(kind="bytes", value=LARGE_UPLOAD)
    module = _module(program)
    program.return_(key="digest", value=program.run(
        fn=program.get_function(module=module, name="digest"), args=[upload]))
    program.return_(key="made", value=program.run(
        fn=program.get_function(module=module, name="large"), args=[2 * 2**20 + 3]))
    return program


def get_function_non_callable(P: Any, ctx: Context) -> Any:
    """get_function of a module-level constant, then returned."""
    program = P()
    program.return_(key="limit", value=program.get_function(
        module=_module(program), name="LIMIT", id="limit"))
    return program


def get_function_on_bytes(P: Any, ctx: Context) -> Any:
    """get_function whose module is a bytes upload."""
    program = P()
    program.get_function(module=program.upload(kind="bytes", value=b"def f(): pass\n"),
                         name="f", id="lookup")
    return program


def tensor_dtypes(P: Any, ctx: Context) -> Any:
    """Raw-bytes tensor uploads of dtypes numpy lacks, and an empty shape."""
    program = P()
    for name, dtype, shape, raw in [
        ("bf16", "bfloat16", [2], b"\x80\x3f\x00\xc0"),  # 1.0, -2.0
        ("e4m3", "float8_e4m3fn", [2], b"\x38\xb8"),  # 1.0, -1.0
        ("flags", "bool", [3], b"\x01\x00\x01"),
        ("empty", "float16", [0, 3], b""),
    ]:
        program.return_(key=name, value=program.upload(
            kind="tensor", value=raw, dtype=dtype, shape=shape, id=name))
    return program


def tensor_zero_dim(P: Any, ctx: Context) -> Any:
    """A 0-d tensor: uploaded with shape [], and a 0-d numpy array made by the program."""
    program = P()
    program.return_(key="uploaded", value=program.upload(
        kind="tensor", value=(7).to_bytes(8, "little"), dtype="int64", shape=[], id="scalar"))
    program.return_(key="made", value=program.run(
        fn=program.get_function(module=_module(program), name="zero_dim")))
    return program


def unicode_names(P: Any, ctx: Context) -> Any:
    """Non-ASCII function names, instruction ids and return keys."""
    program = P()
    module = program.upload(kind="module", id="m\u00f3dulo",
                            source="def \u03c0():\n    return '\u03c0 \u2248 3.14'\n")
    function = program.get_function(module=module, name="\u03c0", id=UNICODE_ID)
    program.return_(key=UNICODE_KEY, value=program.run(fn=function, id="\u8dd1"))
    return program


def chained_callable(P: Any, ctx: Context) -> Any:
    """A run whose value is a function, run in turn."""
    program = P()
    make_adder = program.get_function(module=_module(program), name="make_adder")
    adder = program.run(fn=make_adder, args=[40])
    program.return_(key="r", value=program.run(fn=adder, args=[2]))
    return program


def fresh_namespaces(P: Any, ctx: Context) -> Any:
    """Two uploads of one source are two modules; globals do not leak between them."""
    source = "counter = []\n\ndef bump():\n    counter.append(1)\n    return len(counter)\n"
    program = P()
    first = program.get_function(module=_module(program, source), name="bump")
    second = program.get_function(module=_module(program, source), name="bump")
    program.run(fn=first)
    program.return_(key="first_again", value=program.run(fn=first))
    program.return_(key="second", value=program.run(fn=second))
    return program


def cpu_only_run(P: Any, ctx: Context) -> Any:
    program = P()
    function = program.get_function(module=_module(program), name="identity", cpu_only=True)
    program.return_(key="r", value=program.run(fn=function, args=[1, "x"]))
    return program


def no_returns(P: Any, ctx: Context) -> Any:
    program = P()
    program.run(fn=program.get_function(module=_module(program), name="trivial"))
    return program


def file_roundtrip(P: Any, ctx: Context) -> Any:
    program = P()
    path = program.upload_file(blob=b"\x00input bytes\xff", path="./data//in.bin")
    read_input = program.get_function(module=_module(program, FILES), name="read_input")
    program.return_(key="report", value=program.run(fn=read_input, args=[path]))
    program.return_(key="path", value=path)
    program.return_file(key="input", path=path)
    program.return_file(key="output", path="out/nested/result.txt")
    program.return_folder(key="out", path="out")
    return program


def returned_path_register(P: Any, ctx: Context) -> Any:
    """return_file with a path computed by the program and held in a register."""
    program = P()
    result_path = program.get_function(module=_module(program, FILES), name="result_path")
    program.return_file(key="report", path=program.run(fn=result_path))
    return program


def folder_roundtrip(P: Any, ctx: Context) -> Any:
    local = ctx.scratch / "folder_roundtrip"
    for relative, data in {
        "a.txt": b"alpha",
        "a-b/x.bin": bytes(range(10)),
        "a/b/c.txt": b"deep",
        ".hidden": b"dot",
        "empty.dat": b"",
        "\u00e9t\u00e9.txt": b"unicode name",
    }.items():
        target = local / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (local / "local-empty-dir").mkdir(exist_ok=True)  # not uploaded: no files in it
    program = P()
    program.upload_folder(local, path="tree")
    decorate = program.get_function(module=_module(program, FILES), name="decorate_tree")
    program.return_(key="names", value=program.run(fn=decorate, args=["tree"]))
    program.return_folder(key="tree", path="tree")
    program.return_folder(key="subtree", path="./tree/a")
    return program


def empty_folders(P: Any, ctx: Context) -> Any:
    program = P()
    make = program.get_function(module=_module(program, FILES), name="empty_folder")
    program.return_folder(key="hollow", path=program.run(fn=make))
    return program


def parse_syntax_error(P: Any, ctx: Context) -> Any:
    program = P()
    program.upload(kind="module", source="def broken(:\n    pass\n", id="bad")
    return program


def parse_top_level_error(P: Any, ctx: Context) -> Any:
    program = P()
    program.upload(kind="module", source="x = 1\nraise RuntimeError('at import')\n", id="bad")
    return program


def parse_missing_name(P: Any, ctx: Context) -> Any:
    program = P()
    program.get_function(module=_module(program), name="no_such_function", id="lookup")
    return program


def runtime_exception(P: Any, ctx: Context) -> Any:
    """An uncaught exception, after a return that must survive it."""
    program = P()
    module = _module(program)
    program.return_(key="before", value=program.run(
        fn=program.get_function(module=module, name="trivial")))
    program.run(id="failing", fn=program.get_function(module=module, name="fail"),
                args=["the message"])
    program.return_(key="after", value=program.run(
        fn=program.get_function(module=module, name="trivial")))
    return program


def runtime_custom_exception(P: Any, ctx: Context) -> Any:
    return _call(P, "fail_custom")


def runtime_key_error(P: Any, ctx: Context) -> Any:
    return _call(P, "fail_keyboard")


def correctness_assert(P: Any, ctx: Context) -> Any:
    program = P()
    module = _module(program)
    data = program.upload(kind="bytes", value=b"kept")
    program.return_(key="kept", value=data)
    program.run(id="check", fn=program.get_function(module=module, name="fail_assert"))
    return program


def system_exit(P: Any, ctx: Context) -> Any:
    return _call(P, "exit_call")


def worker_exit(P: Any, ctx: Context) -> Any:
    """The worker process ends in the middle of a run (os._exit), after a return."""
    program = P()
    module = _module(program)
    program.return_(key="before", value=program.run(
        fn=program.get_function(module=module, name="trivial")))
    program.run(id="exit", fn=program.get_function(module=module, name="hard_exit"))
    return program


def run_not_callable(P: Any, ctx: Context) -> Any:
    program = P()
    value = program.run(fn=program.get_function(module=_module(program), name="not_callable"))
    program.run(id="call_int", fn=value)
    return program


def serialization_nan(P: Any, ctx: Context) -> Any:
    return _call(P, "nan")


def serialization_infinity_nested(P: Any, ctx: Context) -> Any:
    return _call(P, "infinity")


def serialization_object(P: Any, ctx: Context) -> Any:
    return _call(P, "opaque")


def serialization_int_keys(P: Any, ctx: Context) -> Any:
    return _call(P, "int_keys")


def serialization_set(P: Any, ctx: Context) -> Any:
    return _call(P, "set_value")


def serialization_function(P: Any, ctx: Context) -> Any:
    """A function handle cannot be returned."""
    program = P()
    program.return_(key="fn", value=program.get_function(module=_module(program), name="nan"))
    return program


def serialization_keeps_parts_contiguous(P: Any, ctx: Context) -> Any:
    """A failing return that had encoded bytes adds no part; earlier binary returns stay."""
    program = P()
    data = program.upload(kind="bytes", value=b"part zero")
    program.return_(key="bin", value=data)
    module = _module(program)
    program.return_(key="pieces", value=program.run(
        fn=program.get_function(module=module, name="identity"), args=[data]))
    program.return_(key="bad_mix", value=program.run(
        fn=program.get_function(module=module, name="mixed_bad")))
    return program


def return_symlink(P: Any, ctx: Context) -> Any:
    program = P()
    make = program.get_function(module=_module(program, FILES), name="make_symlink")
    folder = program.run(fn=make)
    program.return_file(key="target", path="links/target.txt")
    program.return_folder(key="links", path=folder)
    return program


def return_missing_file(P: Any, ctx: Context) -> Any:
    program = P()
    program.return_file(key="missing", path="does/not/exist.txt")
    return program


def return_file_is_folder(P: Any, ctx: Context) -> Any:
    program = P()
    program.upload_file(blob=b"x", path="dir/file.txt")
    program.return_file(key="dir", path="dir")
    return program


def stdout_stderr(P: Any, ctx: Context) -> Any:
    return _call(P, "chatter", source=OUTPUT)


def output_truncated(P: Any, ctx: Context) -> Any:
    return _call(P, "flood", [100], source=OUTPUT)


def output_exactly_at_limit(P: Any, ctx: Context) -> Any:
    return _call(P, "flood", [16], source=OUTPUT)


def output_capture_off(P: Any, ctx: Context) -> Any:
    return _call(P, "flood", [100], source=OUTPUT)


def output_invalid_utf8(P: Any, ctx: Context) -> Any:
    return _call(P, "invalid_utf8", source=OUTPUT)


def output_control_characters(P: Any, ctx: Context) -> Any:
    return _call(P, "control_characters", source=OUTPUT)


def output_cut_inside_character(P: Any, ctx: Context) -> Any:
    return _call(P, "split_character", source=OUTPUT)


def output_kept_on_failure(P: Any, ctx: Context) -> Any:
    return _call(P, "top_level_print_then_fail", source=OUTPUT)


def cache_miss(P: Any, ctx: Context) -> Any:
    """Blobs salted with the nonce: the first execute misses, the second hits."""
    program = P()
    salt = ctx.nonce.encode()
    first = program.upload(kind="bytes", value=b"first blob " + salt)
    program.upload_file(blob=b"file blob " + salt, path="in/blob.txt")
    program.upload(kind="bytes", value=b"first blob " + salt, id="duplicate")  # same blob
    kinds = program.get_function(module=_module(program), name="kinds")
    program.return_(key="r", value=program.run(fn=kinds, args=[first, {"$ref": "duplicate"}]))
    return program


def numpy_return(P: Any, ctx: Context) -> Any:
    return _call(P, "numpy_array")


def tensor_upload(P: Any, ctx: Context) -> Any:
    import numpy

    program = P()
    tensor = program.upload(kind="tensor", value=numpy.arange(6, dtype=numpy.float32)
                            .reshape(2, 3))
    program.return_(key="t", value=tensor)
    return program


def library_upload(P: Any, ctx: Context) -> Any:
    program = P()
    program.upload(kind="library", value=b"\x7fELF not really a library", id="lib")
    return program


def cuda_module(P: Any, ctx: Context) -> Any:
    program = P()
    kernel = program.get_function(
        module=program.upload(kind="module", source=CUDA_SOURCE, language="cuda"),
        name="add_one")
    describe = program.get_function(
        module=_module(program, "def describe(k):\n    return [k.source, k.name]\n"),
        name="describe")
    program.return_(key="r", value=program.run(fn=describe, args=[kernel]))
    return program


def execution_timeout(P: Any, ctx: Context) -> Any:
    return _call(P, "sleep", [30])


# -- the cases ---------------------------------------------------------------------------

WORKER_EXITED = "worker exited while executing the instruction"
TENSOR_ON_CPU = (
    "becomes a torch tensor on the worker's GPU. On a CPU server KCoral answers "
    "`unavailable`; we may instead give a CPU tensor"
)
RUNTIME_KIND = (
    "An exception escaping uploaded code fails its instruction with kind `runtime` and the "
    'message `"<ExceptionType>: <message>"`; an `AssertionError` (a failed `assert`, '
    "`torch.testing.assert_close`) is kind `correctness`. (KCoral 0.1.x reports both as "
    "`engine`; its documentation promises `correctness`, and `engine` should mean a fault of "
    "the server, so we differ on purpose.)"
)


def _our_server_bug(reason: str) -> dict[str, str]:
    """The tests a bug of our server fails: the cross-server comparison and the
    expectations of both clients on our server."""
    return {"directions": reason, "expect:ours:ours": reason, "expect:reference:ours": reason}


def _runtime_difference(kind: str) -> Difference:
    return Difference(RUNTIME_KIND, ("error.kind",), {"error.kind": kind},
                      {"error.kind": "engine"})


def _completed(**results: Any) -> dict[str, Any]:
    expected: dict[str, Any] = {"status": "COMPLETED", "error": None}
    expected.update({f"results.{key}": value for key, value in results.items()})
    return expected


def _failed(kind: str, index: int, op: str, id: str | None, **more: Any) -> dict[str, Any]:
    return {"status": "FAILED", "error.kind": kind, "error.instruction_index": index,
            "error.instruction_op": op, "error.instruction_id": id, **more}


CASES: list[Case] = [
    Case("health", action="health",
         expect={"status": "ok", "gpu_count": 0, "target": {}, "load_keys":
                 ["request_capacity", "requests_in_progress", "requests_waiting"]}),
    Case("target", action="target", expect={"raised": "ProtocolError"}),
    Case("trivial", trivial, expect=_completed(r=1)),
    Case("scalars", scalars, expect={"status": "COMPLETED",
                                     "results.r.object.huge": {"float": "1e+300"},
                                     "results.r.object.negzero": {"float": "-0.0"},
                                     "results.r.object.integral": {"float": "2.0"}}),
    Case("containers", containers, expect={"status": "COMPLETED",
                                           "results.r.object.tuple": [1, [2, 3]]}),
    Case("big_ints", big_ints, expect=_completed(r=[
        2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**100, -(10**40)])),
    Case("literal_args", literal_args, expect={"status": "COMPLETED"}),
    Case("big_int_args", big_int_args, expect=_completed(r=BIG_INT_ARGS),
         bugs=_our_server_bug(
             "KNOWN LIMIT (README, 'Differences on purpose'): a run argument that is an "
             "integer literal outside [-2**63, 2**64) is refused with HTTP 400 parse "
             "('integers must fit in 64 bits ... pass larger integers as strings'), where "
             "KCoral 0.1.1 passes it on as a Python int; returned integers have no limit")),
    Case("literal_kinds", literal_kinds, expect=_completed(
        r=["NoneType", "bool", "int", "int", "float", "str", "list", "dict"])),
    Case("multiple_returns", multiple_returns, expect={"status": "COMPLETED",
                                                       "results.trivial": 1}),
    Case("bytes_upload", bytes_upload, expect={
        "status": "COMPLETED", "results.empty": {"bytes": ""},
        "results.seen.object.type": "bytes", "results.seen.object.len": 256}),
    Case("binary_values", binary_values, expect={"status": "COMPLETED"}),
    Case("subclass_values", subclass_values, expect={},
         difference=Difference(
             "REFERENCE BUG: KCoral 0.1.1 keeps the subclass instance in its encoded result "
             "and its worker dies sending it to the server (the class lives only in the "
             "uploaded module); PROTOCOL.md: 'bool / int / float / str | {\"type\":"
             "\"boolean\"|\"integer\"|\"number\"|\"string\",...}'",
             ("status", "results", "error"),
             {"status": "COMPLETED", "error": None, "results.r": [
                 3, "n", {"float": "0.5"}, [1, 2], {"object": {"b": 1, "a": 2}}, True]},
             {"status": "FAILED", "error.kind": "runtime",
              "error.message": WORKER_EXITED,
              "error.instruction_index": 3, "error.instruction_op": "return"})),
    Case("numpy_scalars", numpy_scalars,
         expect=_failed("serialization", 3, "return", None)),
    Case("framing_bytes", framing_bytes, expect={"status": "COMPLETED"}),
    Case("large_bytes", large_bytes, expect={
        "status": "COMPLETED", "results.digest": LARGE_DIGEST,
        "results.made.object.sha256": MADE_DIGEST}),
    Case("get_function_non_callable", get_function_non_callable, expect=_completed(limit=5)),
    Case("get_function_on_bytes", get_function_on_bytes,
         expect=_failed("unavailable", 1, "get_function", "lookup")),
    Case("tensor_dtypes", tensor_dtypes, expect={},
         difference=Difference(
             TENSOR_ON_CPU, ("status", "results", "error"),
             {"status": "COMPLETED", "error": None,
              "results.bf16.tensor": {"dtype": "bfloat16", "shape": [2], "values": [1.0, -2.0]},
              "results.e4m3.tensor": {"dtype": "float8_e4m3fn", "shape": [2],
                                      "values": [1.0, -1.0]},
              "results.flags.tensor": {"dtype": "bool", "shape": [3],
                                       "values": [True, False, True]},
              "results.empty.tensor": {"dtype": "float16", "shape": [0, 3], "values": []}},
             {"status": "FAILED", "error.kind": "unavailable", "error.instruction_id": "bf16"})),
    Case("tensor_zero_dim", tensor_zero_dim, expect={},
         difference=Difference(
             TENSOR_ON_CPU, ("status", "results", "error"),
             {"status": "COMPLETED", "error": None,
              "results.uploaded.tensor": {"dtype": "int64", "shape": [], "values": 7},
              "results.made.tensor": {"dtype": "float64", "shape": [], "values": 2.5}},
             {"status": "FAILED", "error.kind": "unavailable",
              "error.instruction_id": "scalar"})),
    Case("unicode_names", unicode_names, expect=_completed(
        **{UNICODE_KEY: "\u03c0 \u2248 3.14"})),
    Case("chained_callable", chained_callable, expect=_completed(r=42)),
    Case("fresh_namespaces", fresh_namespaces, expect=_completed(first_again=2, second=1)),
    Case("cpu_only_run", cpu_only_run, expect=_completed(r=[1, "x"])),
    Case("no_returns", no_returns, expect=_completed() | {"results": {}}),
    Case("file_roundtrip", file_roundtrip, expect={
        "status": "COMPLETED", "results.path": "data/in.bin",
        "results.input": {"file": b"\x00input bytes\xff".hex()},
        "results.output": {"file": b"\xffsetyb tupni\x00".hex()}}),
    Case("returned_path_register", returned_path_register, expect=_completed(
        report={"file": b'{"ok": true}'.hex()})),
    Case("folder_roundtrip", folder_roundtrip, expect={"status": "COMPLETED"}),
    Case("empty_folders", empty_folders, expect=_completed(
        hollow={"folder": {"files": {}, "directories": ["a", "a/b", "c"]}})),
    Case("parse_syntax_error", parse_syntax_error, expect=_failed("parse", 0, "upload", "bad")),
    Case("parse_top_level_error", parse_top_level_error,
         expect=_failed("parse", 0, "upload", "bad")),
    Case("parse_missing_name", parse_missing_name,
         expect=_failed("parse", 1, "get_function", "lookup")),
    Case("runtime_exception", runtime_exception,
         expect=_failed("runtime", 5, "run", "failing", **{
             "error.message": "ValueError: the message", "results.before": 1}),
         difference=_runtime_difference("runtime")),
    Case("runtime_custom_exception", runtime_custom_exception,
         expect=_failed("runtime", 2, "run", "run_2",
                        **{"error.message": "KernelMismatch: out[3] = 7, want 8"}),
         difference=_runtime_difference("runtime")),
    Case("runtime_key_error", runtime_key_error,
         expect=_failed("runtime", 2, "run", "run_2", **{"error.message": "KeyError: 'missing'"}),
         difference=_runtime_difference("runtime")),
    Case("correctness_assert", correctness_assert,
         expect=_failed("correctness", 4, "run", "check", **{
             "error.message": "AssertionError: arithmetic is broken",
             "results.kept": {"bytes": b"kept".hex()}}),
         difference=_runtime_difference("correctness")),
    Case("system_exit", system_exit, expect=_failed("runtime", 2, "run", "run_2"),
         difference=Difference(
             "REFERENCE BUG: SystemExit is a BaseException, which KCoral 0.1.1's engine does "
             "not catch, so its worker exits; PROTOCOL.md: " + RUNTIME_KIND,
             ("error.message",), {"error.message": "SystemExit: 3"},
             {"error.message": WORKER_EXITED})),
    Case("worker_exit", worker_exit, expect=_failed(
        "runtime", 5, "run", "exit", **{"error.message": WORKER_EXITED})),
    Case("run_not_callable", run_not_callable,
         expect=_failed("runtime", 3, "run", "call_int")),
    Case("serialization_nan", serialization_nan,
         expect=_failed("serialization", 3, "return", None)),
    Case("serialization_infinity_nested", serialization_infinity_nested,
         expect=_failed("serialization", 3, "return", None)),
    Case("serialization_object", serialization_object,
         expect=_failed("serialization", 3, "return", None)),
    Case("serialization_int_keys", serialization_int_keys,
         expect=_failed("serialization", 3, "return", None)),
    Case("serialization_set", serialization_set,
         expect=_failed("serialization", 3, "return", None)),
    Case("serialization_function", serialization_function,
         expect=_failed("serialization", 2, "return", None)),
    Case("serialization_keeps_parts_contiguous", serialization_keeps_parts_contiguous,
         expect=_failed("serialization", 8, "return", None, **{
             "results": {"bin": {"bytes": b"part zero".hex()},
                         "pieces": [{"bytes": b"part zero".hex()}]}})),
    Case("return_symlink", return_symlink, expect=_failed("serialization", 4, "return", None, **{
        "results": {"target": {"file": b"target".hex()}}})),
    Case("return_missing_file", return_missing_file,
         expect=_failed("serialization", 0, "return", None)),
    Case("return_file_is_folder", return_file_is_folder,
         expect=_failed("serialization", 1, "return", None)),
    Case("stdout_stderr", stdout_stderr, expect={
        "status": "COMPLETED",
        "stdout": "to stdout\nfd 1 \u00e9\nchild out\n", "stderr": "to stderr\nfd 2\nchild err\n",
        "stdout_truncated": False, "stderr_truncated": False}),
    Case("output_truncated", output_truncated, options={"output_limit_bytes": 16}, expect={
        "status": "COMPLETED", "stdout": "o" * 16, "stderr": "e" * 16,
        "stdout_truncated": True, "stderr_truncated": True}),
    Case("output_exactly_at_limit", output_exactly_at_limit, options={"output_limit_bytes": 16},
         expect={"stdout": "o" * 16, "stdout_truncated": False, "stderr_truncated": False}),
    Case("output_capture_off", output_capture_off, options={"output_limit_bytes": 0}, expect={
        "status": "COMPLETED", "stdout": "", "stderr": "",
        "stdout_truncated": False, "stderr_truncated": False}),
    Case("output_invalid_utf8", output_invalid_utf8, expect={
        "status": "COMPLETED", "stdout": "ok \ufffd\ufffd end\n"}),
    Case("output_control_characters", output_control_characters, expect={
        "status": "COMPLETED", "stdout": "nul \x00 bell \x07 esc \x1b[0m\n",
        "stderr": "\x00 leading nul\n"}),
    Case("output_cut_inside_character", output_cut_inside_character,
         options={"output_limit_bytes": 3}, expect={"stdout_truncated": True}),
    Case("output_kept_on_failure", output_kept_on_failure, expect={
        "status": "FAILED", "stdout": "before the failure\n"},
         difference=_runtime_difference("runtime")),
    Case("cache_miss", cache_miss, executions=2, trace=True, expect={
        "executions.0.status": "COMPLETED", "executions.1.status": "COMPLETED",
        "executions.0.results.r": ["bytes", "bytes"],
        # First send: no blobs, a miss naming both; second: the two missing; then a hit.
        "executions.0.attempts": [
            {"blob_parts": 0, "http_status": 200, "status": "CACHE_MISS", "missing": 2},
            {"blob_parts": 2, "http_status": 200, "status": "COMPLETED", "missing": None}],
        "executions.1.attempts": [
            {"blob_parts": 0, "http_status": 200, "status": "COMPLETED", "missing": None}]}),
    Case("numpy_return", numpy_return, expect={"status": "FAILED"},
         difference=Difference(
             "| tensor (torch; numpy too) | `{\"type\":\"tensor\",...}` (moved to host, "
             "contiguous) |  -- KCoral 0.1.x's CPU runtime exports no tensors, so a numpy "
             "array is `serialization` there",
             ("status", "results", "error"),
             {"status": "COMPLETED", "error": None, "results.r": {"tensor": {
                 "dtype": "int16", "shape": [2, 3], "values": [[0, 1, 2], [3, 4, 5]]}}},
             {"status": "FAILED", "error.kind": "serialization", "results": {}})),
    Case("tensor_upload", tensor_upload, expect={"status": "FAILED"},
         difference=Difference(
             TENSOR_ON_CPU, ("status", "results", "error"),
             {"status": "COMPLETED", "error": None, "results.t": {"tensor": {
                 "dtype": "float32", "shape": [2, 3],
                 "values": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]}}},
             {"status": "FAILED", "error.kind": "unavailable",
              "error.instruction_index": 0, "error.instruction_op": "upload",
              "error.instruction_id": "upload_0"})),
    Case("library_upload", library_upload, expect=_failed("unavailable", 0, "upload", "lib")),
    Case("cuda_module", cuda_module,
         ours_only="module `language` (`python` default, or `cuda`) is ours; the reference "
         "builder has no `language` argument and its server rejects the field",
         expect={},
         difference=Difference(
             "`module` | `op,id,kind,source`, optional `language` (`python` default, or "
             "`cuda`) | ... `cuda`: the text is kept; `get_function` then yields an object with "
             "attributes `source` and `name`  -- KCoral 0.1.x: 'JSON is strict: ... any field "
             "not listed below are a 400'",
             ("status", "results", "error", "raised", "status_code", "kind", "stdout", "stderr",
              "stdout_truncated", "stderr_truncated"),
             {"status": "COMPLETED", "results.r": [CUDA_SOURCE, "add_one"]},
             {"raised": "ServerError", "status_code": 400, "kind": "parse"})),
    Case("execution_timeout", execution_timeout, options={"timeout_seconds": 1},
         expect={"raised": "ServerError", "status_code": 504, "kind": "timeout"}),
]

CASES_BY_NAME = {case.name: case for case in CASES}
assert len(CASES_BY_NAME) == len(CASES), "case names must be unique"


def make_context(nonce: str, scratch: str | os.PathLike[str]) -> Context:
    return Context(nonce=nonce, scratch=Path(scratch))
