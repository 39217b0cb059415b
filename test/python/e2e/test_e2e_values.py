"""run arguments (JSON literals and references) and returned values of every type.

Literals reach the function as the JSON they are (a ``{"$ref": ...}`` nested in a literal
stays a dict); returned values come back typed (docs/protocol.md, "Values"),
binary nodes as parts ``return:N`` numbered depth-first across the whole response.
"""

from __future__ import annotations

import hashlib
import json
import math

import ml_dtypes
import numpy as np
import pytest

from kcoral import RequestRejected
from kcoral import Program

from e2e.programs import call, response_document

ECHO = "def echo(*args):\n    return [list(args), [type(a).__name__ for a in args]]\n"

LITERALS = [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1,
    0.1 + 0.2, 1e300, 5e-324, -0.0, 1.5e-7, 123456789.123456789,
    "", "plain", 'quote " backslash \\ slash /', "line\nbreak\ttab\r", "nul \u0000 byte",
    "\u2028\u2029 separators", "unicode: żółw 龍 😀",
    [], {}, [1, [2, [3, []]]], {"a": {"b": [None, True, 1.5, "s"]}},
    [{"$ref": "m"}], {"$ref": "m", "extra": 1}, {"nested": {"$ref": "f"}},
]


def test_literal_arguments_arrive_as_sent(server):
    result = server.execute(call(ECHO, "echo", *LITERALS)).raise_for_error()
    values, types = result["out"]
    assert values == LITERALS
    for value, sent in zip(values, LITERALS, strict=True):
        if isinstance(sent, float):
            assert math.copysign(1.0, value) == math.copysign(1.0, sent)
    expected_types = [type(v).__name__ for v in LITERALS]
    assert types == expected_types


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**40])
def test_integer_literals_beyond_64_bits_are_refused_with_a_clear_message(server, number):
    # A documented limit (README, "Differences on purpose"): the strict JSON parser holds
    # integers in 64 bits. Returned integers have no such limit.
    with pytest.raises(RequestRejected) as rejected:
        server.execute(call(ECHO, "echo", number))
    assert "64 bits" in rejected.value.message


def test_references_pass_values(server):
    program = Program()
    module = program.upload(id="m", kind="module",
                            source=ECHO + "def make():\n    return {'made': [1, 2]}\n")
    echo = program.get_function(id="echo", module=module, name="echo")
    made = program.run(id="made", fn=program.get_function(id="make", module=module, name="make"))
    data = program.upload(id="data", kind="bytes", value=b"raw")
    first = program.run(id="first", fn=echo, args=[made, data, "literal", made])
    # A run's value feeds the next; the same value arrives as the same object.
    program.return_(key="out", value=program.run(id="second", fn=echo, args=[first, 5]))
    result = server.execute(program).raise_for_error()
    assert result["out"] == [
        [[[{"made": [1, 2]}, b"raw", "literal", {"made": [1, 2]}],
          ["dict", "bytes", "str", "dict"]], 5],
        ["list", "int"],
    ]


def test_run_without_args_and_return_of_the_same_value_twice(server):
    program = call("def f():\n    return b'twice'\n", "f")
    program.return_(key="again", value={"$ref": "r"})
    result = server.execute(program).raise_for_error()
    assert result.results == {"out": b"twice", "again": b"twice"}


SCALARS = r'''
def scalars():
    return [None, True, False, 0, -7, 2**63 - 1, 2**64, -(2**100), 10**400, 0.5, -0.0,
            1e308, 5e-324, "", "żółw 😀", "\u0000", (1, (2,)), {"k": {"n": []}}, {}, [], ()]
'''


def test_return_json_like_values(server):
    result = server.execute(call(SCALARS, "scalars")).raise_for_error()
    assert result["out"] == [None, True, False, 0, -7, 2**63 - 1, 2**64, -(2**100), 10**400,
                             0.5, -0.0, 1e308, 5e-324, "", "żółw 😀", "\u0000", [1, [2]],
                             {"k": {"n": []}}, {}, [], []]
    assert math.copysign(1.0, result["out"][10]) == -1.0


def test_return_types_on_the_wire(server):
    response = server.post(*call(SCALARS, "scalars").to_request())
    document, parts = response_document(response)
    assert parts == {}
    tree = document["results"]["out"]
    assert tree["type"] == "array"
    types = [node["type"] for node in tree["value"]]
    assert types == ["null", "boolean", "boolean", "integer", "integer", "integer", "integer",
                     "integer", "integer", "number", "number", "number", "number", "string",
                     "string", "string", "array", "object", "object", "array", "array"]
    assert tree["value"][0] == {"type": "null"}
    # Integers wider than 64 bits reach the client digit for digit.
    assert json.loads(response.content)["results"]["out"]["value"][8]["value"] == 10**400


ARRAYS = r'''
import numpy, ml_dtypes

def arrays():
    base = numpy.arange(6).reshape(2, 3)
    return {
        "float32": base.astype(numpy.float32), "float64": base.astype(numpy.float64),
        "float16": base.astype(numpy.float16), "int8": base.astype(numpy.int8),
        "int16": base.astype(numpy.int16), "int32": base.astype(numpy.int32),
        "int64": base.astype(numpy.int64), "uint8": base.astype(numpy.uint8),
        "bool": base % 2 == 0, "bfloat16": base.astype(ml_dtypes.bfloat16),
        "float8_e4m3fn": base.astype(ml_dtypes.float8_e4m3fn),
        "float8_e5m2": base.astype(ml_dtypes.float8_e5m2),
        "transposed": base.astype(numpy.int32).T, "big_endian": base.astype(">i4"),
        "empty": numpy.zeros((0, 4), dtype=numpy.int16),
    }

def numpy_scalars():
    return [numpy.int64(3), numpy.int8(-2), numpy.uint64(2**64 - 1), numpy.float32(0.5),
            numpy.float64(0.25), numpy.bool_(True), numpy.float16(1.5), numpy.str_("s")]
'''


def test_return_numpy_arrays(server):
    result = server.execute(call(ARRAYS, "arrays")).raise_for_error()
    base = np.arange(6).reshape(2, 3)
    arrays = result["out"]
    for dtype in ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8",
                  "bfloat16", "float8_e4m3fn", "float8_e5m2"]:
        expected = base.astype(getattr(ml_dtypes, dtype, None) or np.dtype(dtype))
        assert arrays[dtype].dtype == expected.dtype, dtype
        np.testing.assert_array_equal(arrays[dtype].astype(np.float64), expected.astype(np.float64))
        assert arrays[dtype].flags.writeable
    np.testing.assert_array_equal(arrays["bool"], base % 2 == 0)
    np.testing.assert_array_equal(arrays["transposed"], base.T)
    assert arrays["transposed"].dtype == np.int32
    np.testing.assert_array_equal(arrays["big_endian"], base)
    assert arrays["empty"].shape == (0, 4) and arrays["empty"].dtype == np.int16


def test_return_zero_dimensional_array_keeps_its_shape(server):
    source = "import numpy\ndef make():\n    return numpy.array(3.5, dtype=numpy.float32)\n"
    document, parts = response_document(server.post(*call(source, "make").to_request()))
    node = document["results"]["out"]
    assert (node["type"], node["dtype"]) == ("tensor", "float32")
    assert parts[node["part"]] == np.float32(3.5).tobytes()
    assert node["shape"] == []


def test_numpy_scalars_are_not_returned_but_named(server):
    # Not in the protocol's value table (np.float64, a float, is): the message says what
    # to do instead.
    result = server.execute(call(ARRAYS, "numpy_scalars"))
    assert (result.status, result.error["kind"]) == ("FAILED", "serialization")
    assert "numpy scalar numpy.int64" in result.error["message"]
    assert ".item()" in result.error["message"]


BINARIES = r'''
import numpy

def nested():
    return [b"zero", {"a": numpy.arange(3, dtype=numpy.int32), "b": [bytearray(b"two"), 7]},
            memoryview(b"three"), "no part"]

def one():
    return b"four"
'''


def test_binary_parts_are_numbered_depth_first_across_returns(server):
    program = Program()
    module = program.upload(id="m", kind="module", source=BINARIES)
    nested = program.run(id="nested", fn=program.get_function(id="n", module=module, name="nested"))
    one = program.run(id="one", fn=program.get_function(id="o", module=module, name="one"))
    program.return_(key="first", value=nested)
    program.return_(key="second", value=one)
    response = server.post(*program.to_request())
    document, parts = response_document(response)
    first, second = document["results"]["first"]["value"], document["results"]["second"]
    nodes = [first[0], first[1]["value"]["a"], first[1]["value"]["b"]["value"][0], first[2], second]
    assert [node["part"] for node in nodes] == [f"return:{i}" for i in range(5)]
    assert list(parts) == [f"return:{i}" for i in range(5)]
    expected = [b"zero", np.arange(3, dtype="<i4").tobytes(), b"two", b"three", b"four"]
    for node, data in zip(nodes, expected, strict=True):
        assert parts[node["part"]] == data
        assert node["sha256"] == hashlib.sha256(data).hexdigest()
    assert [node["type"] for node in nodes] == ["bytes", "tensor", "bytes", "bytes", "bytes"]
    assert nodes[1]["dtype"] == "int32" and nodes[1]["shape"] == [3]
    # The client decodes the same response to the same values.
    result = server.execute(program).raise_for_error()
    assert result["first"][0] == b"zero" and result["first"][1]["b"] == [b"two", 7]
    assert result["first"][2] == b"three" and result["second"] == b"four"


# name -> (expression returned, fragment of the error message)
UNSUPPORTED = {
    "nan": ("float('nan')", "non-finite number nan"),
    "infinity": ("[1.0, float('inf')]", "non-finite number inf"),
    "complex": ("1j", "complex"),
    "set": ("{1, 2}", "set"),
    "object": ("object()", "object"),
    "function": ("len", "builtin_function_or_method"),
    "int_keys": ("{1: 'a'}", "string keys"),
    "uint16_array": ("__import__('numpy').zeros(3, dtype='uint16')", "dtype uint16"),
    "object_array": ("__import__('numpy').array([None, 1], dtype=object)", "dtype object"),
    "complex_scalar": ("__import__('numpy').complex64(1)", "complex64"),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_values_fail_with_serialization(server, name):
    expression, fragment = UNSUPPORTED[name]
    program = call(f"def make():\n    return {expression}\n", "make")
    result = server.execute(program)
    assert result.status == "FAILED"
    assert result.error["kind"] == "serialization", result.error
    assert result.error["instruction_index"] == 3 and result.error["instruction_op"] == "return"
    assert result.error["instruction_id"] is None
    assert fragment in result.error["message"]
    assert result.results == {}


DICT_SUBCLASSES = r'''
class Lying(dict):
    def items(self):
        return [(1, "int key"), ("1", "str key")]

    def keys(self):
        return ["1"]

    def __iter__(self):
        return iter(["1"])


class Distinct(str):
    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


def lying():
    return Lying(a=1)


def alike():
    return {Distinct("k"): 1, Distinct("k"): 2}
'''


def test_a_dict_returns_its_own_items_and_keys_that_read_alike_fail(server):
    """A dict subclass is returned as the dict it holds, whatever its items(), keys() or
    __iter__ say (a lying items() used to put "1" in the answer twice, which the client
    refused); two keys of one text (str subclasses that never compare equal) fail the return."""
    assert server.execute(call(DICT_SUBCLASSES, "lying")).raise_for_error()["out"] == {"a": 1}
    alike = server.execute(call(DICT_SUBCLASSES, "alike"))
    assert alike.status == "FAILED" and alike.error["kind"] == "serialization", alike.error
    assert "two of its keys read 'k'" in alike.error["message"]


def test_self_containing_value_fails_with_serialization(server):
    source = "def make():\n    x = []\n    x.append(x)\n    return x\n"
    result = server.execute(call(source, "make"))
    assert result.error["kind"] == "serialization"
    assert "contains itself" in result.error["message"]


def test_failed_return_adds_no_parts(server):
    program = Program()
    module = program.upload(id="m", kind="module",
                            source="def good():\n    return b'kept'\n"
                                   "def bad():\n    return [b'lost', float('nan')]\n")
    good = program.run(id="good", fn=program.get_function(id="g", module=module, name="good"))
    bad = program.run(id="bad", fn=program.get_function(id="b", module=module, name="bad"))
    program.return_(key="good", value=good)
    program.return_(key="bad", value=bad)
    document, parts = response_document(server.post(*program.to_request()))
    assert document["status"] == "FAILED"
    assert document["error"]["kind"] == "serialization"
    assert list(document["results"]) == ["good"]
    assert document["results"]["good"]["part"] == "return:0"
    assert parts == {"return:0": b"kept"}


def test_return_keys_are_their_own_namespace_and_may_be_any_text(server):
    program = Program()
    module = program.upload(id="módulo 1", kind="module", source="def f(x):\n    return x\n")
    function = program.get_function(id="функция/2", module=module, name="f")
    value = program.run(id="r", fn=function, args=["ok"])
    program.return_(key="r", value=value)  # the same text as an instruction id
    program.return_(key="ключ 😀", value=value)
    program.return_(key="módulo 1", value=value)
    result = server.execute(program).raise_for_error()
    assert result.results == {"r": "ok", "ключ 😀": "ok", "módulo 1": "ok"}
