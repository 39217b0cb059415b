"""Every upload kind and get_function, as a CPU kcoral-server runs them.

module (Python, and CUDA text handed over as an object with ``source`` and ``name``),
tensor (a writable numpy array on a CPU server, private to the program), bytes, file
(mode 0600, parents 0700, value = normalized path) and library (FAILED ``unavailable`` on
a CPU server); get_function with and without cpu_only.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from kcoral import Program, Unavailable

from e2e.programs import call

INSPECT = r'''
import os, stat

def describe(value):
    import numpy
    if isinstance(value, numpy.ndarray):
        return {"type": "ndarray", "dtype": value.dtype.name, "shape": list(value.shape),
                "writeable": bool(value.flags.writeable),
                "sum": float(value.astype("float64").sum())}
    return {"type": type(value).__name__}

def file_facts(path):
    facts = {"path": path, "content": open(path, "rb").read().decode(),
             "mode": oct(stat.S_IMODE(os.stat(path).st_mode)), "parents": []}
    parent = os.path.dirname(path)
    while parent:
        facts["parents"].append([parent, oct(stat.S_IMODE(os.stat(parent).st_mode))])
        parent = os.path.dirname(parent)
    return facts

def cuda(handle):
    return [type(handle).__name__, handle.source, handle.name]

def poke(array):
    array[...] = 7
    return array
'''


def inspect_program(upload, name: str = "describe") -> Program:
    program = Program()
    value = upload(program)
    module = program.upload(id="inspect", kind="module", source=INSPECT)
    function = program.get_function(id="fn", module=module, name=name)
    program.return_(key="out", value=program.run(id="r", fn=function, args=[value]))
    return program


def test_python_module_function_runs(server):
    source = "FACTOR = 6\n\ndef times(x):\n    return FACTOR * x\n"
    result = server.execute(call(source, "times", 7))
    assert result.completed, result.error
    assert result["out"] == 42


def test_annotations_are_not_evaluated_as_the_reference_server_does(server):
    # Uploads compile as under `from __future__ import annotations`: an annotation may name
    # what does not exist yet (or at all), as in the TIRx T.Buffer((N,), ...) of a kernel.
    program = Program()
    library = program.upload(id="library", kind="module",
                             source="def helper(x: Undefined) -> Undefined:\n    return x + 1\n")
    entry = program.upload(id="entry", kind="module", source=(
        "def f(library, x: Undefined) -> Undefined:\n"
        "    def kernel(a: T.Buffer((N,), 'float32')): ...\n"
        "    N = 4\n"
        "    return [library.helper(x), f.__annotations__, kernel.__annotations__]\n"))
    function = program.get_function(id="f", module=entry, name="f")
    program.return_(key="out", value=program.run(id="r", fn=function, args=[library, 41]))
    result = server.execute(program).raise_for_error()
    assert result["out"] == [42, {"x": "Undefined", "return": "Undefined"},
                             {"a": "T.Buffer((N,), 'float32')"}]


def test_cuda_module_gives_source_and_name(server):
    kernel = '__global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }\n'

    def upload(program):
        module = program.upload(id="kernel", kind="module", language="cuda", source=kernel)
        return program.get_function(id="handle", module=module, name="add_one")

    result = server.execute(inspect_program(upload, "cuda")).raise_for_error()
    assert result["out"] == ["SimpleNamespace", kernel, "add_one"]


DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
          "bfloat16", "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_upload_is_a_writable_numpy_array(server, dtype):
    numpy_dtype = getattr(ml_dtypes, dtype, None) or np.dtype(dtype)
    values = (np.arange(12) % 3).astype(numpy_dtype).reshape(3, 4)
    program = Program()
    tensor = program.upload(id="t", kind="tensor", value=values)
    module = program.upload(id="inspect", kind="module", source=INSPECT)
    describe = program.get_function(id="describe", module=module, name="describe")
    poke = program.get_function(id="poke", module=module, name="poke")
    program.return_(key="facts", value=program.run(id="facts", fn=describe, args=[tensor]))
    program.return_(key="poked", value=program.run(id="poked", fn=poke, args=[tensor]))
    result = server.execute(program).raise_for_error()
    assert result["facts"] == {"type": "ndarray", "dtype": dtype, "shape": [3, 4],
                               "writeable": True,
                               "sum": float(values.astype(np.float64).sum())}
    poked = result["poked"]
    assert poked.dtype == np.dtype(numpy_dtype) and poked.shape == (3, 4)
    assert (poked.astype(np.float64) == (1.0 if dtype == "bool" else 7.0)).all()


def test_tensor_writes_stay_private_to_the_program(server):
    values = np.arange(1000, dtype=np.float32)
    for _ in range(2):  # the second program gets the blob from the server's cache
        program = Program()
        tensor = program.upload(id="t", kind="tensor", value=values)
        module = program.upload(id="inspect", kind="module", source=INSPECT)
        describe = program.get_function(id="describe", module=module, name="describe")
        poke = program.get_function(id="poke", module=module, name="poke")
        before = program.run(id="before", fn=describe, args=[tensor])
        program.run(id="poked", fn=poke, args=[tensor])
        program.return_(key="before", value=before)
        program.return_(key="tensor", value=tensor)
        result = server.execute(program).raise_for_error()
        assert result["before"]["sum"] == float(values.sum())
        assert (result["tensor"] == 7).all()


def test_tensors_sharing_a_request_are_intact_and_private(server):
    # One request's blobs share one memfd: the small tensors sit unaligned in it (copied
    # for the program), the large one page-aligned (mapped copy-on-write).
    small = np.arange(3, dtype=np.int16)
    large = np.arange(300_000, dtype=np.float32)
    odd = np.arange(7, dtype=np.uint8)
    for _ in range(2):  # the second time from the cache
        program = Program()
        tensors = [program.upload(kind="tensor", value=value) for value in (small, large, odd)]
        module = program.upload(id="inspect", kind="module", source=INSPECT)
        describe = program.get_function(id="describe", module=module, name="describe")
        poke = program.get_function(id="poke", module=module, name="poke")
        for i, tensor in enumerate(tensors):
            program.return_(key=f"before{i}", value=program.run(fn=describe, args=[tensor]))
            program.run(fn=poke, args=[tensor])
            program.return_(key=f"after{i}", value=tensor)
        result = server.execute(program).raise_for_error()
        for i, value in enumerate((small, large, odd)):
            assert result[f"before{i}"]["sum"] == float(value.astype(np.float64).sum())
            assert result[f"before{i}"]["writeable"]
            assert (result[f"after{i}"] == 7).all()


def test_empty_tensor(server):
    def upload(program):
        return program.upload(id="t", kind="tensor", value=np.zeros((0, 5), dtype=np.int32))

    result = server.execute(inspect_program(upload)).raise_for_error()
    assert result["out"]["shape"] == [0, 5] and result["out"]["dtype"] == "int32"


def test_large_tensor_round_trip(server):
    values = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    program = Program()
    tensor = program.upload(id="t", kind="tensor", value=values)
    program.return_(key="t", value=tensor)
    result = server.execute(program).raise_for_error()
    np.testing.assert_array_equal(result["t"], values)
    assert result["t"].flags.writeable


def test_bytes_upload_is_bytes(server):
    payload = bytes(range(256)) * 3

    def upload(program):
        return program.upload(id="b", kind="bytes", value=payload)

    result = server.execute(inspect_program(upload)).raise_for_error()
    assert result["out"] == {"type": "bytes"}
    program = Program()
    program.return_(key="b", value=program.upload(id="b", kind="bytes", value=payload))
    assert server.execute(program).raise_for_error()["b"] == payload


CHANGE_IN_PLACE = r'''
import ctypes

def change_in_place(data, at):
    address = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    ctypes.memset(address + at, data[at] ^ 0xFF, 1)
    return [data, data[:-1]]
'''


@pytest.mark.parametrize("hashed_while_arriving", [False, True])
@pytest.mark.parametrize("at", [0, -1])
def test_large_bytes_returned_as_uploaded_or_changed_in_place(server, at, hashed_while_arriving, monkeypatch):
    # A large bytes value returned as it came is compared with its upload, not hashed again
    # (the worker names the upload's digest), and the client compares it with its own
    # bytes, which it then returns: one changed in place, behind Python's back, must come
    # back as it now is, under its own digest, which the client checks. The client compares
    # while the answer arrives where it has cores to spare, else while decoding: both ways.
    if hashed_while_arriving:
        monkeypatch.setattr("kcoral._body.HASH_WHILE_RECEIVING_CORES", 1)
    payload = np.random.default_rng(1).integers(0, 256, (3 << 20) + 7, dtype=np.uint8).tobytes()
    program = Program()
    data = program.upload(id="b", kind="bytes", value=payload)
    program.return_(key="as_uploaded", value=data)
    result = server.execute(program).raise_for_error()
    assert result["as_uploaded"] is payload
    at %= len(payload)
    changed = bytearray(payload)
    changed[at] ^= 0xFF
    program = Program()
    data = program.upload(id="b", kind="bytes", value=payload)
    module = program.upload(id="m", kind="module", source=CHANGE_IN_PLACE)
    function = program.get_function(id="f", module=module, name="change_in_place")
    program.return_(key="out", value=program.run(id="r", fn=function, args=[data, at]))
    result = server.execute(program).raise_for_error()
    assert result["out"] == [bytes(changed), bytes(changed[:-1])]


def test_file_upload_mode_parents_and_value(server):
    def upload(program):
        return program.upload_file(id="file", blob=b"file body", path="./deep//er/x/data.txt")

    result = server.execute(inspect_program(upload, "file_facts")).raise_for_error()
    assert result["out"] == {
        "path": "deep/er/x/data.txt",
        "content": "file body",
        "mode": "0o600",
        "parents": [["deep/er/x", "0o700"], ["deep/er", "0o700"], ["deep", "0o700"]],
    }


def test_anonymous_file_upload_and_folder_upload(server, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helper.py").write_text("def answer():\n    return 41\n")
    (tmp_path / ".hidden").write_text("h")
    program = Program()
    program.upload_folder(tmp_path, path="lib")
    program.upload_file(blob=b"x", path="notes/readme.txt")
    source = ("import sys, os\nsys.path.insert(0, 'lib')\n"
              "def f():\n    import pkg.helper\n"
              "    return [pkg.helper.answer() + 1, open('lib/.hidden').read(),"
              " open('notes/readme.txt').read()]\n")
    module = program.upload(id="m", kind="module", source=source)
    function = program.get_function(id="f", module=module, name="f")
    program.return_(key="out", value=program.run(id="r", fn=function))
    assert server.execute(program).raise_for_error()["out"] == [42, "h", "x"]


def test_library_upload_is_unavailable_on_a_cpu_server(server):
    program = Program()
    library = program.upload(id="lib", kind="library", value=b"\x7fELF not really a library")
    program.get_function(id="fn", module=library, name="add_one")
    result = server.execute(program)
    assert result.status == "FAILED"
    assert result.error["kind"] == "unavailable"
    assert "GPU" in result.error["message"]
    assert (result.error["instruction_index"], result.error["instruction_op"],
            result.error["instruction_id"]) == (0, "upload", "lib")
    with pytest.raises(Unavailable):
        result.raise_for_error()


@pytest.mark.parametrize("cpu_only", [False, True])
def test_get_function_cpu_only_runs_on_a_cpu_server(server, cpu_only):
    program = Program()
    module = program.upload(id="m", kind="module", source="def f(a, b):\n    return a * b\n")
    function = program.get_function(id="f", module=module, name="f", cpu_only=cpu_only)
    program.return_(key="out", value=program.run(id="r", fn=function, args=[6, 7]))
    result = server.execute(program).raise_for_error()
    assert result["out"] == 42
    assert result.lease_wait_ms == 0 and result.lease_held_ms == 0


def test_get_function_selects_any_callable_attribute(server):
    source = "class K:\n    def __call__(self, x):\n        return x + 1\n\nk = K()\n"
    result = server.execute(call(source, "k", 1)).raise_for_error()
    assert result["out"] == 2
