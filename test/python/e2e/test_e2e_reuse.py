"""Reused workers, checked (--programs-per-worker N, --reuse-check state, the default).

A worker that runs several programs of one tenant takes the next one only when the last
left its state as it was before the first: no thread, open descriptor, environment
variable, imported module or child process more or less. Each test marks the worker
(an attribute on builtins, which the check does not look at), runs a program that
changes one thing, and asks whether the next program runs in the same worker.
``--reuse-check none`` keeps the old full trust: the worker is reused whatever changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from e2e.harness import Server
from e2e.programs import call

from kcoral import Program

MARK = """
import builtins

def mark(*uploads):
    seen = getattr(builtins, "kcoral_test_mark", 0)
    builtins.kcoral_test_mark = seen + 1
    return seen


def mark_returning_bytes(times=10_000):
    return [mark(), b"returned" * times]


def mark_and_fail():
    mark()
    raise ValueError("as expected")
"""

# Each leaves one thing of the worker's state changed, under the label the server counts
# its retirements by.
CHANGES = {
    "environment": "import os\n\ndef change():\n    os.environ['KCORAL_TEST_LEFT'] = 'secret value'\n",
    "threads": (
        "import threading, time\n\n"
        "def change():\n    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    ),
    "descriptors": (
        "import builtins\n\n"
        "def change():\n    builtins.kcoral_test_file = open('/dev/null')\n"
    ),
    "imported modules": "def change():\n    import colorsys\n",
}


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("events")


@pytest.fixture(scope="module")
def checked(start_module_server, log_dir) -> Server:
    return start_module_server("--num-workers", "1", "--programs-per-worker", "100", "--log-dir", str(log_dir))


def logged(log_dir: Path, request_id: str) -> dict:
    """The event log's record of one request."""
    events = [json.loads(line) for line in (log_dir / "events.jsonl").read_text().splitlines()]
    [event] = [event for event in events if event["request_id"] == request_id]
    return event


def marks(server: Server, *uploads: bytes | np.ndarray) -> int:
    """The worker's mark before this program's (0: a fresh worker)."""
    program = Program()
    module = program.upload(id="m", kind="module", source=MARK)
    function = program.get_function(id="f", module=module, name="mark")
    args = [program.upload(kind="bytes", value=value) if isinstance(value, bytes)
            else program.upload(kind="tensor", value=value) for value in uploads]
    program.return_(key="out", value=program.run(id="r", fn=function, args=args))
    return server.execute(program).raise_for_error()["out"]


def test_programs_that_change_nothing_share_the_worker(checked):
    first = marks(checked)
    assert marks(checked) == first + 1
    # Uploads come in memory files of their own, closed with the program. A tensor of bytes
    # is always aligned (a copy-on-write mapping: mmap), bfloat16 needs ml_dtypes: neither
    # takes a module the worker had not.
    uploads = (b"x" * 100_000, np.arange(4096, dtype=np.float32), np.arange(256, dtype=np.uint8),
               np.ones(8, dtype=ml_dtypes.bfloat16))
    assert marks(checked, *uploads) == first + 2
    # So do returned values, which go back in a memory file the worker sends.
    seen, returned = checked.execute(call(MARK, "mark_returning_bytes")).raise_for_error()["out"]
    assert seen == first + 3 and returned == b"returned" * 10_000
    assert marks(checked) == first + 4
    # Large ones too: returned as uploaded (the front's own copy goes back), or made anew.
    payload = bytes(range(256)) * 8192 + b"tail"
    program = Program()
    program.return_(key="as_uploaded", value=program.upload(id="b", kind="bytes", value=payload))
    assert checked.execute(program).raise_for_error()["as_uploaded"] == payload
    assert marks(checked) == first + 5
    program = call(MARK, "mark_returning_bytes", 500_000)  # 4 MB of new bytes, hashed
    program.return_(key="large", value=program.upload(id="b", kind="bytes", value=payload))
    result = checked.execute(program).raise_for_error()
    assert result["out"] == [first + 6, b"returned" * 500_000] and result["large"] == payload
    assert marks(checked) == first + 7
    # A program that fails leaves its worker as it found it too (its traceback is formatted
    # with a module the worker had imported before its first program).
    failed = checked.execute(call(MARK, "mark_and_fail"))
    assert not failed.completed and "as expected" in failed.error["message"]
    assert marks(checked) == first + 9
    assert "retired as soon as one leaves its threads" in checked.stderr_text()


@pytest.mark.parametrize("changed", sorted(CHANGES))
def test_a_program_that_changes_the_worker_retires_it(checked, changed):
    before = checked.metric(f'kcoral_workers_retired_total{{changed="{changed}"}}')
    marks(checked)
    assert marks(checked) >= 1  # the same worker, so far
    checked.execute(call(CHANGES[changed], "change")).raise_for_error()
    assert marks(checked) == 0, f"a program that changed {changed} left its worker to the next"
    assert checked.metric(f'kcoral_workers_retired_total{{changed="{changed}"}}') >= before + 1


def test_the_event_log_says_why_and_names_no_value_of_the_program(checked, log_dir):
    request_id = checked.execute(call(CHANGES["environment"], "change")).raise_for_error().request_id
    event = logged(log_dir, request_id)
    assert event["worker_retired"] == "environment: KCORAL_TEST_LEFT set or changed"
    assert "secret value" not in (log_dir / "events.jsonl").read_text()
    assert "secret value" not in checked.get("/metrics").text
    assert "secret value" not in checked.stderr_text()


# sys.modules as long as before, with one name changed: the fingerprint of the names, not
# their count, finds it.
RENAMED_MODULE = "import sys\n\ndef change():\n    sys.modules['kcoral_json'] = sys.modules.pop('json')\n"


def test_a_module_renamed_in_sys_modules_retires_the_worker_and_is_named(checked, log_dir):
    marks(checked)
    request_id = checked.execute(call(RENAMED_MODULE, "change")).raise_for_error().request_id
    assert marks(checked) == 0
    event = logged(log_dir, request_id)
    assert event["worker_retired"] == "imported modules: +kcoral_json", event


# The worker's standard input, on the same number, now a pipe's end: the same descriptors
# by number, another file.
REPLACED_DESCRIPTOR = (
    "import os\n\ndef change():\n    read, write = os.pipe()\n    os.dup2(read, 0)\n"
    "    os.close(read)\n    os.close(write)\n"
)


def test_a_descriptor_that_refers_to_another_file_retires_the_worker(checked, log_dir):
    marks(checked)
    request_id = checked.execute(call(REPLACED_DESCRIPTOR, "change")).raise_for_error().request_id
    assert marks(checked) == 0
    event = logged(log_dir, request_id)
    assert event["worker_retired"].startswith("descriptors: 0 now refers to pipe:["), event


NAMED_THREAD = """
import ctypes, threading, time

def change():
    named = threading.Event()

    def run():
        ctypes.CDLL(None).prctl(15, b"kc-left-behind", 0, 0, 0)  # PR_SET_NAME
        named.set()
        time.sleep(600)

    threading.Thread(target=run, daemon=True).start()
    named.wait()
"""


def test_the_reason_names_a_thread_left_running(checked, log_dir):
    request_id = checked.execute(call(NAMED_THREAD, "change")).raise_for_error().request_id
    event = logged(log_dir, request_id)
    assert event["worker_retired"].startswith("threads: "), event
    assert event["worker_retired"].endswith(" (new: kc-left-behind)"), event


def test_a_thread_named_with_bytes_that_are_not_text_is_named_safely(checked, log_dir):
    # The name is the program's: bytes that are not UTF-8, a newline, a quote.
    source = NAMED_THREAD.replace('b"kc-left-behind"', 'b"kc\\xff\\xfe\\n\\"x"')
    request_id = checked.execute(call(source, "change")).raise_for_error().request_id
    assert marks(checked) == 0
    event = logged(log_dir, request_id)
    assert event["worker_retired"].endswith(' (new: kc???"x)'), event
    assert checked.get("/health").status_code == 200


def test_without_the_check_a_changed_worker_is_reused(start_server):
    server = start_server("--num-workers", "1", "--programs-per-worker", "100", "--reuse-check", "none")
    assert "--reuse-check none" in server.stderr_text()
    marks(server)
    server.execute(call(CHANGES["environment"], "change")).raise_for_error()
    assert marks(server) >= 1
