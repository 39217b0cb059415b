"""Workers forked side by side (--fork-parents), on a real server: the worker parent's
helpers fork the workers, every live worker runs as an outside user of its own whichever
helper forked it, a helper that dies brings a new worker parent and the next program is
served, and the server's stop leaves nothing behind (its process tree, checked by the
fixture).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from e2e.harness import descendants, wait_until
from e2e.programs import call

from adversarial.test_worker_starts import children, is_worker
from adversarial.victim import assert_serves

pytestmark = pytest.mark.slow

SLEEPS = call("import time\ndef f():\n    time.sleep(0.3)\n    return 1\n", "f")


def worker_parent(server_pid: int) -> int:
    """The server's worker parent: its one child that is a Python process."""
    found = [pid for pid in children(server_pid) if "python" in _command(pid)]
    assert len(found) == 1, found
    return found[0]


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def outside_uid(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:")), None)


def test_helpers_fork_the_workers_each_as_a_user_of_its_own(start_server):
    # 30 ids, 10 a helper: helpers drawing from the whole range, each from where it happens to
    # start, would share some of them over 24 programs.
    server = start_server("--num-workers", "6", "--fork-parents", "3",
                          "--sandbox-uid-range", "1879048192-1879048221")
    parent = worker_parent(server.pid)
    helpers = children(parent)
    assert len(helpers) == 3 and all("python" in _command(pid) for pid in helpers), helpers
    # Programs that take a while, so that many workers live at once; look at them meanwhile.
    seen: dict[int, set[int]] = {}  # helper -> workers
    uids: dict[int, set[int]] = {}  # helper -> its workers' outside uids
    uids_together: list[dict[int, int]] = []  # live worker -> its outside uid, per look
    stop = threading.Event()

    def look() -> None:
        while not stop.is_set():
            live = {}
            for helper in helpers:
                for pid in children(helper):
                    if is_worker(pid):
                        seen.setdefault(helper, set()).add(pid)
                        if uid := outside_uid(pid):  # 0: still setting up, not yet its user
                            live[pid] = uid
                            uids.setdefault(helper, set()).add(uid)
            uids_together.append(live)
            time.sleep(0.01)

    looker = threading.Thread(target=look, daemon=True)
    looker.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            outcomes = list(pool.map(lambda _: server.execute(SLEEPS).raise_for_error()["out"], range(24)))
    finally:
        stop.set()
        looker.join()
    assert outcomes == [1] * 24
    assert len(seen) == 3, seen  # every helper forked some
    assert not children(parent) or set(children(parent)) == set(helpers)  # the worker parent forked none
    if os.geteuid() == 0:  # a root server gives each worker an outside user of its own
        first, *rest = uids.values()
        assert len(uids) == 3 and not first.intersection(*rest) and not rest[0] & rest[1], uids
        for live in uids_together:
            assert len(set(live.values())) == len(live), live
        assert any(len(live) >= 4 for live in uids_together), uids_together


def test_a_helper_killed_brings_a_new_worker_parent_and_the_next_program_is_served(start_server):
    server = start_server("--num-workers", "2", "--fork-parents", "2")
    assert_serves(server)
    parent = worker_parent(server.pid)
    helper = children(parent)[0]
    # The worker parent's control groups, as the start line names them; each helper has its
    # own inside them, which a killed one cannot remove: the worker parent does.
    groups = [Path(found) for found in re.findall(rf"(/\S+/kcoral-{parent})\b", server.stderr_text())]
    helper_groups = [group / f"kcoral-{helper}" for group in groups]
    if "each program in a control group of its own" in server.stderr_text():
        assert helper_groups and all(group.is_dir() for group in helper_groups), helper_groups
    os.kill(helper, signal.SIGKILL)
    assert wait_until(lambda: parent not in [pid for pid, _ in descendants(server.pid)], 10)
    assert wait_until(lambda: "worker parent restarted" in server.stderr_text(), 30), server.stderr_text()
    assert_serves(server)
    assert "a helper of the worker parent exited" in server.stderr_text()
    assert len(children(worker_parent(server.pid))) >= 2
    assert not [group for group in helper_groups if group.exists()]



@pytest.mark.parametrize("fork_parents", [1, 2])
def test_a_killed_worker_parent_leaves_no_control_groups(start_server, fork_parents):
    # SIGKILL: the worker parent cannot remove its control groups; the front does, when it
    # starts the next one (its helpers', too, where they were killed and could not).
    server = start_server("--num-workers", "2", "--fork-parents", str(fork_parents))
    assert_serves(server)
    if "each program in a control group of its own" not in server.stderr_text():
        pytest.skip("no control groups on this machine: " + server.stderr_text())
    parent = worker_parent(server.pid)
    helpers = children(parent) if fork_parents > 1 else []
    # The worker parent's groups, as the start line names them, and each helper's inside them.
    groups = [Path(found) for found in re.findall(rf"(/\S+/kcoral-{parent})\b", server.stderr_text())]
    left = groups + [group / f"kcoral-{helper}" for group in groups for helper in helpers]
    assert len(helpers) == (fork_parents if fork_parents > 1 else 0), helpers
    assert groups and all(group.is_dir() for group in left), left
    os.kill(parent, signal.SIGKILL)
    assert wait_until(lambda: "worker parent restarted" in server.stderr_text(), 30), server.stderr_text()
    assert_serves(server)
    assert not [group for group in left if group.exists()]
