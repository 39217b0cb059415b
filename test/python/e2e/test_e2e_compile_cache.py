"""Each tenant's compile cache, against a real server whose token file names two tenants,
alice and bob (kcoral-server/front/compile_caches.hpp):

- the tools' variables point into it; what one of alice's programs writes there, her next
  programs (each in a fresh worker) find, owned by their own user, and may replace; bob's
  programs never see it, nor alice's bob's; what a worker that crashed wrote stays;
- it is bounded: a program that writes more than --compile-cache-bytes gets ENOSPC, and
  after a program that leaves it more than three quarters full, its least recently used
  entries go (not those used within the last 30 s) until it is half full;
- the eviction, which runs as root outside the sandbox, never follows a link a program
  planted (a link to a directory of the host, inside an entry or as one), and removes a
  tree of 2,000 levels;
- a tenant's cache made to keep its trim walking (a tree of 25,000 directories dated ten
  years ahead, and one of its programs renaming that tree ahead of the walk each time the
  walk opens it) delays no other tenant's program, whose worker's cache is mounted on a
  thread that never trims (the dates keep nothing, and a trim's work is bounded);
- the pages a tenant's programs leave in its cache pin no removed control group per
  program (the programs' groups are kept and taken again), and a group that holds earlier
  programs' pages still gives each program its whole memory limit, and no more;
- a reused worker (--programs-per-worker) runs one tenant's programs only;
- with --compile-cache-bytes 0 the variables still point somewhere writable (the scratch
  space's stand-in), and nothing survives the program;
- the caches are mounted in the server's own mount namespace, never the host's (the
  harness checks every server for that), and go with its last process, SIGKILL included.

Each attack runs beside the other tenant's program, which must complete with its own result.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from pathlib import Path

import pytest
from e2e.harness import Server, wait_until
from e2e.programs import call

from adversarial.victim import victim_beside

pytestmark = pytest.mark.slow

MiB = 1 << 20
ALICE = secrets.token_urlsafe(24)
BOB = secrets.token_urlsafe(24)

CACHE = r'''
import errno, os, pathlib, time

def cache():
    return pathlib.Path(os.environ["TRITON_CACHE_DIR"])

def look(name):
    """What the cache holds under `name`, and who owns it, as this program sees it."""
    path = cache() / name
    entries = sorted(p.name for p in cache().iterdir()) if cache().is_dir() else []
    if not path.exists():
        return {"entries": entries, "text": None}
    return {"entries": entries, "text": path.read_text(), "owner": path.stat().st_uid, "uid": os.getuid()}

def put(name, text):
    """Writes `name` as the tools do: a temporary file renamed over it."""
    cache().mkdir(parents=True, exist_ok=True)
    temporary = cache() / f".{name}.{os.getpid()}"
    temporary.write_text(text)
    os.replace(temporary, cache() / name)
    return look(name)

def put_and_crash(name, text):
    put(name, text)
    os._exit(3)

def fill(megabytes):
    """Writes 1 MiB files until `megabytes` or the cache is full; the errno that stopped it."""
    directory = cache() / "fill"
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(megabytes):
        try:
            (directory / str(i)).write_bytes(b"x" * (1 << 20))
        except OSError as error:
            return {"written": i, "errno": errno.errorcode.get(error.errno)}
    return {"written": megabytes, "errno": None}

def entries(count, megabytes_each, age_seconds):
    """`count` entries of `megabytes_each`, last used `age_seconds` ago."""
    then = time.time() - age_seconds
    for i in range(count):
        entry = cache() / f"old{i}"
        entry.mkdir(parents=True, exist_ok=True)
        (entry / "kernel.cubin").write_bytes(b"x" * (megabytes_each << 20))
        os.utime(entry / "kernel.cubin", (then + i, then + i))
        os.utime(entry, (then + i, then + i))
    return sorted(p.name for p in cache().iterdir())

def listing():
    return sorted(p.name for p in cache().iterdir()) if cache().is_dir() else []

def pin(tops, children):
    """`tops` empty directories and, in the one the trim opens first, a directory T of
    `children` subdirectories, all dated ten years ahead, so that no date makes them old."""
    future = time.time() + 10 * 365 * 86400
    root = pathlib.Path(os.environ["KCORAL_COMPILE_CACHE"])
    for i in range(tops):
        (root / f"D{i:05d}").mkdir()
    pinned = root / f"D{tops - 1:05d}" / "T"  # a tmpfs lists its newest entries first
    pinned.mkdir()
    fd = os.open(pinned, os.O_RDONLY)
    for i in range(children):
        os.mkdir(str(i), dir_fd=fd)
        os.utime(str(i), (future, future), dir_fd=fd)
    os.close(fd)
    for path in [pinned, *root.iterdir()]:
        os.utime(path, (future, future))
    return os.listdir(root)[0]

def move_ahead(seconds):
    """Each time the trim (as root, outside the sandbox) opens T, renames T into the next
    top-level directory its walk has not read yet: a walk that follows it reads T once a
    top-level directory. For `seconds`, or until T is gone; the moves made."""
    import ctypes, select
    root = pathlib.Path(os.environ["KCORAL_COMPILE_CACHE"])
    order = os.listdir(root)
    where = next(i for i, name in enumerate(order) if (root / name / "T").is_dir())
    libc = ctypes.CDLL(None, use_errno=True)
    inotify = libc.inotify_init1(0)
    moves = 0
    deadline = time.time() + seconds
    while time.time() < deadline:
        watch = libc.inotify_add_watch(inotify, str(root / order[where] / "T").encode(), 0x20)  # IN_OPEN
        if watch < 0:
            break  # T is gone: the trim removed it
        if select.select([inotify], [], [], 0.5)[0]:
            os.read(inotify, 65536)
            try:
                os.rename(root / order[where] / "T", root / order[(where + 1) % len(order)] / "T")
            except OSError:
                break
            where = (where + 1) % len(order)
            moves += 1
        libc.inotify_rm_watch(inotify, watch)
    return moves

def append_page(name):
    """Appends one page to `name`, dated ten years ahead so that no trim takes it."""
    cache().mkdir(parents=True, exist_ok=True)
    with open(cache() / name, "ab") as out:
        out.write(b"x" * 4096)
    future = time.time() + 10 * 365 * 86400
    os.utime(cache() / name, (future, future))
    return (cache() / name).stat().st_size

def cache_then_allocate(name, cache_megabytes, megabytes, processes):
    """Leaves `cache_megabytes` in the cache, then `processes` processes together touch
    `megabytes` of memory, each holding its share until all have touched theirs."""
    cache().mkdir(parents=True, exist_ok=True)
    (cache() / name).write_bytes(b"x" * (cache_megabytes << 20))
    touched, release = os.pipe(), os.pipe()
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            os.close(release[1])
            block = b"\1" * ((megabytes // processes) << 20)
            os.write(touched[1], b"t")
            os.read(release[0], 1)  # until the parent closes it
            os._exit(0 if block else 1)
        children.append(pid)
    os.close(touched[1])
    count = 0
    while count < processes and os.read(touched[0], 1):  # empty: every child is gone
        count += 1
    os.close(release[1])
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]

def links_to(host_directory, megabytes):
    """Links to `host_directory` (a path of the host, not of this sandbox) as an entry, and
    inside one, both last used long ago; a tree 2,000 levels deep; then enough old data to
    make the next trim remove them all."""
    then = time.time() - 10_000
    cache().mkdir(parents=True, exist_ok=True)
    os.symlink(host_directory, cache() / "link_entry")
    inside = cache() / "entry_with_link"
    inside.mkdir()
    os.symlink(host_directory, inside / "link")
    deep = cache() / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(2000):
        os.mkdir("d", dir_fd=fd)
        os.utime(fd, (then, then))
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.utime(fd, (then, then))
    os.close(fd)
    for path in [inside / "link", cache() / "link_entry", inside, deep]:
        os.utime(path, (then, then), follow_symlinks=False)
    # The ballast, a little newer, goes last: everything above goes before it.
    (cache() / "ballast").mkdir()
    (cache() / "ballast" / "data").write_bytes(b"x" * (megabytes << 20))
    for path in [cache() / "ballast" / "data", cache() / "ballast"]:
        os.utime(path, (then + 100, then + 100))
    return listing()
'''


def run(server: Server, token: str, function: str, *args):
    with server.client(120, token=token) as client:
        return client.execute(call(CACHE, function, *args))


def result(server: Server, token: str, function: str, *args):
    return run(server, token, function, *args).raise_for_error()["out"]


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tenants") / "tokens"
    path.write_text(f"alice {ALICE}\nbob {BOB}\n")
    path.chmod(0o600)
    return path


def start(start_server, token_file: Path, *flags: str, workers: int = 2) -> Server:
    server = start_server("--num-workers", str(workers), "--token-file", str(token_file), *flags)
    if "compile caches: none, this host cannot have them" in server.stderr_text():
        pytest.skip("this host cannot mount the compile caches: " + server.stderr_text())
    return server


def test_a_tenants_programs_share_its_cache_and_no_other_tenant_sees_it(start_server, token_file):
    server = start(start_server, token_file)
    assert "compile caches: 1024 MiB per tenant" in server.stderr_text()
    with victim_beside(server, token=BOB):
        written = result(server, ALICE, "put", "kernel", "alice's kernel")
    assert written["owner"] == written["uid"] == 1000
    seen = result(server, ALICE, "look", "kernel")  # a fresh worker
    assert seen["text"] == "alice's kernel" and seen["owner"] == seen["uid"]
    replaced = result(server, ALICE, "put", "kernel", "alice's kernel, recompiled")
    assert replaced["text"] == "alice's kernel, recompiled"
    with victim_beside(server, token=ALICE):
        assert result(server, BOB, "look", "kernel") == {"entries": [], "text": None}
        result(server, BOB, "put", "kernel", "bob's kernel")
    assert result(server, ALICE, "look", "kernel")["text"] == "alice's kernel, recompiled"
    assert result(server, BOB, "look", "kernel")["text"] == "bob's kernel"
    # A worker that dies after writing: what it wrote stays.
    crashed = run(server, ALICE, "put_and_crash", "late", "written before the crash")
    assert crashed.error is not None
    assert result(server, ALICE, "look", "late")["text"] == "written before the crash"


def test_the_cache_is_bounded_and_trimmed_least_recently_used_first(start_server, token_file):
    server = start(start_server, token_file, "--compile-cache-bytes", str(16 * MiB))
    with victim_beside(server, token=BOB):
        filled = result(server, ALICE, "fill", 64)
    assert filled["errno"] == "ENOSPC" and filled["written"] <= 16, filled
    # That left it full: the trim after the program took its one entry, which was new, so
    # it stayed; once old entries fill it, the oldest go until it is half full.
    assert result(server, ALICE, "listing") == ["fill"]
    assert result(server, BOB, "listing") == []
    left = result(server, BOB, "entries", 14, 1, 1000)  # bob's own cache: 14 MiB, 1000 s old
    assert len(left) == 14
    # At most 8 MiB left (with the directories' own pages, 7 or 8 entries): the oldest went.
    newest_left = [{f"old{i}" for i in range(first, 14)} for first in (6, 7)]
    assert wait_until(lambda: set(result(server, BOB, "listing")) in newest_left, 10), result(server, BOB, "listing")
    assert result(server, ALICE, "listing") == ["fill"]  # alice's untouched


def test_the_trim_never_follows_a_link_and_removes_deep_trees(start_server, token_file, tmp_path):
    server = start(start_server, token_file, "--compile-cache-bytes", str(64 * MiB))  # 4,096 inodes
    host = tmp_path / "host"
    (host / "deeper").mkdir(parents=True)
    (host / "canary").write_text("keep me")
    (host / "deeper" / "canary").write_text("keep me too")
    with victim_beside(server, token=BOB):
        planted = result(server, ALICE, "links_to", str(host), 50)
    assert {"link_entry", "entry_with_link", "deep", "ballast"} <= set(planted)
    # The trim after that program removed everything old: the links as links.
    assert wait_until(lambda: result(server, ALICE, "listing") == [], 20), result(server, ALICE, "listing")
    assert (host / "canary").read_text() == "keep me"
    assert (host / "deeper" / "canary").read_text() == "keep me too"


def test_a_cache_made_to_walk_without_end_delays_no_other_tenant(start_server, token_file):
    server = start(start_server, token_file, workers=4)  # 65,536 inodes: a trim past 49,152
    result(server, ALICE, "pin", 25_000, 25_000)
    moves: dict = {}

    def mover() -> None:
        moves["count"] = result(server, ALICE, "move_ahead", 25)

    thread = threading.Thread(target=mover)
    thread.start()
    time.sleep(1)
    result(server, ALICE, "listing")  # a trim after it, which would follow T from directory to directory
    time.sleep(1)
    # Bob's programs take fresh workers, whose caches are mounted meanwhile. Before, the one
    # thread that mounts them walked alice's tree 25,000 times over (hours).
    for _ in range(3):
        with server.client(20, token=BOB) as client:
            assert client.execute(call(CACHE, "listing")).raise_for_error()["out"] == []
    thread.join(60)
    assert isinstance(moves.get("count"), int), moves
    assert result(server, ALICE, "listing") == []  # and alice is still served


def memory_cgroups() -> int:
    """The host's memory control groups, removed ones the kernel still keeps included."""
    for line in Path("/proc/cgroups").read_text().splitlines():
        fields = line.split()
        if fields[0] == "memory" and fields[3] == "1":
            return int(fields[2])
    pytest.skip("no memory controller here")


def test_pages_left_in_the_cache_pin_no_removed_control_group_per_program(start_server, token_file):
    # A page a program writes into its tenant's cache is charged to its memory control group
    # for as long as the page lives; removed, the group stayed in the kernel (about 16.5 kB
    # a program on 2 CPUs, more per CPU, outside every limit), one per page of the cache.
    # Groups are kept for the next programs instead: as many as were in use at once. The
    # count is the host's, so the bound leaves room for other groups made meanwhile.
    server = start(start_server, token_file, workers=2)
    if "each program in a control group of its own" not in server.stderr_text():
        pytest.skip("no control groups here: " + server.stderr_text())
    result(server, ALICE, "append_page", "pinned")
    before = memory_cgroups()
    programs = 200
    with server.client(60, token=ALICE) as client:
        for _ in range(programs):
            client.execute(call(CACHE, "append_page", "pinned")).raise_for_error()
    assert result(server, ALICE, "append_page", "pinned") == (programs + 2) * 4096
    grown = memory_cgroups() - before
    assert grown < programs // 4, f"{grown} more memory control groups after {programs} programs"


def test_a_group_kept_with_the_cache_pages_of_earlier_programs_gives_each_its_whole_limit(
        start_server, token_file):
    # Each program leaves 320 MiB in the cache and touches 640 MiB in two processes, of a
    # 1 GiB limit: a group that kept an earlier program's pages would, without its limit
    # raised by them, kill the next program in it for memory.
    limit = 1024 * MiB
    server = start(start_server, token_file, "--memory-limit-bytes", str(limit), "--preload", "numpy",
                   "--compile-cache-bytes", str(2048 * MiB), workers=1)
    if "for all of a program's processes together" not in server.stderr_text():
        pytest.skip("no memory control group per program here: " + server.stderr_text())
    for i in range(4):
        assert result(server, ALICE, "cache_then_allocate", f"entry{i}", 320, 640, 2) == [0, 0]
    # Still no more than its limit: 1200 MiB in three processes is killed, in whichever
    # group it runs.
    over = run(server, ALICE, "cache_then_allocate", "last", 1, 1200, 3)
    assert over.status == "FAILED" and "memory limit of 1024 MiB" in over.error["message"], over


def test_a_reused_worker_runs_one_tenants_programs_only(start_server, token_file):
    server = start(start_server, token_file, "--programs-per-worker", "8", workers=1)
    mark = (
        "import builtins\n"
        "def mark(tenant):\n"
        "    seen = getattr(builtins, 'kcoral_test_tenants', [])\n"
        "    builtins.kcoral_test_tenants = seen + [tenant]\n"
        "    return seen\n"
    )
    reused = False
    for tenant, token in [("alice", ALICE), ("bob", BOB), ("alice", ALICE), ("bob", BOB), ("bob", BOB)]:
        with server.client(60, token=token) as client:
            before = client.execute(call(mark, "mark", tenant)).raise_for_error()["out"]
        assert set(before) <= {tenant}, (tenant, before)
        reused = reused or bool(before)
    assert reused, "no worker was reused at all"


def test_without_a_cache_the_tools_write_to_the_scratch_space(start_server, token_file):
    server = start_server("--num-workers", "1", "--token-file", str(token_file), "--compile-cache-bytes", "0")
    assert "compile caches: none (--compile-cache-bytes 0)" in server.stderr_text()
    assert result(server, ALICE, "put", "kernel", "compiled")["text"] == "compiled"
    assert result(server, ALICE, "look", "kernel") == {"entries": [], "text": None}


def mount_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def test_the_caches_are_the_servers_alone_and_go_with_it_however_it_ends(start_server, token_file):
    server = start(start_server, token_file)
    result(server, ALICE, "put", "kernel", "x")
    result(server, BOB, "put", "kernel", "y")
    root = str(server.work_root) + "/"
    # Mounted in the server's own mount namespace, never in the host's.
    namespace = mount_namespace(server.pid)
    assert namespace is not None and namespace != mount_namespace("self")
    theirs = [line for line in Path(f"/proc/{server.pid}/mountinfo").read_text().splitlines() if root in line]
    assert len(theirs) >= 3, theirs  # the caches' root and one cache per tenant
    assert not [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if root in line]
    # Killed at once, the server unmounts nothing itself: once its last process is gone,
    # so is its namespace, and with it the caches (and the memory they held).
    os.kill(server.pid, signal.SIGKILL)

    def in_namespace() -> list[int]:
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and mount_namespace(p) == namespace]

    assert wait_until(lambda: not in_namespace(), 20), in_namespace()
