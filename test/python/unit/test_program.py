"""Building programs: the wire instructions, automatic ids, and eager validation."""

import os

import ml_dtypes
import numpy as np
import pytest

from kcoral import Program, Register
from kcoral._codec import decode_multipart, loads_json, sha256_hex


def guide_program() -> Program:
    """The user guide's first example, unchanged."""
    program = Program()
    module = program.upload(id="module", kind="module", source="def evaluate(src): ...")
    evaluate = program.get_function(id="evaluate", module=module, name="evaluate")
    values = np.arange(256, dtype=np.float32)
    src = program.upload(id="src", kind="tensor", value=values)
    report = program.run(id="report", fn=evaluate, args=[src])
    program.return_(key="report", value=report)
    return program


def test_guide_program_instructions():
    program = guide_program()
    digest = sha256_hex(np.arange(256, dtype="<f4").tobytes())
    assert program.instructions == [
        {"op": "upload", "id": "module", "kind": "module", "source": "def evaluate(src): ..."},
        {"op": "get_function", "id": "evaluate", "module": {"$ref": "module"}, "name": "evaluate"},
        {
            "op": "upload",
            "id": "src",
            "kind": "tensor",
            "blob": digest,
            "dtype": "float32",
            "shape": [256],
        },
        {"op": "run", "id": "report", "fn": {"$ref": "evaluate"}, "args": [{"$ref": "src"}]},
        {"op": "return", "key": "report", "value": {"$ref": "report"}},
    ]
    assert dict(program.blobs) == {digest: np.arange(256, dtype="<f4").tobytes()}


def test_automatic_ids_share_one_counter_and_skip_taken_ids():
    program = Program()
    module = program.upload(kind="module", source="")
    fn = program.get_function(module=module, name="f")
    result = program.run(fn=fn)
    assert [module.id, fn.id, result.id] == ["upload_0", "get_function_1", "run_2"]
    program.upload(id="run_3", kind="bytes", value=b"")
    assert program.run(fn=fn).id == "run_4"
    assert program.upload_file(blob=b"", path="f").id == "upload_5"


def test_registers_are_frozen_values():
    assert Register("a") == Register("a")
    with pytest.raises(AttributeError):
        Register("a").id = "b"  # type: ignore[misc]


def test_duplicate_ids_and_keys_are_refused():
    program = Program()
    module = program.upload(id="m", kind="module", source="")
    with pytest.raises(ValueError, match="duplicate instruction id"):
        program.get_function(id="m", module=module, name="f")
    with pytest.raises(ValueError):
        program.upload(id="", kind="module", source="")
    program.return_(key="k", value=module)
    with pytest.raises(ValueError, match="duplicate return key"):
        program.return_file(key="k", path="x")
    with pytest.raises(ValueError):
        program.return_(key="", value=module)


def test_unknown_references_are_refused():
    program = Program()
    module = program.upload(kind="module", source="")
    with pytest.raises(ValueError, match="no earlier instruction"):
        program.get_function(module=Register("nope"), name="f")
    with pytest.raises(ValueError, match="no earlier instruction"):
        program.run(fn={"$ref": "nope"})
    fn = program.get_function(module={"$ref": module.id}, name="f")
    with pytest.raises(ValueError, match="no earlier instruction"):
        program.run(fn=fn, args=[Register("later")])
    with pytest.raises(ValueError, match="no earlier instruction"):
        program.run(fn=fn, args=[{"$ref": "later"}])
    with pytest.raises(ValueError, match="no earlier instruction"):
        program.return_(key="k", value=Register("nope"))
    with pytest.raises(ValueError, match="no earlier instruction"):
        program.return_folder(key="k", path=Register("nope"))
    with pytest.raises(TypeError):
        program.run(fn="f")  # type: ignore[arg-type]
    assert len(program.instructions) == 2


def test_failed_calls_leave_the_program_unchanged():
    program = Program()
    program.upload(kind="module", source="")
    before = program.instructions
    with pytest.raises(ValueError):
        program.upload(kind="tensor", value=b"abc", dtype="float32", shape=[1])
    with pytest.raises(ValueError):
        program.upload_file(blob=b"x", path="../x")
    assert program.instructions == before and len(program.blobs) == 0
    assert program.upload(kind="bytes", value=b"").id == "upload_1"


def test_module_languages():
    program = Program()
    program.upload(id="py", kind="module", source="x = 1", language="python")
    program.upload(id="cu", kind="module", source="__global__ void k() {}", language="cuda")
    python, cuda = program.instructions
    assert "language" not in python
    assert cuda["language"] == "cuda"
    with pytest.raises(ValueError):
        program.upload(kind="module", source="", language="rust")
    with pytest.raises(TypeError):
        program.upload(kind="bytes", value=b"", language="cuda")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"kind": "file", "value": b""}, ValueError),
        ({"kind": "module"}, TypeError),
        ({"kind": "module", "source": b"x"}, TypeError),
        ({"kind": "module", "source": "x", "value": b""}, TypeError),
        ({"kind": "bytes", "value": "text"}, TypeError),
        ({"kind": "bytes", "source": "x"}, TypeError),
        ({"kind": "library", "value": b"", "dtype": "uint8"}, TypeError),
        ({"kind": "tensor", "value": [1, 2]}, TypeError),
        ({"kind": "tensor", "value": b"\0" * 4}, TypeError),
        ({"kind": "tensor", "value": b"\0" * 4, "dtype": "float32"}, TypeError),
        ({"kind": "tensor", "value": b"\0" * 4, "dtype": "float33", "shape": [1]}, ValueError),
        ({"kind": "tensor", "value": b"\0" * 4, "dtype": "float32", "shape": [2]}, ValueError),
        ({"kind": "tensor", "value": b"\0" * 4, "dtype": "float32", "shape": [-1]}, ValueError),
        ({"kind": "tensor", "value": b"\0" * 4, "dtype": "float32", "shape": [True]}, TypeError),
        ({"kind": "tensor", "value": b"\0" * 4, "dtype": "float32", "shape": "1"}, TypeError),
        ({"kind": "tensor", "value": np.zeros(2, np.float32), "dtype": "float16"}, ValueError),
        ({"kind": "tensor", "value": np.zeros(2, np.float32), "shape": [3]}, ValueError),
        ({"kind": "tensor", "value": np.zeros(2, np.complex64)}, ValueError),
        ({"kind": "tensor", "value": np.zeros(2, np.uint16)}, ValueError),
        ({"kind": "tensor", "value": np.array(["a"])}, ValueError),
    ],
)
def test_upload_validation(kwargs, error):
    with pytest.raises(error):
        Program().upload(**kwargs)


WIRE_DTYPES = {
    "bool": np.bool_,
    "uint8": np.uint8,
    "int8": np.int8,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "int16": np.int16,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "int32": np.int32,
    "float32": np.float32,
    "int64": np.int64,
    "float64": np.float64,
}


@pytest.mark.parametrize("dtype", sorted(WIRE_DTYPES))
def test_tensor_upload_of_every_dtype(dtype):
    array = (np.arange(6) % 2).astype(WIRE_DTYPES[dtype]).reshape(2, 3)
    program = Program()
    program.upload(id="t", kind="tensor", value=array)
    (instruction,) = program.instructions
    assert (instruction["dtype"], instruction["shape"]) == (dtype, [2, 3])
    assert program.blobs[instruction["blob"]] == array.tobytes()


def test_tensor_upload_is_little_endian_c_order_and_a_snapshot():
    big_endian = np.arange(6, dtype=">i4").reshape(2, 3)
    transposed = np.arange(6, dtype=np.float32).reshape(2, 3).T
    program = Program()
    program.upload(id="be", kind="tensor", value=big_endian)
    program.upload(id="tr", kind="tensor", value=transposed)
    be, tr = program.instructions
    assert program.blobs[be["blob"]] == np.arange(6, dtype="<i4").tobytes()
    assert tr["shape"] == [3, 2]
    assert program.blobs[tr["blob"]] == np.ascontiguousarray(transposed).tobytes()
    scalar = Program()
    mutable = np.zeros((), np.int64)
    scalar.upload(id="s", kind="tensor", value=mutable)
    mutable[...] = 7
    (s,) = scalar.instructions
    assert s["shape"] == [] and scalar.blobs[s["blob"]] == bytes(8)


def test_tensor_upload_from_raw_bytes_and_dlpack():
    program = Program()
    raw = np.arange(4, dtype=np.int16).tobytes()
    program.upload(id="raw", kind="tensor", value=bytearray(raw), dtype="int16", shape=(2, 2))
    program.upload(id="empty", kind="tensor", value=b"", dtype="float32", shape=[0, 5])

    class Exporter:
        def __init__(self, array):
            self._array = array

        def __dlpack__(self, **kwargs):
            return self._array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self._array.__dlpack_device__()

    program.upload(id="dl", kind="tensor", value=Exporter(np.arange(3, dtype=np.float64)))
    raw_i, empty_i, dl_i = program.instructions
    assert (raw_i["dtype"], raw_i["shape"]) == ("int16", [2, 2])
    assert program.blobs[raw_i["blob"]] == raw
    assert empty_i["shape"] == [0, 5]
    assert (dl_i["dtype"], dl_i["shape"]) == ("float64", [3])

    class Broken:
        def __dlpack__(self, **kwargs):
            raise BufferError("device memory")

    with pytest.raises(TypeError, match="DLPack"):
        program.upload(kind="tensor", value=Broken())


def test_torch_tensor_upload():
    torch = pytest.importorskip("torch")
    program = Program()
    program.upload(id="t", kind="tensor", value=torch.arange(6, dtype=torch.bfloat16).view(2, 3).T)
    (instruction,) = program.instructions
    assert (instruction["dtype"], instruction["shape"]) == ("bfloat16", [3, 2])
    expected = np.arange(6, dtype=ml_dtypes.bfloat16).reshape(2, 3).T.tobytes()
    assert program.blobs[instruction["blob"]] == expected


def test_bytes_and_library_uploads_share_blobs():
    program = Program()
    program.upload(kind="bytes", value=b"same")
    program.upload(kind="library", value=memoryview(b"same"))
    program.upload(kind="bytes", value=np.frombuffer(b"other", np.uint8))
    first, second, third = program.instructions
    assert first["blob"] == second["blob"] == sha256_hex(b"same")
    assert set(program.blobs) == {sha256_hex(b"same"), sha256_hex(b"other")}
    with pytest.raises(TypeError):
        program.blobs[sha256_hex(b"x")] = b"x"  # type: ignore[index]


def test_upload_file_normalizes_and_checks_conflicts():
    program = Program()
    reg = program.upload_file(blob=b"x", path="./inputs//a.bin")
    assert program.instructions[0] == {
        "op": "upload",
        "id": reg.id,
        "kind": "file",
        "blob": sha256_hex(b"x"),
        "path": "inputs/a.bin",
    }
    with pytest.raises(ValueError):
        program.upload_file(blob=b"y", path="inputs/a.bin")
    with pytest.raises(ValueError):
        program.upload_file(blob=b"y", path="inputs/a.bin/deeper")
    with pytest.raises(ValueError):
        program.upload_file(blob=b"y", path="/etc/passwd")
    with pytest.raises(TypeError):
        program.upload_file(blob="text", path="t.txt")


def test_upload_folder(tmp_path):
    (tmp_path / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "b.txt").write_bytes(b"b")
    (tmp_path / ".hidden").write_bytes(b"h")
    (tmp_path / "sub" / "a.txt").write_bytes(b"a")
    (tmp_path / "sub" / "deep" / "z").write_bytes(b"z")
    program = Program()
    assert program.upload_folder(tmp_path, path="in") is None
    paths = [(i["id"], i["path"]) for i in program.instructions]
    assert paths == [
        ("upload_0", "in/.hidden"),
        ("upload_1", "in/b.txt"),
        ("upload_2", "in/sub/a.txt"),
        ("upload_3", "in/sub/deep/z"),
    ]
    assert program.blobs[program.instructions[3]["blob"]] == b"z"
    with pytest.raises(ValueError):
        program.upload_folder(tmp_path / "sub", path="in/sub")
    assert len(program.instructions) == 4
    empty = Program()
    empty.upload_folder(tmp_path / "empty", path="x")
    assert empty.instructions == []


def test_upload_folder_refuses_links_and_special_files(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_bytes(b"f")
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(ValueError, match="symbolic link"):
        Program().upload_folder(tmp_path / "link", path="x")
    os.symlink(tmp_path / "real" / "f", tmp_path / "real" / "g")
    with pytest.raises(ValueError, match="not a regular file"):
        Program().upload_folder(tmp_path / "real", path="x")
    os.unlink(tmp_path / "real" / "g")
    os.mkfifo(tmp_path / "real" / "fifo")
    program = Program()
    with pytest.raises(ValueError, match="not a regular file"):
        program.upload_folder(tmp_path / "real", path="x")
    assert program.instructions == []


def test_get_function_cpu_only_flag():
    program = Program()
    module = program.upload(kind="module", source="")
    program.get_function(id="a", module=module, name="f")
    program.get_function(id="b", module=module, name="f", cpu_only=True)
    a, b = program.instructions[1:]
    assert "cpu_only" not in a and b["cpu_only"] is True
    with pytest.raises(ValueError):
        program.get_function(module=module, name="")
    with pytest.raises(TypeError):
        program.get_function(module=module, name="f", cpu_only=1)  # type: ignore[arg-type]


def test_run_arguments():
    program = Program()
    fn = program.get_function(module=program.upload(kind="module", source=""), name="f")
    spec = {"shape": [4], "dtype": "float32"}
    program.run(id="r", fn=fn, args=[fn, spec, (1, 2), None, 2.5, "s", {"$ref": fn.id}])
    spec["shape"].append(5)  # arguments are copied when run() is called
    assert program.instructions[-1]["args"] == [
        {"$ref": fn.id},
        {"shape": [4], "dtype": "float32"},
        [1, 2],
        None,
        2.5,
        "s",
        {"$ref": fn.id},
    ]
    program.run(fn=fn)
    assert program.instructions[-1]["args"] == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([[Register("x")]], TypeError),
        ([{"nested": Register("x")}], TypeError),
        ([float("nan")], ValueError),
        ([np.float32(1.0)], TypeError),
        ([b"bytes"], TypeError),
        ("not a list", TypeError),
    ],
)
def test_run_argument_validation(args, error):
    program = Program()
    fn = program.get_function(module=program.upload(kind="module", source=""), name="f")
    with pytest.raises(error):
        program.run(fn=fn, args=args)


def test_returns():
    program = Program()
    path = program.upload_file(blob=b"", path="out/x")
    program.return_(key="v", value=path)
    program.return_file(key="f", path="./out//x")
    program.return_folder(key="d", path=path)
    assert program.instructions[1:] == [
        {"op": "return", "key": "v", "value": {"$ref": path.id}},
        {"op": "return", "key": "f", "kind": "file", "path": "out/x"},
        {"op": "return", "key": "d", "kind": "folder", "path": {"$ref": path.id}},
    ]
    with pytest.raises(ValueError):
        program.return_file(key="g", path="a/../b")


def test_instructions_is_a_copy():
    program = guide_program()
    copy = program.instructions
    copy[2]["shape"].append(1)
    copy.clear()
    assert program.instructions[2]["shape"] == [256]


def request_parts(program: Program, *args, **kwargs):
    content_type, body = program.to_request(*args, **kwargs)
    parts = decode_multipart(content_type, body)
    return loads_json(parts[0].data), parts


def test_to_request_sends_the_program_then_the_selected_blobs():
    program = guide_program()
    program.upload(id="extra", kind="bytes", value=b"extra")
    document, parts = request_parts(program)
    assert parts[0].name == "program" and parts[0].content_type == "application/json"
    assert document == {"instructions": program.instructions}
    assert [(p.name, p.data) for p in parts[1:]] == [
        (f"blob:{digest}", data) for digest, data in program.blobs.items()
    ]
    assert all(p.content_type == "application/octet-stream" for p in parts[1:])
    _, parts = request_parts(program, set())
    assert len(parts) == 1
    _, parts = request_parts(program, {sha256_hex(b"extra")})
    assert [p.name for p in parts[1:]] == [f"blob:{sha256_hex(b'extra')}"]
    with pytest.raises(ValueError):
        program.to_request({sha256_hex(b"absent")})


def test_to_request_options():
    program = guide_program()
    document, _ = request_parts(program, set(), timeout_seconds=120, output_limit_bytes=0)
    assert document["options"] == {"timeout_seconds": 120, "output_limit_bytes": 0}
    for bad in ({"timeout_seconds": 0}, {"timeout_seconds": float("inf")}):
        with pytest.raises(ValueError):
            program.to_request(**bad)
    for bad in ({"timeout_seconds": True}, {"output_limit_bytes": 1.5}):
        with pytest.raises(TypeError):
            program.to_request(**bad)
    with pytest.raises(ValueError):
        program.to_request(output_limit_bytes=-1)
    document, _ = request_parts(program, set(), gpu_count=8)
    assert document["options"] == {"gpu_count": 8}
    for count in (0, 9):
        with pytest.raises(ValueError, match="between 1 and 8"):
            program.to_request(gpu_count=count)
    for count in (True, 2.0, "2"):
        with pytest.raises(TypeError):
            program.to_request(gpu_count=count)


def test_empty_program_cannot_be_sent():
    with pytest.raises(ValueError, match="at least one instruction"):
        Program().to_request()
