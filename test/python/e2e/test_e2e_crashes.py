"""Workers that die or overrun: crashes, execution timeouts, and the server's recovery.

A worker that dies in the middle of an instruction (abort, segfault, _exit, SIGKILL)
fails the program with kind ``runtime`` and "worker exited while executing the
instruction", attributed to that instruction. A program past its deadline gets 504
``timeout`` and its whole process tree is killed, children in their own sessions too.
Either way the next request is served.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
from kcoral import ExecutionTimeout, Program, ServerBusy

from e2e.harness import pids_with, wait_until
from e2e.programs import call

CRASHES = r'''
import ctypes, os, signal, sys

def abort():
    os.abort()

def segfault():
    ctypes.string_at(0)

def exit_zero():
    sys.stdout.flush()
    os._exit(0)

def sigkill():
    os.kill(os.getpid(), signal.SIGKILL)

def fine():
    return "fine"
'''

CRASH_MESSAGE = "worker exited while executing the instruction"


def assert_served(server) -> None:
    result = server.execute(call("def ok():\n    return 'ok'\n", "ok"), read_timeout_s=30)
    assert result.raise_for_error()["out"] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("crash", ["abort", "segfault", "exit_zero", "sigkill"])
def test_crash_in_a_run_is_attributed_to_it(server, crash):
    program = Program()
    module = program.upload(id="m", kind="module", source=CRASHES)
    fine = program.run(id="fine", fn=program.get_function(id="f1", module=module, name="fine"))
    program.return_(key="fine", value=fine)
    program.run(id="crash", fn=program.get_function(id="f2", module=module, name=crash))
    program.return_(key="never", value=fine)
    result = server.execute(program, read_timeout_s=30)
    assert result.status == "FAILED"
    assert result.error["kind"] == "runtime"
    assert result.error["message"] == CRASH_MESSAGE
    assert (result.error["instruction_index"], result.error["instruction_op"],
            result.error["instruction_id"]) == (5, "run", "crash")
    assert "never" not in result.results
    assert_served(server)


@pytest.mark.slow
def test_crash_at_module_top_level_is_attributed_to_the_upload(server):
    program = Program()
    program.upload(id="data", kind="bytes", value=b"x")
    program.upload(id="crashing", kind="module", source="import os\nos.abort()\n")
    result = server.execute(program, read_timeout_s=30)
    assert result.error["kind"] == "runtime"
    assert result.error["message"] == CRASH_MESSAGE
    assert (result.error["instruction_index"], result.error["instruction_op"],
            result.error["instruction_id"]) == (1, "upload", "crashing")
    assert_served(server)


HANG = r'''
import os, subprocess, time

def hang(marker):
    subprocess.Popen(["sh", "-c", "sleep 300; exit 0", marker + "-child"])
    subprocess.Popen(["sh", "-c", "sleep 300; exit 0", marker + "-session"],
                     start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sh", ["sh", "-c", "sleep 300; exit 0", marker + "-daemon"])
        os._exit(0)
    print("hanging", flush=True)
    while True:
        time.sleep(1)
'''


@pytest.mark.slow
def test_timeout_is_504_and_kills_the_process_tree(server):
    marker = f"kcoral-e2e-{uuid.uuid4().hex}"
    program = call(HANG, "hang", marker)
    started = time.monotonic()
    response = server.post(*program.to_request(timeout_seconds=1.5), timeout_s=30)
    elapsed = time.monotonic() - started
    assert response.status_code == 504, response.text
    document = response.json()
    assert document["status"] == "ERROR"
    assert document["error"]["kind"] == "timeout"
    assert "1.5 s" in document["error"]["message"]
    assert response.headers["x-request-id"] == document["request_id"]
    assert 1.4 < elapsed < 10
    assert wait_until(lambda: not pids_with(marker), 5.0), pids_with(marker)
    assert_served(server)


@pytest.mark.slow
def test_client_raises_execution_timeout(server):
    with server.client() as client, pytest.raises(ExecutionTimeout) as raised:
        client.execute(call("import time\ndef f():\n    time.sleep(60)\n", "f"),
                       timeout_seconds=0.5)
    assert raised.value.status_code == 504 and raised.value.kind == "timeout"
    assert_served(server)


@pytest.mark.slow
def test_server_timeout_default_and_clamp(start_server):
    server = start_server("--num-workers", "1", "--default-timeout-seconds", "1",
                          "--max-timeout-seconds", "2")
    sleeper = call("import time\ndef f():\n    time.sleep(60)\n", "f")
    for asked, applied in [(None, "1 s"), (100, "2 s"), (1.5, "1.5 s")]:
        started = time.monotonic()
        response = server.post(*sleeper.to_request(timeout_seconds=asked), timeout_s=30)
        elapsed = time.monotonic() - started
        assert response.status_code == 504, response.text
        assert f"timeout of {applied}" in response.json()["error"]["message"]
        assert float(applied.split()[0]) - 0.1 < elapsed < float(applied.split()[0]) + 5
    assert_served(server)


KILL_PARENT = ("import os, signal, time\n"
               "def kill_parent():\n"
               "    os.kill(os.getppid(), signal.SIGKILL)\n"
               "    time.sleep(10)\n")


def serves_within(server, seconds: float) -> bool:
    """Whether a trivial program completes within ``seconds`` (503 busy answers retried)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            result = server.execute(call("def ok():\n    return 'ok'\n", "ok"), read_timeout_s=15)
        except ServerBusy:
            continue
        if result.completed:
            return True
    return False


@pytest.mark.slow
def test_server_recovers_when_the_worker_parent_dies(start_server):
    # Only an unsandboxed program can reach the worker parent (test/python/adversarial
    # checks that a sandboxed one cannot); the parent's recovery is tested here.
    server = start_server("--num-workers", "1", "--queue-timeout-seconds", "3", "--sandbox", "none")
    try:
        result = server.execute(call(KILL_PARENT, "kill_parent"))
        assert (result.error["kind"], result.error["message"]) == ("runtime", CRASH_MESSAGE)
        assert serves_within(server, 10)
    finally:
        # With the bug, the dead parent's workspaces stay in the work root as well.
        server.stop(check_leftovers=False)


CHURN = r'''
import subprocess

def churn(seconds):
    loop = ("end=$(($(date +%s)+" + str(seconds) + ")); "
            "while [ $(date +%s) -lt $end ]; do /bin/true & /bin/true & /bin/true & wait; done")
    for process in [subprocess.Popen(["sh", "-c", loop]) for _ in range(6)]:
        process.wait()
    return "churned"
'''


@pytest.mark.slow
def test_programs_complete_while_another_program_churns_processes(start_server):
    """Workers that finish while processes come and go all around still report their
    programs (a /proc read that meets a vanishing process once aborted the reader)."""
    server = start_server("--num-workers", "2", "--queue-timeout-seconds", "5")
    outcome: dict = {}
    churner = threading.Thread(target=lambda: outcome.update(
        result=server.execute(call(CHURN, "churn", 6), read_timeout_s=30)))
    churner.start()
    try:
        deadline = time.monotonic() + 4.5
        while time.monotonic() < deadline:
            result = server.execute(call("def ok():\n    return 'ok'\n", "ok"))
            assert result.raise_for_error()["out"] == "ok"
    finally:
        churner.join(30)
    assert outcome["result"].raise_for_error()["out"] == "churned"


def children_of(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of each child of `pid`, zombies included (/proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                text = open(f"/proc/{name}/stat").read()
            except OSError:
                continue
            state, parent = text[text.rindex(")") + 2:].split()[:2]
            if int(parent) == pid:
                found.append((int(name), state))
    return found


def test_a_killed_worker_parent_is_reaped_and_replaced_and_programs_are_served_again(start_server):
    server = start_server("--num-workers", "1")
    assert server.execute(call("def f():\n    return 1\n", "f")).raise_for_error()["out"] == 1
    [(parent, _)] = children_of(server.pid)
    os.kill(parent, signal.SIGKILL)
    # A new parent a second later; the old one reaped, not left a zombie of the server's.
    assert wait_until(lambda: [p for p, state in children_of(server.pid) if p != parent and state != "Z"], 20)
    assert wait_until(lambda: parent not in [p for p, _ in children_of(server.pid)], 10)
    assert wait_until(lambda: server.get("/health").json()["load"]["request_capacity"] == 1, 20)
    assert server.execute(call("def f():\n    return 2\n", "f"), read_timeout_s=60).raise_for_error()["out"] == 2
