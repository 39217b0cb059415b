"""The programs both KCoral implementations run in the compatibility suite.

Each :class:`Case` builds one program through the user guide's builder API
(``Program().upload``, ``upload_file``, ``upload_folder``, ``get_function``, ``run``,
``return_``, ``return_file``, ``return_folder``), which our client and the reference
client (PyPI ``kcoral==0.1.1``) share. The builder class is passed in, so this module
imports neither client: the in-process suite hands it ours, and ``reference_driver.py``,
run by the reference venv's Python, hands it the reference's. What the suite expects of
each program's outcome is in cases.py; what the programs upload, in sources.py.

Keep this module importable by Python 3.10+ with only the standard library and numpy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sources import (  # type: ignore[import-not-found]
    ANNOTATED_ENTRY, ANNOTATED_LIBRARY, CUDA_SOURCE, FILES, OUTPUT, VALUES,
)


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

    ``reason`` quotes the public protocol's sentence that makes us differ on purpose, or starts
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


def postponed_annotations(P: Any, ctx: Context) -> Any:
    """Annotations naming what does not exist where they stand, in the entry module and in
    a library module whose function it is given: uploads compile with postponed evaluation
    of annotations (PEP 563), so they stay strings."""
    program = P()
    helper = program.get_function(module=_module(program, ANNOTATED_LIBRARY), name="helper")
    main = program.get_function(module=_module(program, ANNOTATED_ENTRY), name="main")
    program.return_(key="r", value=program.run(fn=main, args=[helper, 41]))
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
