"""A program's limits, all of its processes together, on a sandboxed CPU server run as root:
each attack is stopped by the limit it runs into, while a normal program of another client
runs beside it and completes with its own result, and the server serves the next request.

- Memory: processes that each stay under --memory-limit-bytes but together pass it, and
  memfd or tmpfs pages past it, get the whole program killed: `runtime`, naming the limit.
- Processes: a fork bomb and a thread bomb stop at --process-limit (EAGAIN).
- CPU: a program of 32 detached busy processes gets one program's share of the CPUs, not
  32 threads' share: another program's loop runs about as fast beside it as alone.
- Descriptors: --open-files-limit per process, which a program cannot raise.
- Kernel counts per user: each live worker runs as a user of its own outside, so a program
  that takes every inotify instance it can takes them from itself only, not from root or
  the program beside it.
- Scratch inodes: 300,000 empty files stop at one inode per 16 KiB of --scratch-bytes.
- Leftovers: the negative dentries of 500,000 names looked up, charged to a program's
  group, which is kept for the next program, are reclaimed by kcoral-reclaim, a process of
  the worker parent's, not on the thread that forks every worker.
- The server's start line says which control groups hold these limits, or why none do;
  each program's group has them, and a stopped server leaves no group behind.

What a program sees of its environment and of /sys: test_program_view.py; worker starts
that fail: test_worker_starts.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.harness import Server, descendants, pids_with, server_binary, wait_until
from e2e.programs import call

from adversarial.victim import assert_serves, victim_beside

pytestmark = pytest.mark.slow

MiB = 1 << 20
# 1 GiB: a worker forked from a parent that mapped numpy (OpenBLAS reserves a buffer per
# core) holds some hundreds of MiB of address space before its program starts.
MEMORY_LIMIT = 1024 * MiB
SCRATCH = 2048 * MiB  # larger than the memory limit: tmpfs pages meet the memory limit first
FILE_SIZE = 4096 * MiB  # larger too, so that one file may pass the memory limit
PROCESSES = 64
OPEN_FILES = 200  # not the default (1024), to see the flag hold
FIRST_UID, LAST_UID = 1879048192, 1879113727  # the default --sandbox-uid-range
LIMITS_LINE = re.compile(r"^kcoral-server: limits: (.*)$", re.MULTILINE)

PROGRAMS = r'''
import ctypes, errno, os, signal, subprocess, sys, threading, time

libc = ctypes.CDLL(None, use_errno=True)


def _name(error):
    return errno.errorcode.get(error.errno, str(error.errno))


def allocating_processes(how, count, each_bytes, hold_seconds):
    """`count` processes (forked, or new interpreters) that each touch `each_bytes` of
    memory and hold it for `hold_seconds`."""
    if how == "subprocess":
        code = "import time; block = b'\\1' * %d; time.sleep(%r)" % (each_bytes, hold_seconds)
        children = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
        return [child.wait() for child in children]
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            try:
                block = b"\1" * each_bytes  # written, so every page is there
                time.sleep(hold_seconds)
            finally:
                os._exit(0)
        pids.append(pid)
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]


def fill(where, total_bytes):
    """Write `total_bytes` into a memfd, or a file in `where` (tmpfs)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if where == "memfd":
        fd = os.memfd_create("fill")
    else:
        fd = os.open(os.path.join(where, "fill"), os.O_CREAT | os.O_WRONLY, 0o600)
    chunk = b"\1" * (1 << 20)
    written = 0
    try:
        while written < total_bytes:
            written += os.write(fd, chunk)
    except OSError as e:
        return {"written": written, "error": _name(e)}
    return {"written": written, "error": None}


def fork_bomb(seconds):
    """Every process forks as fast as it can for `seconds`; how far it got."""
    deadline = time.monotonic() + seconds
    forked, errors, most = 0, set(), 0
    leader = os.getpid()
    while time.monotonic() < deadline:
        try:
            pid = os.fork()
        except OSError as e:
            if os.getpid() == leader:
                errors.add(_name(e))
                most = max(most, sum(name.isdigit() for name in os.listdir("/proc")))
            time.sleep(0.005)
            continue
        if pid == 0:
            continue  # the child forks too
        if os.getpid() == leader:
            forked += 1
    if os.getpid() != leader:
        os._exit(0)
    while True:  # every other process ends at the deadline too
        try:
            os.wait()
        except ChildProcessError:
            break
    return {"forked": forked, "errors": sorted(errors), "most_processes": most}


def thread_bomb():
    """Threads (of small stacks, so that the address space is not what stops them) until
    none more can start."""
    threading.stack_size(64 << 10)
    stop = threading.Event()
    threads, error = [], None
    try:
        for _ in range(10000):
            thread = threading.Thread(target=stop.wait)
            thread.start()
            threads.append(thread)
    except RuntimeError as e:
        error = str(e)
    started = len(threads)
    stop.set()
    for thread in threads:
        thread.join()
    return {"started": started, "error": error}


def busy_processes(count, marker, seconds):
    """`count` detached (setsid) busy processes; waits for them (the test ends them from
    outside), at most `seconds`."""
    children = [subprocess.Popen(["sh", "-c", "while :; do :; done", marker], start_new_session=True)
                for _ in range(count)]
    deadline = time.monotonic() + seconds
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return len(children)


def spin(n, repeats):
    """Seconds of a trivial CPU-bound loop, `repeats` times."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        x = 0
        for i in range(n):
            x += i
        times.append(time.perf_counter() - started)
    return times


def descriptors(children):
    """The descriptor limit; and descriptors opened until refused, by this process and by
    `children` forked ones at once."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard * 4, hard * 4))
        raised = "raised"
    except (ValueError, OSError) as e:
        raised = type(e).__name__

    def open_all():
        fds = []
        try:
            while len(fds) < 100000:
                fds.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as e:
            return fds, _name(e)
        return fds, None

    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            try:
                os.close(report_r)
                os.close(go_w)
                fds, error = open_all()
                os.write(report_w, ("%d %s\n" % (len(fds), error)).encode())
                os.read(go_r, 1)  # all hold theirs at once
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(report_w)
    os.close(go_r)
    reader = os.fdopen(report_r)
    counts = [reader.readline().split() for _ in range(children)]
    fds, error = open_all()
    own = len(fds)
    for fd in fds:
        os.close(fd)
    os.close(go_w)
    for pid in pids:
        os.waitpid(pid, 0)
    return {"limit": [soft, hard], "raise": raised, "opened": own, "error": error,
            "children": [[int(n), e] for n, e in counts]}


def inotify_instances(hold_seconds):
    """As many inotify instances as it can make, held for `hold_seconds`."""
    fds, error = [], None
    while len(fds) < 100000:
        fd = libc.inotify_init1(os.O_CLOEXEC)
        if fd < 0:
            error = errno.errorcode.get(ctypes.get_errno(), "?")
            break
        fds.append(fd)
    time.sleep(hold_seconds)
    for fd in fds:
        os.close(fd)
    return {"made": len(fds), "error": error}


def many_files(count):
    """`count` empty files in the scratch space, until refused."""
    os.mkdir("/tmp/files")
    made, error = 0, None
    try:
        for i in range(count):
            os.close(os.open("/tmp/files/%d" % i, os.O_CREAT | os.O_WRONLY, 0o600))
            made += 1
    except OSError as e:
        error = _name(e)
    return {"made": made, "error": error, "inodes": os.statvfs("/tmp").f_files}


def own_cgroup():
    return open("/proc/self/cgroup").read()


def negative_dentries(count, tag):
    """Looks up `count` names that do not exist (and were not looked up before: `tag`
    differs): each leaves a negative dentry, kernel memory charged to the program's group
    that outlives the program until reclaimed."""
    prefix = "/usr/" + tag + "n" * 180
    for i in range(count):
        os.access(f"{prefix}{i}", os.F_OK)
    return count


'''


def run(server: Server, name: str, *args, timeout_s: float = 60):
    return server.execute(call(PROGRAMS, name, *args), read_timeout_s=timeout_s)


def limits_line(server: Server) -> str:
    match = LIMITS_LINE.search(server.stderr_text())
    assert match, server.stderr_text()
    return match.group(1)


def require(server: Server, said: str) -> None:
    """Skips the test unless the server's start line says `said` of its limits."""
    if said not in limits_line(server):
        pytest.skip(f"the server does not say {said!r} here: {limits_line(server)}")


MEMORY_TOGETHER = f"Memory: {MEMORY_LIMIT >> 20} MiB for all of a program's processes together"
CPU_WEIGHT = "CPU: the same weight for every program"
OWN_USERS = "Users: each worker runs as a user of its own outside"


def assert_killed_for_memory(result) -> None:
    assert result.status == "FAILED", result
    assert result.error["kind"] == "runtime", result.error
    message = result.error["message"]
    assert f"memory limit of {MEMORY_LIMIT >> 20} MiB" in message and f"--memory-limit-bytes {MEMORY_LIMIT}" in message, message


def control_group_directories(server: Server) -> dict[str, Path]:
    """The server's own group in each hierarchy (cgroup v1), by controller, from its start
    line; empty when it names none."""
    match = re.search(r"cgroup v1 \(([a-z, ]+)\) under (.+?)\. Memory:", limits_line(server))
    if match is None:
        return {}
    return dict(zip(match.group(1).split(", "), map(Path, match.group(2).split(", "))))


def remove_groups(directories) -> None:
    """Removes what a stopped server left of its control groups (rmdir, of empty ones)."""
    for directory in directories:
        with contextlib.suppress(OSError):
            below = [path for path in directory.rglob("*") if path.is_dir()]
            for child in sorted(below, key=lambda path: len(path.parts), reverse=True):  # deepest first
                child.rmdir()
            directory.rmdir()


@pytest.fixture(scope="module")
def limited(start_module_server) -> Iterator[Server]:
    # Only numpy preloaded: a worker forked from a parent that preloaded TVM, torch and
    # CuTeDSL maps gigabytes of address space, more than the 1 GiB limit here.
    server = start_module_server(
        "--num-workers", "3", "--queue-timeout-seconds", "30", "--preload", "numpy",
        "--memory-limit-bytes", str(MEMORY_LIMIT), "--scratch-bytes", str(SCRATCH),
        "--file-size-limit-bytes", str(FILE_SIZE),
        "--process-limit", str(PROCESSES), "--open-files-limit", str(OPEN_FILES))
    yield server
    groups = control_group_directories(server)
    assert server.stop() == 0
    remove_groups(groups.values())  # see test_a_stopped_server_leaves_no_control_group


# -- memory ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["fork", "subprocess"])
def test_processes_together_past_the_memory_limit_kill_the_program(limited, how):
    require(limited, MEMORY_TOGETHER)
    # Each of 8 processes touches 192 MiB (far under the limit, and under the address space
    # per process); two of them fit, eight together (1.5 GiB) do not.
    share = MEMORY_LIMIT * 3 // 16
    assert run(limited, "allocating_processes", how, 2, share, 0.2).raise_for_error()["out"] == [0, 0]
    with victim_beside(limited):
        started = time.monotonic()
        result = run(limited, "allocating_processes", how, 8, share, 20)
    assert_killed_for_memory(result)
    assert time.monotonic() - started < 15  # killed when it got there, not at the end of its sleep
    assert_serves(limited)


@pytest.mark.parametrize("where", ["memfd", "/dev/shm", "/tmp"])
def test_memfd_and_tmpfs_pages_past_the_memory_limit_kill_the_program(limited, where):
    require(limited, MEMORY_TOGETHER)
    # 1.5 GiB: past the memory limit, within the scratch space and the file size limit, so
    # that only the memory limit can stop it.
    with victim_beside(limited):
        result = run(limited, "fill", where, MEMORY_LIMIT * 3 // 2)
    assert_killed_for_memory(result)
    assert_serves(limited)


# -- processes -------------------------------------------------------------------------------


def test_a_fork_bomb_stops_at_the_process_limit(limited):
    with victim_beside(limited):
        report = run(limited, "fork_bomb", 2.0).raise_for_error()["out"]
    assert report["errors"] == ["EAGAIN"], report
    # Its PID namespace holds its init besides the program's own processes.
    assert 0 < report["most_processes"] <= PROCESSES + 1, report
    assert limited.process.poll() is None
    assert_serves(limited)


def test_a_thread_bomb_stops_at_the_process_limit(limited):
    with victim_beside(limited):
        report = run(limited, "thread_bomb").raise_for_error()["out"]
    assert report["error"] == "can't start new thread", report
    assert 0 < report["started"] < PROCESSES, report  # the worker's own threads count too
    assert_serves(limited)


# -- CPU -------------------------------------------------------------------------------------

SPIN = 3_000_000  # about 0.1 s of one core
BUSY = 32


def test_a_program_of_many_busy_processes_does_not_starve_another(limited):
    require(limited, CPU_WEIGHT)
    before = min(run(limited, "spin", SPIN, 3).raise_for_error()["out"])
    marker = f"kcoral-busy-{os.urandom(8).hex()}"
    attack: dict = {}

    def attacker() -> None:
        attack["result"] = run(limited, "busy_processes", BUSY, marker, 60.0, timeout_s=90)

    thread = threading.Thread(target=attacker)
    with victim_beside(limited):
        thread.start()
        try:
            assert wait_until(lambda: len(pids_with(marker)) >= BUSY, 20), pids_with(marker)
            time.sleep(0.5)  # all of them spinning
            beside = min(run(limited, "spin", SPIN, 3).raise_for_error()["out"])
            still_busy = len(pids_with(marker))
        finally:
            for pid in pids_with(marker):  # ends the attack (it waits for its children)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            thread.join(timeout=60)
    assert attack["result"].raise_for_error()["out"] == BUSY
    assert still_busy >= BUSY  # the whole measure ran beside the attack
    # Alone, measured before and after, so that a load of the machine's own that came
    # meanwhile is in the baseline too.
    alone = max(before, min(run(limited, "spin", SPIN, 3).raise_for_error()["out"]))
    # Shared between threads (no control groups), the 32 busy processes made the loop 18
    # times slower on two cores; with a weight per program it runs about as fast as alone.
    assert beside < 6 * alone, (alone, beside)


# -- descriptors and the kernel's per-user counts ----------------------------------------------


def test_open_files_are_limited_per_process_and_cannot_be_raised(limited):
    with victim_beside(limited):
        report = run(limited, "descriptors", 4).raise_for_error()["out"]
    assert report["limit"] == [OPEN_FILES, OPEN_FILES]
    assert report["raise"] == "ValueError"  # no CAP_SYS_RESOURCE
    assert report["error"] == "EMFILE" and OPEN_FILES - 16 < report["opened"] < OPEN_FILES
    for opened, error in report["children"]:
        assert error == "EMFILE" and opened < OPEN_FILES
    # All five held theirs at once: at most the open files limit times the processes.
    total = report["opened"] + sum(opened for opened, _ in report["children"])
    assert total < OPEN_FILES * 5
    assert_serves(limited)


libc = ctypes.CDLL(None, use_errno=True)


def root_can_make_inotify_instance() -> bool:
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        return False
    os.close(fd)
    return True


def inotify_holders(server: Server, at_least: int) -> dict[int, int]:
    """The server's processes that hold at least `at_least` inotify instances: pid -> uid."""
    holders = {}
    for pid, _ in descendants(server.pid):
        try:
            count = sum(os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
                        for fd in os.listdir(f"/proc/{pid}/fd"))
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if count >= at_least:
            holders[pid] = int(re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE).group(1))
    return holders


def test_inotify_instances_are_counted_per_program_not_for_root_or_the_program_beside(limited):
    require(limited, OWN_USERS)
    if not root_can_make_inotify_instance():
        pytest.skip("root cannot make an inotify instance here even before the attack")
    per_user = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    results: list = []

    def attacker() -> None:
        results.append(run(limited, "inotify_instances", 4.0))

    attackers = [threading.Thread(target=attacker) for _ in range(2)]
    with victim_beside(limited):
        for thread in attackers:
            thread.start()
        holding = min(100, per_user, OPEN_FILES - 20)
        try:
            assert wait_until(lambda: len(inotify_holders(limited, holding)) == 2, 20), inotify_holders(limited, 1)
            uids = inotify_holders(limited, holding)
            # While both programs hold all they could make, root (this test) still can.
            root_could = root_can_make_inotify_instance()
        finally:
            for thread in attackers:
                thread.join(timeout=60)
    reports = [result.raise_for_error()["out"] for result in results]
    assert root_could
    # Each program runs as a user of its own outside, from the range, never root.
    assert len(set(uids.values())) == 2, uids
    assert all(FIRST_UID <= uid <= LAST_UID for uid in uids.values()), uids
    for report in reports:
        assert report["error"] == "EMFILE" and report["made"] >= holding, report
    if per_user < OPEN_FILES:  # the per-user count stopped them: each had one of its own
        assert sum(report["made"] for report in reports) > per_user, reports
    assert_serves(limited)


# -- scratch space -----------------------------------------------------------------------------


def test_300000_empty_files_stop_at_the_scratch_inodes(limited):
    inodes = SCRATCH // (16 << 10)
    with victim_beside(limited):
        report = run(limited, "many_files", 300_000).raise_for_error()["out"]
    assert report["inodes"] == inodes, report
    assert report["error"] == "ENOSPC" and inodes - 64 < report["made"] < inodes, report
    assert_serves(limited)


def memory_group(server: Server) -> Path | None:
    """The server's memory group, from its start line (cgroup v1 or v2); None without."""
    if "memory" in control_group_directories(server):
        return control_group_directories(server)["memory"]
    match = re.search(r"cgroup v2 \(([a-z, ]+)\) under (.+?)(?:; |\. Memory:)", limits_line(server))
    return Path(match.group(2)) if match and "memory" in match.group(1).split(", ") else None


def group_usage(directory: Path) -> dict[str, int]:
    """Memory held by each program group of the server's memory group."""
    groups = [*directory.glob("program-*"), *directory.glob("kcoral-*/program-*")]
    file = "memory.usage_in_bytes" if (directory / "memory.usage_in_bytes").exists() else "memory.current"
    return {group.name: int((group / file).read_text()) for group in groups}


def test_what_a_program_leaves_to_reclaim_is_reclaimed_off_the_worker_parents_thread(limited):
    # 500,000 negative dentries: about 200 MiB of kernel memory left in the program's
    # group, which is kept for the next program. Reclaiming three GiB of them took the
    # kernel four seconds, which the worker parent's one thread spent before forking any
    # tenant's next worker; a process of its own, kcoral-reclaim, does it now.
    require(limited, MEMORY_TOGETHER)
    memory = memory_group(limited)
    if memory is None:
        pytest.skip(f"no memory group: {limits_line(limited)}")
    tag = f"kcoral-test-{os.getpid()}-{time.monotonic_ns()}-"
    assert run(limited, "negative_dentries", 500_000, tag).raise_for_error()["out"] == 500_000

    def reclaimers() -> list[int]:
        return [pid for pid, _ in descendants(limited.pid)
                if Path(f"/proc/{pid}/comm").read_text().strip() == "kcoral-reclaim"]

    assert wait_until(lambda: len(reclaimers()) == 1, 10), "no kcoral-reclaim below the server"
    assert wait_until(lambda: max(group_usage(memory).values()) < 64 * MiB, 30), group_usage(memory)
    assert_serves(limited)


# -- what a program sees of its control group ---------------------------------------------


def test_the_program_sees_its_own_control_group_as_the_root_and_no_other_name(limited):
    # Its cgroup namespace is made in its own group: neither the server's group nor the
    # names of other programs' groups show.
    lines = run(limited, "own_cgroup").raise_for_error()["out"].splitlines()
    assert lines and all(line.rsplit(":", 1)[1] == "/" for line in lines), lines


# -- the start line ----------------------------------------------------------------------------


def test_the_start_line_names_the_control_groups_and_the_program_groups_hold_the_limits(limited):
    line = limits_line(limited)
    directories = control_group_directories(limited)
    if not directories:
        pytest.skip(f"not cgroup v1: {line}")
    assert set(directories) == {"memory", "pids", "cpu"}, line
    assert MEMORY_TOGETHER in line
    assert f"Processes: {PROCESSES} per program (control group)" in line
    assert f"Descriptors: {OPEN_FILES} per process, {OPEN_FILES * PROCESSES} per program at most" in line
    assert f"from {FIRST_UID}-{LAST_UID}" in line
    with victim_beside(limited):
        # The programs' groups: children of the server's, or of its fork helpers' in it.
        groups = {name: [*directory.glob("program-*"), *directory.glob("kcoral-*/program-*")]
                  for name, directory in directories.items()}
        memory = {path: (path / "memory.limit_in_bytes").read_text().strip() for path in groups["memory"]}
        swap = {path: (path / "memory.memsw.limit_in_bytes").read_text().strip() for path in groups["memory"]
                if (path / "memory.memsw.limit_in_bytes").exists()}
        pids = {path: (path / "pids.max").read_text().strip() for path in groups["pids"]}
        shares = {path: (path / "cpu.shares").read_text().strip() for path in groups["cpu"]}
        members = sum(len((path / "cgroup.procs").read_text().split()) for path in groups["memory"])
    # Groups are kept for the next programs: as many as were ever in use at once (3 live
    # workers, those being forked and those whose namespace is ending), whatever the
    # attacks before (killed for memory, fork bombs) did; not one per program that ended.
    # A group taken again has its limit raised by what it holds then: no program here
    # leaves tmpfs pages behind, and what can be reclaimed is, past 32 MiB.
    assert 1 <= len(memory) <= 8, memory
    assert all(MEMORY_LIMIT <= int(limit) <= MEMORY_LIMIT + 64 * MiB for limit in memory.values()), memory
    assert swap == {path: memory[path] for path in swap}, swap  # memory and swap together: no swap
    assert pids and set(pids.values()) == {str(PROCESSES)}, pids
    assert shares and set(shares.values()) == {"1024"}, shares
    assert members >= 1  # the victim's worker, at least


def test_a_stopped_server_leaves_no_control_group(start_server):
    server = start_server("--num-workers", "1")
    directories = list(control_group_directories(server).values())
    if not directories:
        pytest.skip(f"not cgroup v1: {limits_line(server)}")
    try:
        assert server.execute(call("def f():\n    return 1\n", "f")).raise_for_error()["out"] == 1
        assert all(directory.is_dir() for directory in directories)
        assert server.stop() == 0
        left = lambda: [str(path) for directory in directories if directory.exists()  # noqa: E731
                        for path in [directory, *directory.iterdir()] if path.is_dir()]
        assert wait_until(lambda: not left(), 2), left()
    finally:
        if server.process.poll() is None:
            server.stop()
        remove_groups(directories)


def test_the_start_line_says_when_no_control_group_can_be_made(start_server, tmp_path, monkeypatch):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1), to hide /sys/fs/cgroup from a server")
    # The server in a mount namespace of its own, where /sys/fs/cgroup is an empty tmpfs.
    wrapper = tmp_path / "kcoral-server-without-cgroups"
    wrapper.write_text("#!/bin/sh\n"
                       "exec unshare --mount --propagation private sh -c "
                       "'mount -t tmpfs kcoral-no-cgroups /sys/fs/cgroup && exec \"$0\" \"$@\"' "
                       f"{server_binary()} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("KCORAL_SERVER", str(wrapper))
    server = start_server("--num-workers", "1", "--memory-limit-bytes", str(MEMORY_LIMIT), "--preload", "numpy")
    line = limits_line(server)
    assert line.startswith("no control groups (no memory "), line  # v1: no hierarchy; v2: no controller
    assert f"Memory: per process only ({MEMORY_LIMIT >> 20} MiB of address space), not for a program's processes together" in line
    assert "CPU: no weight per program" in line
    assert_serves(server)
