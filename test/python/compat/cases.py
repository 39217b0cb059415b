"""The compatibility suite's cases: each program of programs.py with what is expected of it.

``expect`` holds for every client/server pair; a :class:`Difference` where the servers
answer differently (the public protocol says we differ on purpose, or the reference breaks the
protocol); ``bugs`` where our side is knowingly wrong or limited. Standard library and
numpy only: the reference venv's Python imports this too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sources import CUDA_SOURCE  # type: ignore[import-not-found]
from programs import (  # type: ignore[import-not-found]
    BIG_INT_ARGS, LARGE_DIGEST, MADE_DIGEST, UNICODE_KEY, Case, Context, Difference,
    trivial,
    scalars,
    containers,
    big_ints,
    literal_args,
    literal_kinds,
    big_int_args,
    multiple_returns,
    bytes_upload,
    binary_values,
    subclass_values,
    numpy_scalars,
    framing_bytes,
    large_bytes,
    get_function_non_callable,
    get_function_on_bytes,
    tensor_dtypes,
    tensor_zero_dim,
    unicode_names,
    chained_callable,
    fresh_namespaces,
    cpu_only_run,
    no_returns,
    file_roundtrip,
    returned_path_register,
    folder_roundtrip,
    empty_folders,
    parse_syntax_error,
    parse_top_level_error,
    parse_missing_name,
    postponed_annotations,
    runtime_exception,
    runtime_custom_exception,
    runtime_key_error,
    correctness_assert,
    system_exit,
    worker_exit,
    run_not_callable,
    serialization_nan,
    serialization_infinity_nested,
    serialization_object,
    serialization_int_keys,
    serialization_set,
    serialization_function,
    serialization_keeps_parts_contiguous,
    return_symlink,
    return_missing_file,
    return_file_is_folder,
    stdout_stderr,
    output_truncated,
    output_exactly_at_limit,
    output_capture_off,
    output_invalid_utf8,
    output_control_characters,
    output_cut_inside_character,
    output_kept_on_failure,
    cache_miss,
    numpy_return,
    tensor_upload,
    library_upload,
    cuda_module,
    execution_timeout,
)

WORKER_EXITED = "worker exited while executing the instruction"
TENSOR_ON_CPU = (
    "becomes a torch tensor on the worker's GPU. On a CPU server KCoral answers "
    "`unavailable`; we may instead give a CPU tensor"
)
GPU_LOAD = (
    '"load": {"request_capacity": 8, "requests_in_progress": 0, "requests_waiting": 0}; we add '
    "`gpus_in_progress` and `gpus_waiting` beside these three (programs counted by their "
    "`gpu_count`, docs/protocol.md), which keep their meaning"
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
         expect={"status": "ok", "gpu_count": 0, "target": {}},
         difference=Difference(
             GPU_LOAD, ("load_keys",),
             {"load_keys": ["gpus_in_progress", "gpus_waiting", "request_capacity",
                            "requests_in_progress", "requests_waiting"]},
             {"load_keys": ["request_capacity", "requests_in_progress", "requests_waiting"]})),
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
             "uploaded module); the public protocol: 'bool / int / float / str | {\"type\":"
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
    Case("postponed_annotations", postponed_annotations, expect=_completed(r=[
        42, *[{"object": {"x": "Undefined", "return": "Undefined"}}] * 2,
        {"object": {"a": "T.Buffer((N,), 'float32')", "return": "None"}},
        {"object": {"return": "Node"}}])),
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
             "not catch, so its worker exits; the public protocol: " + RUNTIME_KIND,
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
