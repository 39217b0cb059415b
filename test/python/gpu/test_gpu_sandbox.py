"""The sandbox of a GPU server (KCORAL_GPU_URL, started with its defaults); skipped without one.

The attacks of test/python/adversarial, from a program on the GPU server while another
client's GPU program runs beside it: the worker sees only its own GPU's device nodes, its
own processes and a read-only system; it is unprivileged, filtered and limited; killing
everything in sight or exhausting memory, disk and processes hurts no other program. Its limits are the program's
as a whole (its control group: cgroup v2 on the GPU machine), its environment is its own
list, and of /sys it sees what CUDA reads, never the network's devices.

The server is started with its defaults (an 8 GiB memory limit per program) and, in its
environment, KCORAL_CHECK_SECRET, which no program may see.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from adversarial.attacks import ATTACKS
from kcoral import Client, Program

URL = os.environ.get("KCORAL_GPU_URL")
pytestmark = pytest.mark.skipif(not URL, reason="needs a GPU server: set KCORAL_GPU_URL")

GPU_VICTIM = r'''
import time, torch

def victim(token, seconds):
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    time.sleep(seconds)
    return {"token": token, "sum": float((x * 2).sum().item())}
'''


def execute(program: Program):
    with Client(URL, read_timeout_seconds=300) as client:
        return client.execute(program, timeout_seconds=300)


def attack(name: str, *args):
    program = Program()
    module = program.upload(id="m", kind="module", source=ATTACKS)
    fn = program.get_function(id="f", module=module, name=name, cpu_only=True)
    program.return_(key="out", value=program.run(id="r", fn=fn, args=list(args)))
    return execute(program)


def with_victim(run_attack):
    """Runs `run_attack` while a GPU program of another client runs; checks the victim."""
    token = uuid.uuid4().hex
    program = Program()
    module = program.upload(id="m", kind="module", source=GPU_VICTIM)
    fn = program.get_function(id="f", module=module, name="victim")
    program.return_(key="out", value=program.run(id="r", fn=fn, args=[token, 3.0]))
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=execute(program)))
    thread.start()
    time.sleep(1.0)
    attacked = run_attack()
    thread.join(timeout=300)
    result = outcome["result"]
    assert result.status == "COMPLETED", result.error
    n = 1 << 20
    assert result["out"] == {"token": token, "sum": float(n * (n - 1))}
    return attacked


def test_a_gpu_worker_sees_its_own_gpu_nodes_only_and_is_unprivileged():
    report = attack("privileged_calls").raise_for_error()["out"]
    assert (report["uid"], report["seccomp"], report["no_new_privs"]) == (1000, "2", "1")
    assert int(report["cap_eff"], 16) == 0
    gpu_nodes = {d for d in report["devices"] if d.startswith("nvidia")}
    numbered = {d for d in gpu_nodes if d[len("nvidia"):].isdigit()}
    assert gpu_nodes - numbered == {"nvidiactl", "nvidia-uvm"}, gpu_nodes
    assert len(numbered) == 1, gpu_nodes  # its own GPU's node, no other
    for call_name in ("ptrace", "unshare_user", "mount"):
        assert report[call_name] == "EPERM"


def test_secrets_other_processes_and_the_network_are_out_of_reach_beside_a_gpu_program():
    secrets = with_victim(lambda: attack("read_secrets")).raise_for_error()["out"]
    assert secrets["shadow"] in ("", "EACCES", "ENOENT")
    assert secrets["pids"] == [1, secrets["self"]]
    network = attack("call_the_server", "127.0.0.1", int(URL.rsplit(":", 1)[1])).raise_for_error()["out"]
    assert network["server"] in ("ECONNREFUSED", "ENETUNREACH") and network["interfaces"] == ["lo"]


def test_killing_everything_in_sight_hurts_no_other_gpu_program():
    report = with_victim(lambda: attack("signal_everyone")).raise_for_error()["out"]
    assert report["parent_chain"] == []


def test_exhausting_memory_disk_and_processes_hurts_no_other_gpu_program():
    report = with_victim(lambda: attack("exhaust", 8 << 30)).raise_for_error()["out"]
    assert report["memory"] == "MemoryError"
    assert report["disk_error"] in ("EFBIG", "ENOSPC")
    assert report["fork_error"] == "EAGAIN"


PROGRAM_LIMITS = r"""
import os, sys

def together_past(limit_bytes, processes):
    # Each process well under the limit alone, all of them together past it.
    share = limit_bytes * 3 // (2 * processes)
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            held = b"\x01" * share  # written, so resident
            import time
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    return "not killed"

def environment_and_sys():
    import torch
    x = torch.ones(1 << 20, device="cuda")
    def listing(path):
        try:
            return sorted(os.listdir(path))
        except OSError as error:
            return error.__class__.__name__
    return {"environ": dict(os.environ), "executable": sys.executable, "sum": float(x.sum().item()),
            "class": listing("/sys/class"), "net": listing("/sys/class/net"),
            "cpu_online": open("/sys/devices/system/cpu/online").read().strip(),
            "cgroup": open("/proc/self/cgroup").read()}
"""


def limits_program(name: str, *args, cpu_only: bool = True):
    program = Program()
    module = program.upload(id="m", kind="module", source=PROGRAM_LIMITS)
    fn = program.get_function(id="f", module=module, name=name, cpu_only=cpu_only)
    program.return_(key="out", value=program.run(id="r", fn=fn, args=list(args)))
    return execute(program)


def test_processes_together_past_the_memory_limit_kill_the_whole_program_beside_a_gpu_program():
    result = with_victim(lambda: limits_program("together_past", 8 << 30, 3))
    assert result.status == "FAILED"
    assert result.error["kind"] == "runtime", result.error
    assert "memory limit of 8192 MiB" in result.error["message"], result.error


def test_a_gpu_program_gets_its_own_environment_and_of_sys_what_cuda_reads():
    report = limits_program("environment_and_sys", cpu_only=False).raise_for_error()["out"]
    assert report["sum"] == float(1 << 20)  # CUDA works with the /sys it has
    environ = report["environ"]
    assert "KCORAL_CHECK_SECRET" not in environ and "KCORAL_TOKEN" not in environ
    assert environ["PATH"].split(":")[0] == os.path.dirname(report["executable"])
    assert {"HOME", "TMPDIR", "LANG"} <= environ.keys()
    assert "CUDA_VISIBLE_DEVICES" in environ
    assert "net" not in (report["class"] if isinstance(report["class"], list) else [])
    assert report["net"] in ("FileNotFoundError", [])
    assert report["cpu_online"]
