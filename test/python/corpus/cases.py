"""Malformed requests to kcoral-server, as data: what is sent and what must come back.

Each :class:`Case` is one raw HTTP request (method, path, Content-Type, body bytes) with
the exact status, error kind and a case-specific fragment of the error message the server
must answer with (docs/protocol.md, "Errors outside a program"). Bodies are built here by hand,
byte for byte, rather than by the client package, so that nothing in the client's own
checks can hide what the server does with them. The corpus runs against a server started
with ``--max-request-bytes`` = :data:`MAX_REQUEST_BYTES`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

BOUNDARY = "corpus-7f3a9c"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"
MAX_REQUEST_BYTES = 64 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    content_type: str | None
    body: bytes
    status: int
    kind: str
    message: str  # a fragment the error message must contain
    method: str = "POST"
    path: str = "/execute"
    bug: str | None = None  # "BUG: ..." when the server is known to answer otherwise
    # False where the server is known not to echo a sent X-Request-ID (a BUG that
    # e2e/test_e2e_http.py shows); the header must still equal the body's id.
    echoes_request_id: bool = True


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- building blocks --------------------------------------------------------------------


def part(name: str | None, data: bytes, content_type: str | None = "application/json",
         extra: str = "") -> bytes:
    """One part: its header block (Content-Disposition, Content-Type, extra lines) and data."""
    lines = []
    if name is not None:
        lines.append(f'Content-Disposition: form-data; name="{name}"')
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def multipart(*parts: bytes, boundary: str = BOUNDARY, end: bytes = b"--\r\n") -> bytes:
    delimiter = f"--{boundary}".encode()
    body = b"".join(delimiter + b"\r\n" + p + b"\r\n" for p in parts)
    return body + delimiter + end


def dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def body_of(program: Any, *blobs: bytes, raw: bytes | None = None) -> bytes:
    """A request: the program (a document, or ``raw`` JSON bytes) and blob parts."""
    data = raw if raw is not None else dumps(program)
    return multipart(part("program", data),
                     *(part(f"blob:{sha(b)}", b, "application/octet-stream") for b in blobs))


MODULE = {"op": "upload", "id": "m", "kind": "module", "source": "def f(*a):\n    return len(a)\n"}
GET = {"op": "get_function", "id": "f", "module": {"$ref": "m"}, "name": "f"}
RUN = {"op": "run", "id": "r", "fn": {"$ref": "f"}, "args": []}
RETURN = {"op": "return", "key": "out", "value": {"$ref": "r"}}
VALID = [MODULE, GET, RUN, RETURN]  # returns {"out": 0}

DATA = b"corpus blob\n"
BYTES = {"op": "upload", "id": "b", "kind": "bytes", "blob": sha(DATA)}
FILE = {"op": "upload", "kind": "file", "blob": sha(DATA), "path": "data/in.txt"}
TENSOR_DATA = bytes(range(16))  # four float32 / int32 items
TENSOR = {"op": "upload", "id": "t", "kind": "tensor", "blob": sha(TENSOR_DATA),
          "dtype": "float32", "shape": [4]}
RETURN_FILE = {"op": "return", "key": "file", "kind": "file", "path": "data/in.txt"}


def program(*instructions: dict[str, Any], **options: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"instructions": list(instructions)}
    if options:
        document["options"] = options
    return document


def with_(instruction: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of ``instruction``; a change to ``...`` removes the field."""
    out = dict(instruction)
    for key, value in changes.items():
        if value is ...:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def valid_body() -> tuple[str, bytes]:
    """A request every server must complete with ``{"out": 0}``."""
    return MULTIPART, body_of(program(*VALID))


def _json(name: str, document: Any = None, message: str = "", *blobs: bytes,
          raw: bytes | None = None, bug: str | None = None) -> Case:
    """A multipart-correct request whose program JSON is wrong: 400 parse."""
    return Case(name, MULTIPART, body_of(document, *blobs, raw=raw), 400, "parse", message, bug=bug)


def _framing(name: str, body: bytes, message: str, content_type: str | None = MULTIPART) -> Case:
    return Case(name, content_type, body, 400, "parse", message)


VALID_JSON = dumps(program(*VALID))
SHAPE_MESSAGE = "'shape' must be an array of integers"
DEEP = 70  # past the server's nesting bound of 64

CASES: list[Case] = [
    # -- HTTP routing ---------------------------------------------------------------------
    Case("get_execute", None, b"", 405, "method_not_allowed", "accepts POST only", method="GET"),
    Case("put_execute", MULTIPART, body_of(program(*VALID)), 405, "method_not_allowed",
         "accepts POST only", method="PUT"),
    Case("post_health", "application/json", b"{}", 405, "method_not_allowed", "accepts GET only",
         path="/health"),
    Case("delete_metrics", None, b"", 405, "method_not_allowed", "accepts GET only",
         method="DELETE", path="/metrics"),
    Case("unknown_path", MULTIPART, body_of(program(*VALID)), 404, "not_found",
         "no endpoint /execute2", path="/execute2"),
    Case("root_path", None, b"", 404, "not_found", "no endpoint /", method="GET", path="/"),
    Case("oversize_body", MULTIPART,
         body_of(program(with_(MODULE, source="#" + "x" * MAX_REQUEST_BYTES), GET, RUN, RETURN)),
         413, "request_too_large", f"limit of {MAX_REQUEST_BYTES} bytes", echoes_request_id=False),
    # -- multipart framing ----------------------------------------------------------------
    _framing("no_content_type", body_of(program(*VALID)), "must be multipart/form-data", None),
    _framing("json_content_type", VALID_JSON, "must be multipart/form-data", "application/json"),
    _framing("form_urlencoded", b"program=%7B%7D", "must be multipart/form-data",
             "application/x-www-form-urlencoded"),
    _framing("no_boundary", body_of(program(*VALID)), "no valid boundary", "multipart/form-data"),
    _framing("empty_boundary", body_of(program(*VALID)), "no valid boundary",
             "multipart/form-data; boundary="),
    _framing("other_boundary", body_of(program(*VALID)), "does not start with its boundary",
             "multipart/form-data; boundary=something-else"),
    _framing("empty_body", b"", "does not start with its boundary"),
    _framing("preamble", b"preamble\r\n" + body_of(program(*VALID)),
             "does not start with its boundary"),
    _framing("missing_closing_boundary",
             f"--{BOUNDARY}\r\n".encode() + part("program", VALID_JSON) + b"\r\n",
             "without its closing boundary"),
    _framing("truncated_closing_boundary", body_of(program(*VALID))[:-6],
             "without its closing boundary"),
    _framing("no_parts", f"--{BOUNDARY}--\r\n".encode(), "has no parts"),
    _framing("garbage_after_close", body_of(program(*VALID)) + b"trailing garbage",
             "after the closing multipart boundary"),
    _framing("boundary_without_crlf", f"--{BOUNDARY}XX".encode() + part("program", VALID_JSON)
             + f"\r\n--{BOUNDARY}--\r\n".encode(), "not followed by CRLF"),
    _framing("part_without_headers", multipart(b"\r\n" + VALID_JSON),
             "exactly one Content-Disposition"),
    _framing("part_without_disposition", multipart(part(None, VALID_JSON)),
             "exactly one Content-Disposition"),
    _framing("part_with_two_dispositions",
             multipart(part("program", VALID_JSON,
                            extra='Content-Disposition: form-data; name="x"')),
             "exactly one Content-Disposition"),
    _framing("part_disposition_attachment",
             multipart(b'Content-Disposition: attachment; name="program"\r\n'
                       b"Content-Type: application/json\r\n\r\n" + VALID_JSON),
             "Content-Disposition: form-data"),
    _framing("part_without_name",
             multipart(b"Content-Disposition: form-data\r\nContent-Type: application/json\r\n\r\n"
                       + VALID_JSON), "exactly one non-empty name"),
    _framing("part_with_empty_name", multipart(part("", VALID_JSON)), "exactly one non-empty name"),
    _framing("part_without_content_type", multipart(part("program", VALID_JSON, None)),
             "needs exactly one Content-Type"),
    _framing("part_base64_encoded",
             multipart(part("program", VALID_JSON, extra="Content-Transfer-Encoding: base64")),
             "encoded multipart parts"),
    _framing("part_header_without_colon",
             multipart(part("program", VALID_JSON, extra="this is not a header")),
             "malformed multipart part header"),
    _framing("part_headers_unterminated", f"--{BOUNDARY}\r\n".encode()
             + b'Content-Disposition: form-data; name="program"\r\n' + b"X" * 9000,
             "part headers are missing or longer"),
    _framing("unquoted_parameter_unclosed",
             multipart(b'Content-Disposition: form-data; name="program\r\n'
                       b"Content-Type: application/json\r\n\r\n" + VALID_JSON),
             "quoted header parameter is not closed"),
    # -- parts ----------------------------------------------------------------------------
    _framing("missing_program_part",
             multipart(part(f"blob:{sha(DATA)}", DATA, "application/octet-stream")),
             "no 'program' part"),
    _framing("two_program_parts",
             multipart(part("program", VALID_JSON), part("program", VALID_JSON)),
             "two 'program' parts"),
    _framing("program_part_text_plain", multipart(part("program", VALID_JSON, "text/plain")),
             "must be application/json"),
    _framing("unknown_part_name", multipart(part("program", VALID_JSON), part("extra", b"{}")),
             "unexpected multipart part 'extra'"),
    _framing("blob_name_uppercase",
             multipart(part("program", dumps(program(BYTES))),
                       part(f"blob:{sha(DATA).upper()}", DATA, "application/octet-stream")),
             "malformed blob part name"),
    _framing("blob_name_short",
             multipart(part("program", dumps(program(BYTES))),
                       part(f"blob:{sha(DATA)[:63]}", DATA, "application/octet-stream")),
             "malformed blob part name"),
    _framing("blob_name_empty_digest",
             multipart(part("program", dumps(program(BYTES))),
                       part("blob:", DATA, "application/octet-stream")),
             "malformed blob part name"),
    _framing("duplicate_blob_part",
             multipart(part("program", dumps(program(BYTES))),
                       part(f"blob:{sha(DATA)}", DATA, "application/octet-stream"),
                       part(f"blob:{sha(DATA)}", DATA, "application/octet-stream")),
             "two parts for blob"),
    _framing("blob_wrong_content_type",
             multipart(part("program", dumps(program(BYTES))),
                       part(f"blob:{sha(DATA)}", DATA, "text/plain")),
             "must be application/octet-stream"),
    _framing("blob_hash_mismatch",
             multipart(part("program", dumps(program(BYTES))),
                       part(f"blob:{sha(DATA)}", DATA + b"!", "application/octet-stream")),
             "does not match its content"),
    _json("blob_not_referenced", program(*VALID), "is not referenced by any instruction", DATA),
    _json("tensor_blob_length_mismatch", program(with_(TENSOR, shape=[5])), "declares 20 bytes",
          TENSOR_DATA),
    _json("tensor_blob_length_mismatch_dtype", program(with_(TENSOR, dtype="float64")),
          "declares 32 bytes", TENSOR_DATA),
    # -- JSON -----------------------------------------------------------------------------
    _json("json_syntax_error", raw=b'{"instructions": [', message="malformed JSON"),
    _json("json_empty", raw=b"", message="malformed JSON"),
    _json("json_trailing_content", raw=VALID_JSON + b" {}", message="malformed JSON"),
    _json("json_single_quotes", raw=VALID_JSON.replace(b'"op"', b"'op'"), message="malformed JSON"),
    _json("json_not_an_object", raw=b"[]", message="must be a JSON object"),
    _json("duplicate_key_top_level", raw=VALID_JSON[:-1] + b',"instructions":[]}',
          message="duplicate JSON key 'instructions'"),
    _json("duplicate_key_in_instruction", raw=dumps(program(*VALID)).replace(
        b'"op":"run"', b'"op":"run","op":"run"'), message="duplicate JSON key 'op'"),
    _json("duplicate_key_in_literal_arg", raw=dumps(program(MODULE, GET, with_(
        RUN, args=[{"a": 1}]))).replace(b'{"a":1}', b'{"a":1,"a":2}'),
        message="duplicate JSON key 'a'"),
    _json("nan_timeout", raw=VALID_JSON[:-1] + b',"options":{"timeout_seconds":NaN}}',
          message="malformed JSON"),
    _json("infinity_timeout", raw=VALID_JSON[:-1] + b',"options":{"timeout_seconds":Infinity}}',
          message="malformed JSON"),
    _json("negative_infinity_arg", raw=dumps(program(MODULE, GET, with_(RUN, args=[0]))).replace(
        b'"args":[0]', b'"args":[-Infinity]'), message="malformed JSON"),
    _json("nan_arg", raw=dumps(program(MODULE, GET, with_(RUN, args=[0]))).replace(
        b'"args":[0]', b'"args":[NaN]'), message="malformed JSON"),
    _json("invalid_utf8", raw=dumps(program(*VALID)).replace(b"return len(a)", b"return \xff\xfe"),
          message="not valid UTF-8"),
    _json("overlong_utf8", raw=dumps(program(*VALID)).replace(b"return len(a)", b"return \xc0\xaf"),
          message="not valid UTF-8"),
    _json("too_deep", raw=dumps(program(MODULE, GET, with_(RUN, args=[0]))).replace(
        b'"args":[0]', b'"args":' + b"[" * DEEP + b"]" * DEEP), message="nested deeper than 64"),
    # -- the program's shape ---------------------------------------------------------------
    _json("missing_instructions", {"options": {}}, "missing the field 'instructions'"),
    _json("empty_instructions", program(), "'instructions' must be a non-empty array"),
    _json("instructions_object", {"instructions": {"0": MODULE}},
          "'instructions' must be a non-empty array"),
    _json("instruction_not_object", {"instructions": [MODULE, "get_function"]},
          "an instruction must be an object"),
    _json("unknown_field_top_level", {"instructions": VALID, "version": 1},
          "the program has the unknown field 'version'"),
    _json("unknown_field_options", program(*VALID, timeout_seconds=5, retries=2),
          "'options' has the unknown field 'retries'"),
    _json("options_not_object", {"instructions": VALID, "options": []},
          "'options' must be an object"),
    _json("unknown_field_module", program(with_(MODULE, lang="python"), GET, RUN, RETURN),
          "a module upload has the unknown field 'lang'"),
    _json("unknown_field_tensor", program(with_(TENSOR, strides=[1])),
          "a tensor upload has the unknown field 'strides'"),
    _json("unknown_field_bytes", program(with_(BYTES, path="x")),
          "a bytes upload has the unknown field 'path'"),
    _json("unknown_field_file", program(with_(FILE, mode=384)),
          "a file upload has the unknown field 'mode'"),
    _json("unknown_field_library", program({"op": "upload", "id": "l", "kind": "library",
                                            "blob": sha(DATA), "arch": "sm_90a"}),
          "a library upload has the unknown field 'arch'"),
    _json("unknown_field_get_function", program(MODULE, with_(GET, device="cpu")),
          "get_function has the unknown field 'device'"),
    _json("unknown_field_run", program(MODULE, GET, with_(RUN, kwargs={})),
          "run has the unknown field 'kwargs'"),
    _json("return_value_with_kind", program(*VALID[:3], with_(RETURN, kind="file")),
          "return has the unknown field 'value'"),
    _json("unknown_field_return", program(*VALID[:3], with_(RETURN, format="json")),
          "return has the unknown field 'format'"),
    _json("unknown_field_return_path", program(FILE, with_(RETURN_FILE, follow=True)),
          "return has the unknown field 'follow'"),
    _json("missing_module_source", program(with_(MODULE, source=...)),
          "a module upload is missing the field 'source'"),
    _json("missing_module_id", program(with_(MODULE, id=...)),
          "a module upload is missing the field 'id'"),
    _json("missing_tensor_shape", program(with_(TENSOR, shape=...)),
          "a tensor upload is missing the field 'shape'"),
    _json("missing_file_path", program(with_(FILE, path=...)),
          "a file upload is missing the field 'path'"),
    _json("missing_upload_kind", program(with_(MODULE, kind=...)), "upload 'kind' must be one of"),
    _json("missing_get_function_name", program(MODULE, with_(GET, name=...)),
          "get_function is missing the field 'name'"),
    _json("missing_run_fn", program(MODULE, GET, with_(RUN, fn=...)),
          "run is missing the field 'fn'"),
    _json("missing_run_id", program(MODULE, GET, with_(RUN, id=...)), "the field 'id' is missing"),
    _json("missing_return_key", program(*VALID[:3], with_(RETURN, key=...)),
          "return is missing the field 'key'"),
    _json("missing_return_value", program(*VALID[:3], with_(RETURN, value=...)),
          "return is missing the field 'value'"),
    _json("missing_op", program(with_(MODULE, op=...)), "the field 'op' must be one of"),
    # -- wrong types ----------------------------------------------------------------------
    _json("output_limit_bool", program(*VALID, output_limit_bytes=True),
          "'output_limit_bytes' must be an integer >= 0"),
    _json("output_limit_negative", program(*VALID, output_limit_bytes=-1),
          "'output_limit_bytes' must be an integer >= 0"),
    _json("output_limit_float", program(*VALID, output_limit_bytes=1.5),
          "'output_limit_bytes' must be an integer >= 0"),
    _json("output_limit_string", program(*VALID, output_limit_bytes="1024"),
          "'output_limit_bytes' must be an integer >= 0"),
    _json("timeout_string", program(*VALID, timeout_seconds="10"),
          "'timeout_seconds' must be a positive number"),
    _json("timeout_bool", program(*VALID, timeout_seconds=True),
          "'timeout_seconds' must be a positive number"),
    _json("timeout_zero", program(*VALID, timeout_seconds=0),
          "'timeout_seconds' must be a positive number"),
    _json("timeout_negative", program(*VALID, timeout_seconds=-5.5),
          "'timeout_seconds' must be a positive number"),
    _json("id_number", program(with_(MODULE, id=7)), "'id' must be a non-empty string"),
    _json("id_empty", program(with_(MODULE, id="")), "'id' must be a non-empty string"),
    _json("source_number", program(with_(MODULE, source=3)), "'source' must be a string"),
    _json("language_unknown", program(with_(MODULE, language="rust")),
          "'language' must be \"python\" or \"cuda\""),
    _json("cpu_only_string", program(MODULE, with_(GET, cpu_only="yes")),
          "'cpu_only' must be true or false"),
    _json("name_empty", program(MODULE, with_(GET, name="")), "'name' must be a non-empty string"),
    _json("args_object", program(MODULE, GET, with_(RUN, args={"x": 1})),
          "'args' must be an array"),
    _json("key_number", program(*VALID[:3], with_(RETURN, key=1)),
          "'key' must be a non-empty string"),
    _json("blob_not_hex", program(with_(BYTES, blob="not-a-digest")),
          "'blob' must be a lowercase hex SHA-256"),
    _json("blob_uppercase", program(with_(BYTES, blob=sha(DATA).upper())),
          "'blob' must be a lowercase hex SHA-256"),
    _json("unknown_op", program(with_(MODULE, op="compile")), "unknown op 'compile'"),
    _json("op_number", program(with_(MODULE, op=1)), "the field 'op' must be one of"),
    _json("unknown_upload_kind", program(with_(MODULE, kind="archive")),
          "upload 'kind' must be one of module, tensor, bytes, file, library, not 'archive'"),
    _json("return_kind_unknown", program(FILE, with_(RETURN_FILE, kind="directory")),
          "return 'kind' must be \"file\" or \"folder\""),
    _json("return_path_number", program(FILE, with_(RETURN_FILE, path=3)),
          "'path' must be a path string or"),
    # -- ids and references ----------------------------------------------------------------
    _json("duplicate_id", program(MODULE, with_(GET, id="m")), "duplicate instruction id 'm'"),
    _json("duplicate_id_file_upload", program(MODULE, with_(FILE, id="m")),
          "duplicate instruction id 'm'"),
    _json("duplicate_return_key", program(*VALID, with_(RETURN)), "duplicate return key 'out'"),
    _json("forward_reference", program(with_(GET, id="g", module={"$ref": "m"}), MODULE),
          "which is not the id of an earlier instruction"),
    _json("unknown_reference", program(MODULE, GET, with_(RUN, fn={"$ref": "nowhere"})),
          "references 'nowhere', which is not the id of an earlier instruction"),
    _json("self_reference", program(MODULE, GET, with_(RUN, args=[{"$ref": "r"}])),
          "references 'r', which is not the id of an earlier instruction"),
    _json("unknown_reference_in_args", program(MODULE, GET, with_(RUN, args=[{"$ref": "zz"}])),
          "an argument references 'zz'"),
    _json("reference_with_extra_key", program(MODULE, GET, with_(RUN, fn={"$ref": "f", "x": 1})),
          "'fn' must be {\"$ref\": \"<id>\"}"),
    _json("reference_not_string", program(MODULE, with_(GET, module={"$ref": 1})),
          "'module' must be {\"$ref\": \"<id>\"}"),
    _json("reference_as_string", program(*VALID[:3], with_(RETURN, value="r")),
          "'value' must be {\"$ref\": \"<id>\"}"),
    _json("return_value_unknown_reference", program(*VALID[:3], with_(RETURN, value={"$ref": "x"})),
          "'value' references 'x'"),
    _json("return_path_forward_reference",
          program(with_(RETURN_FILE, path={"$ref": "p"}), with_(FILE, id="p")),
          "'path' references 'p'"),
    # -- tensors ---------------------------------------------------------------------------
    _json("dtype_unknown", program(with_(TENSOR, dtype="complex64")), "unsupported tensor dtype"),
    _json("dtype_uint16", program(with_(TENSOR, dtype="uint16")), "unsupported tensor dtype"),
    _json("dtype_torch_name", program(with_(TENSOR, dtype="torch.float32")),
          "unsupported tensor dtype"),
    _json("dtype_number", program(with_(TENSOR, dtype=4)), "unsupported tensor dtype"),
    _json("shape_negative", program(with_(TENSOR, shape=[-4])), SHAPE_MESSAGE),
    _json("shape_float", program(with_(TENSOR, shape=[4.0])), SHAPE_MESSAGE),
    _json("shape_bool", program(with_(TENSOR, shape=[True])), SHAPE_MESSAGE),
    _json("shape_scalar", program(with_(TENSOR, shape=4)), SHAPE_MESSAGE),
    _json("shape_too_many_bytes", program(with_(TENSOR, shape=[1 << 30, 1 << 30])),
          "the tensor's shape describes more than"),
    # -- paths -----------------------------------------------------------------------------
    _json("path_dotdot", program(with_(FILE, path="../escape.txt")), "must not contain a '..'"),
    _json("path_inner_dotdot", program(with_(FILE, path="a/../../b")), "must not contain a '..'"),
    _json("path_absolute", program(with_(FILE, path="/etc/passwd")), "path must be relative"),
    _json("path_backslash", program(with_(FILE, path="a\\b.txt")), "not backslashes"),
    _json("path_nul", program(with_(FILE, path="a\u0000b")), "must not contain NUL"),
    _json("path_empty", program(with_(FILE, path="")), "path must be a non-empty string"),
    _json("path_only_dots", program(with_(FILE, path="././/")), "path must name a file or folder"),
    _json("path_component_too_long", program(with_(FILE, path="a/" + "x" * 256)),
          "component longer than 255 bytes"),
    _json("path_too_long", program(with_(FILE, path="/".join(["abcdefg"] * 520))),
          "longer than 4096 bytes"),
    _json("return_path_dotdot", program(FILE, with_(RETURN_FILE, path="data/../../x")),
          "must not contain a '..'"),
    _json("return_folder_absolute", program(FILE, with_(RETURN_FILE, kind="folder", path="/tmp")),
          "path must be relative"),
    _json("path_collision_same", program(FILE, with_(FILE)), "two file uploads share the path"),
    _json("path_collision_normalized", program(FILE, with_(FILE, path="./data//in.txt")),
          "two file uploads share the path 'data/in.txt'"),
    _json("path_collision_parent", program(FILE, with_(FILE, path="data/in.txt/inner")),
          "one would be a directory of the other"),
    _json("path_collision_child_first", program(with_(FILE, path="x/y/z"), with_(FILE, path="x/y")),
          "one would be a directory of the other"),
]
