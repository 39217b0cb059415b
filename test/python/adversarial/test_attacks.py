"""Uploaded programs attacking the server, its machine and each other, on a sandboxed
CPU server: each attack fails harmlessly, and a normal program of another client, running
at the same time, completes with its own result.

The attacks are in attacks.py; a test runs one while the victim (a program that keeps a
secret in its working directory and in an uploaded blob) runs beside it, then checks the
attack's own report, the victim's result, and the server and machine from outside.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from e2e.harness import Server, pids_with, wait_until
from e2e.programs import call

from adversarial.attacks import ATTACKS
from adversarial.victim import assert_serves, victim_beside

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sandboxed(start_module_server) -> Server:
    return start_module_server("--num-workers", "2", "--queue-timeout-seconds", "30",
                               "--memory-limit-bytes", str(2 << 30), "--scratch-bytes", str(256 << 20),
                               "--file-size-limit-bytes", str(128 << 20), "--process-limit", "64")


def attack(server: Server, name: str, *args, **options):
    result = server.execute(call(ATTACKS, name, *args), read_timeout_s=60, **options)
    return result


# -- the channel to the front ------------------------------------------------------------


@pytest.mark.parametrize("sandbox", ["namespaces", "none"])
def test_a_program_cannot_reach_its_channel_to_take_over_another_request(start_module_server, sandbox):
    server = start_module_server("--num-workers", "2", "--sandbox", sandbox)
    with victim_beside(server):
        report = attack(server, "channel_takeover").raise_for_error()["out"]
    assert report["ready_sent_on"] == [] and report["messages_read"] == []
    assert report["sockets_reopened"] == []
    assert_serves(server)


def test_a_program_cannot_run_a_signal_handler_on_the_thread_that_holds_the_channel(sandboxed):
    """Signal handlers are the process's: a program's own, sent with tgkill to the thread
    that holds the channel in a descriptor table of its own, ran there and found the channel
    in /proc/thread-self/fd (and could forge the program's result, then run on past its
    timeout). That thread blocks every signal."""
    with victim_beside(sandboxed):
        report = attack(sandboxed, "channel_by_signal").raise_for_error()["out"]
    assert report["ran_on"], report  # it ran on the program's other threads (its output's)
    assert not any("socket:" in str(seen.get("fds")) for seen in report["ran_on"]), report
    assert_serves(sandboxed)


def test_a_huge_memfd_reaches_nothing_and_the_server_lives(sandboxed):
    with victim_beside(sandboxed):
        report = attack(sandboxed, "pass_huge_memfd").raise_for_error()["out"]
    assert report == {"sent_on": [], "size": "1 MiB"}  # and the file size limit held
    assert sandboxed.process.poll() is None
    assert_serves(sandboxed)


# -- reading and tampering -----------------------------------------------------------------


def test_secrets_and_other_processes_are_out_of_sight(sandboxed):
    with victim_beside(sandboxed):
        report = attack(sandboxed, "read_secrets").raise_for_error()["out"]
    assert report["shadow"] in ("", "EACCES", "ENOENT"), report["shadow"][:40]
    assert report["gshadow"] in ("", "EACCES", "ENOENT")
    # Its own PID namespace: its init and itself (and what it started), nothing else.
    assert report["pids"] == [1, report["self"]]
    assert not any("kcoral-server" in line for line in report["cmdlines"].values())
    assert report["init_environ"] in ("EACCES", "")
    assert report["init_mem"] in ("EACCES", "EPERM", "ENOENT")


def test_other_programs_blobs_and_files_and_the_server_work_root_are_out_of_reach(sandboxed):
    with victim_beside(sandboxed) as token:
        found = attack(sandboxed, "steal_data", str(sandboxed.work_root)).raise_for_error()["out"]
    stolen = b"".join(bytes.fromhex(data) for data in found)
    assert token.encode() not in stolen


def test_the_server_port_and_the_outside_are_unreachable_but_loopback_works(sandboxed):
    with victim_beside(sandboxed):
        report = attack(sandboxed, "call_the_server", sandboxed.host, sandboxed.port).raise_for_error()["out"]
    assert report["server"] in ("ECONNREFUSED", "ENETUNREACH")
    assert report["outside"] in ("ENETUNREACH", "ECONNREFUSED", "EHOSTUNREACH")
    assert report["own_loopback"] == "ping"
    assert report["interfaces"] == ["lo"]


@pytest.mark.parametrize("capture", [None, 0])
def test_nothing_reaches_the_server_log(sandboxed, capture):
    marker = f"kcoral-attack-{uuid.uuid4().hex}"
    options = {} if capture is None else {"output_limit_bytes": capture}
    result = attack(sandboxed, "write_to_the_server_log", marker, **options).raise_for_error()
    if capture is None:
        assert marker in result.stdout
    time.sleep(0.2)
    assert marker not in sandboxed.stderr_text()
    assert not any(marker in line for line in sandboxed.stdout_lines)


def test_files_and_daemons_are_gone_when_the_program_ends(sandboxed):
    marker = f"kcoral-attack-{uuid.uuid4().hex}"
    left = attack(sandboxed, "leave_things_behind", marker).raise_for_error()["out"]
    assert "/tmp" in left and "/" not in left
    assert wait_until(lambda: not pids_with(marker), 5.0), pids_with(marker)
    for directory in ("/tmp", "/var/tmp", "/dev/shm", str(sandboxed.work_root)):
        assert not os.path.exists(os.path.join(directory, marker))
    for _ in range(2):  # both workers
        assert attack(sandboxed, "look_for_leftovers", marker).raise_for_error()["out"] == []


def test_writing_over_the_memory_inherited_from_the_worker_parent_reaches_no_other_program(sandboxed):
    # The worker parent's memory is shared with every worker, in huge pages where the kernel
    # can: a program that writes to all of it, and changes an object the parent made in
    # place, changes its own copy only.
    with victim_beside(sandboxed):
        report = attack(sandboxed, "rewrite_inherited_memory").raise_for_error()["out"]
    assert report["written"] > 1 << 20 and report["failed"] == [], report
    assert report["after"] == "X" + report["before"][1:]
    # Fresh workers, forked after it, find the parent's object as it was.
    for _ in range(3):
        assert attack(sandboxed, "numpy_version").raise_for_error()["out"] == report["before"]
    assert_serves(sandboxed)


# -- hurting other clients -----------------------------------------------------------------


def test_killing_everything_in_sight_hurts_no_other_program(sandboxed):
    with victim_beside(sandboxed):
        report = attack(sandboxed, "signal_everyone").raise_for_error()["out"]
    # Its parent is outside its world (getppid() is 0), and the init of its namespace
    # (pid 1, kcoral-init) shrugs the signal off.
    assert report["parent_chain"] == [] and report["results"]["1"] in ("ok", "EPERM")
    assert sandboxed.process.poll() is None
    assert_serves(sandboxed)


def test_killing_its_own_process_group_ends_only_its_own_program(sandboxed):
    with victim_beside(sandboxed):
        result = attack(sandboxed, "kill_own_group")
    assert result.status == "FAILED"
    assert (result.error["kind"], result.error["message"]) == (
        "runtime", "worker exited while executing the instruction")
    assert_serves(sandboxed)


# -- using the whole machine ---------------------------------------------------------------


def test_memory_disk_and_processes_are_limited(sandboxed):
    with victim_beside(sandboxed):
        report = attack(sandboxed, "exhaust", 2 << 30).raise_for_error()["out"]
    assert report["memory"] == "MemoryError"
    assert report["disk_error"] in ("EFBIG", "ENOSPC")
    assert report["disk_written"] <= 128 << 20
    assert report["fork_error"] == "EAGAIN"
    assert report["forked"] < 64
    assert_serves(sandboxed)


def test_a_program_is_unprivileged_and_refused_what_a_benchmark_never_needs(sandboxed):
    report = attack(sandboxed, "privileged_calls").raise_for_error()["out"]
    assert (report["uid"], report["euid"]) == (1000, 1000)
    assert report["groups"] in ([], [1000])
    assert int(report["cap_eff"], 16) == 0 and int(report["cap_bnd"], 16) == 0
    assert (report["no_new_privs"], report["seccomp"]) == ("1", "2")
    for call_name in ("ptrace", "unshare_user", "unshare_net", "mount", "chroot"):
        assert report[call_name] == "EPERM", (call_name, report[call_name])
    assert report["setuid_root"] in ("EPERM", "EINVAL")  # root is not even a user in there
    for target in ("write_usr", "write_etc", "write_python"):
        assert report[target] in ("EROFS", "EACCES"), (target, report[target])
    assert report["devices"] == sorted(["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout",
                                        "urandom", "zero"])
    assert report["hostname"] == "kcoral"


READ_BACK = r'''
import errno

def read_back(path):
    try:
        open(path + "/written", "w")
        writable = "yes"
    except OSError as e:
        writable = errno.errorcode[e.errno]
    with open(path + "/data.txt") as f:
        return {"data": f.read(), "writable": writable}
'''


def test_a_readable_path_under_tmp_is_seen_read_only_on_top_of_the_private_tmp(start_server, tmp_path):
    # As on the GPU machine, where the carried Python packages live under /tmp: a path
    # under /tmp stays visible (not hidden by the private /tmp) and read-only. Given
    # through a symbolic link, as an operator may give it.
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("from the operator")
    link = tmp_path / "link"
    link.symlink_to(shared)
    server = start_server("--num-workers", "1", "--readable-path", str(link))
    report = server.execute(call(READ_BACK, "read_back", str(shared))).raise_for_error()["out"]
    assert report == {"data": "from the operator", "writable": "EROFS"}
