"""The Python (and CUDA C) the compatibility suite's programs upload, as source text.

Kept apart from the programs that upload them (programs.py) so each reads on its own.
Standard library only: the reference venv's Python imports this too.
"""

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

# Annotations that name what is not defined where they stand: a name defined nowhere, a
# TIRx-style T.Buffer((N,), ...) whose N is assigned after the def, a class referred to in
# its own body. Modules compiled as under `from __future__ import annotations` load them.
ANNOTATED_LIBRARY = r'''
def helper(x: Undefined) -> Undefined:
    return x + 1
'''

ANNOTATED_ENTRY = r'''
def main(helper, x: Undefined) -> Undefined:
    def kernel(a: T.Buffer((N,), "float32")) -> None: ...
    N = 4
    return [helper(x), helper.__annotations__, main.__annotations__, kernel.__annotations__,
            Node.child.__annotations__]


class Node:
    def child(self) -> Node: ...
'''

CUDA_SOURCE = "__global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }\n"
