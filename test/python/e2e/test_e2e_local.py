"""kcoral.run_local runs a program in this process and answers as the server does.

The same programs (values of several types, a file, captured output, a failure) go to
the server and to ``run_local``; everything but the request id and the timings agrees.
"""

from __future__ import annotations

import os

import numpy as np
from kcoral import Program, ReturnedFile, run_local

from e2e.programs import call

SOURCE = r'''
import os, sys

def compute(scale, tensor, blob):
    print("computing", scale)
    print("to stderr", file=sys.stderr)
    os.makedirs("out", exist_ok=True)
    open("out/report.txt", "w").write(f"scale={scale}")
    return {"scaled": tensor * scale, "blob": blob[::-1], "facts": [scale, None, "text", 2**70],
            "cwd_entries": sorted(os.listdir("."))}

def fail():
    raise ValueError("local and remote alike")
'''


def build() -> Program:
    program = Program()
    module = program.upload(id="m", kind="module", source=SOURCE)
    compute = program.get_function(id="compute", module=module, name="compute")
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = program.upload(id="t", kind="tensor", value=values)
    blob = program.upload(id="b", kind="bytes", value=b"abc")
    value = program.run(id="r", fn=compute, args=[3, tensor, blob])
    program.return_(key="value", value=value)
    program.return_file(key="report", path="out/report.txt")
    return program


def comparable(result) -> dict:
    fields = vars(result).copy()
    for timing in ("request_id", "queue_ms", "elapsed_ms", "lease_wait_ms", "lease_held_ms"):
        fields.pop(timing)
    return fields


def test_run_local_matches_the_server(server, capsys):
    cwd = os.getcwd()
    # pytest's own capture swaps sys.stdout for its file; the executor captures at the
    # descriptor level, which print() then bypasses.
    with capsys.disabled():
        local = run_local(build())
    remote = server.execute(build())
    assert os.getcwd() == cwd
    assert local.completed and remote.completed, (local.error, remote.error)
    for result in (local, remote):
        np.testing.assert_array_equal(result["value"].pop("scaled"),
                                      np.arange(6, dtype=np.float32).reshape(2, 3) * 3)
    assert comparable(local) == comparable(remote)
    assert remote["value"] == {"blob": b"cba", "facts": [3, None, "text", 2**70],
                               "cwd_entries": ["out"]}
    assert remote["report"] == ReturnedFile(b"scale=3")
    assert remote.stdout == "computing 3\n" and remote.stderr == "to stderr\n"


def test_run_local_failure_matches_the_server(server):
    local, remote = run_local(call(SOURCE, "fail")), server.execute(call(SOURCE, "fail"))
    assert local.status == remote.status == "FAILED"
    local.error.pop("traceback")
    remote_traceback = remote.error.pop("traceback")
    assert local.error == remote.error
    assert "local and remote alike" in remote_traceback


def test_a_request_is_judged_the_same_locally_and_by_the_server(server):
    # One pipeline (libkcoral's admit_execute and answer_execute) behind both: a tensor
    # whose blob does not hold shape x itemsize bytes is refused by each, in the same words.
    import json

    from kcoral import _native

    program = Program()
    tensor = program.upload(kind="tensor", value=np.zeros(2, dtype=np.float32))
    program.return_(key="t", value=tensor)
    content_type, body = program.to_request()
    body = body.replace(b'"shape":[2]', b'"shape":[3]')
    local_status, _, local_body = _native.execute(content_type, body)
    remote = server.post(content_type, body)
    assert local_status == remote.status_code == 400
    local_error, remote_error = json.loads(local_body)["error"], remote.json()["error"]
    assert local_error == remote_error
    assert "declares 12 bytes" in local_error["message"]
