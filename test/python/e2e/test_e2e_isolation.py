"""Fresh state for every program, and nothing a program starts outlives it.

Program A changes what a Python process can change (working directory, environment,
module globals, the standard library, sys.modules, sys.path, umask, signal handlers,
threads, files); program B, run next on a one-worker server, must see none of it. The
processes a program leaves running (a plain child, one in its own session, a daemon
that double-forked away, one holding the output pipe) are gone when its response is.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid

import pytest

from e2e.harness import pids_with, wait_until
from e2e.programs import call, response_document

MUTATE = r'''
import builtins, json, os, signal, sys, threading, time, types

COUNTER = 0

def mutate():
    global COUNTER
    COUNTER += 1
    cwd = os.getcwd()
    open("leftover.txt", "w").write("from A")
    os.environ["KCORAL_LEAK"] = "A"
    json.loads = lambda *args, **kwargs: "patched"
    os.path.join = lambda *parts: "patched"
    os.getpid = lambda: -1
    sys.modules["kcoral_leak"] = types.ModuleType("kcoral_leak")
    sys.path.append("/kcoral-leak")
    builtins.kcoral_leak = True
    os.umask(0o077)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    threading.Thread(target=time.sleep, args=(300,), daemon=True, name="kcoral-leak").start()
    os.chdir("/")
    return {"cwd": cwd, "counter": COUNTER}

def observe():
    import json as fresh_json
    return {
        "counter": COUNTER,
        "cwd_entries": sorted(os.listdir(".")),
        "cwd": os.getcwd(),
        "env": os.environ.get("KCORAL_LEAK"),
        "json": fresh_json.loads("[1]"),
        "join": os.path.join("a", "b"),
        "getpid_patched": os.getpid() == -1,
        "leak_module": "kcoral_leak" in sys.modules,
        "leak_path": "/kcoral-leak" in sys.path,
        "builtin": hasattr(builtins, "kcoral_leak"),
        "umask": os.umask(0o022),
        "sigusr1_ignored": signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN,
        "threads": sorted(t.name for t in threading.enumerate()),
    }
'''


@pytest.fixture(scope="module")
def one_worker(start_module_server):
    return start_module_server("--num-workers", "1")


def test_program_state_does_not_reach_the_next_program(one_worker):
    first = one_worker.execute(call(MUTATE, "observe")).raise_for_error()["out"]
    mutated = one_worker.execute(call(MUTATE, "mutate")).raise_for_error()["out"]
    assert mutated["counter"] == 1
    assert not os.path.exists(mutated["cwd"]), "the working directory outlived its program"
    second = one_worker.execute(call(MUTATE, "observe")).raise_for_error()["out"]
    assert second["cwd"] != mutated["cwd"]
    assert second == {**first, "cwd": second["cwd"]}
    assert second["counter"] == 0 and second["cwd_entries"] == []
    assert second["env"] is None and second["json"] == [1] and second["join"] == "a/b"
    assert not (second["getpid_patched"] or second["leak_module"] or second["leak_path"]
                or second["builtin"] or second["sigusr1_ignored"])
    assert "kcoral-leak" not in second["threads"]


def test_working_directory_is_fresh_and_private(one_worker):
    source = ("import os, stat\n"
              "def where():\n"
              "    return [os.listdir('.'), oct(stat.S_IMODE(os.stat('.').st_mode))]\n")
    for _ in range(2):
        result = one_worker.execute(call(source, "where")).raise_for_error()
        assert result["out"] == [[], "0o700"]


LEAVE_BEHIND = r'''
import os, subprocess, sys

def leave(marker):
    plain = subprocess.Popen(["sh", "-c", "sleep 300; exit 0", marker + "-plain"])
    session = subprocess.Popen(["sh", "-c", "sleep 300; exit 0", marker + "-session"],
                               start_new_session=True)
    holder = subprocess.Popen(["sh", "-c", "sleep 300; echo late; exit 0", marker + "-holder"])
    pid = os.fork()
    if pid == 0:  # a daemon: new session, fork again, the middle process exits
        os.setsid()
        if os.fork() == 0:
            os.execvp("sh", ["sh", "-c", "sleep 300; exit 0", marker + "-daemon"])
        os._exit(0)
    os.waitpid(pid, 0)
    print("left", plain.pid, session.pid, holder.pid)
    return "returned while they run"
'''


def test_processes_left_behind_are_killed_after_the_program(server):
    marker = f"kcoral-e2e-{uuid.uuid4().hex}"
    result = server.execute(call(LEAVE_BEHIND, "leave", marker), read_timeout_s=30)
    result.raise_for_error()
    assert result["out"] == "returned while they run"
    assert result.stdout.startswith("left ")
    assert wait_until(lambda: not pids_with(marker), 5.0), pids_with(marker)
    assert server.execute(call("def f():\n    return 1\n", "f")).raise_for_error()["out"] == 1


PATCH_ENCODERS = r'''
import hashlib, json

def patch_json():
    json.dumps = lambda *args, **kwargs: "not json"
    return {"value": 1}

def patch_hashlib():
    hashlib.sha256 = hashlib.md5
    return b"bytes"
'''


def test_monkeypatched_json_cannot_corrupt_the_response(server):
    response = server.post(*call(PATCH_ENCODERS, "patch_json").to_request())
    assert response.status_code == 200
    document = json.loads(response.content)
    assert document["status"] in ("COMPLETED", "FAILED")


def test_monkeypatched_hashlib_cannot_corrupt_the_response(server):
    response = server.post(*call(PATCH_ENCODERS, "patch_hashlib").to_request())
    document, parts = response_document(response)
    node = document["results"]["out"]
    assert node["sha256"] == hashlib.sha256(parts[node["part"]]).hexdigest()


ENVIRONMENT = "import os\n\ndef get(name):\n    return os.environ.get(name)\n"


def test_cuda_connections_set_by_the_server_are_what_programs_see(server, start_module_server):
    name = "CUDA_DEVICE_MAX_CONNECTIONS"
    assert server.execute(call(ENVIRONMENT, "get", name)).raise_for_error()["out"] == os.environ.get(name)
    one_queue = start_module_server("--num-workers", "1", "--cuda-connections", "1")
    assert one_queue.execute(call(ENVIRONMENT, "get", name)).raise_for_error()["out"] == "1"
