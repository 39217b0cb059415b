"""The sampler of benchmarks/load.py: a process of its own that reads the server's memory,
descriptors and CPU from /proc, and probes GET /health, while the load runs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import resource
import socket
import threading
import time
from collections import Counter, defaultdict
from typing import Any

HEALTH_INTERVAL_S = 0.1
HEALTH_TIMEOUT_S = 10.0


def http_get(host: str, port: int, path: str, timeout: float) -> tuple[int, bytes]:
    """One GET on a fresh connection (blocking), for /health and /metrics."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                     "Connection: close\r\n\r\n".encode())
        data = bytearray()
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    if not head:
        raise ConnectionError("closed without a response")
    return int(head.split(None, 2)[1]), body


def _statm_rss(pid: int, page: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * page


def _tree(root: int) -> list[int]:
    children: defaultdict[int, list[int]] = defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            children[int(stat[stat.rfind(b")") + 2:].split()[1])].append(int(name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending += children.get(pid, [])
    return tree


def _tcp_inodes(pid: int) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
            inodes |= {line.split()[9] for line in list(f)[1:]}
    return inodes


def fd_kinds(pid: int) -> dict[str, int]:
    """The front's open descriptors by kind: tcp (the listener and connections), socket
    (the others: its workers' channels), memfd (cached blobs), pipe, anon_inode, file."""
    kinds: Counter[str] = Counter()
    tcp = _tcp_inodes(pid)
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                kinds["tcp" if target[8:-1] in tcp else "socket"] += 1
            else:
                kinds["memfd" if target.startswith("/memfd:") else "file" if target.startswith("/")
                      else target.split(":")[0]] += 1
    return dict(kinds)


def settle(pid: int, tcp_before: int, limit_s: float = 10) -> tuple[float, int]:
    """Waits until the front holds no more TCP sockets than before the load (connections
    it still closes), up to ``limit_s``; the seconds it took and its descriptor count
    then. (Cached blobs keep a descriptor each: those stay.)"""
    start = time.monotonic()
    while True:
        if (fd_kinds(pid).get("tcp", 0) <= tcp_before
                or time.monotonic() - start > limit_s):
            return time.monotonic() - start, len(os.listdir(f"/proc/{pid}/fd"))
        time.sleep(0.1)


def tree_cpu_seconds(root: int) -> float:
    """CPU time of a process tree so far: each live member's own and its reaped
    children's, so that workers that came and went are counted through their parents."""
    ticks = 0
    for pid in _tree(root):
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
            ticks += sum(int(x) for x in stat[stat.rfind(b")") + 2:].split()[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine so far (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def status_field(pid: int, field: str) -> int:
    """A ``kB`` field of /proc/PID/status, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def sampler(pid: int, host: str, port: int, sample_s: float, stop: Any,
            out: multiprocessing.connection.Connection) -> None:
    """The sampling process: resources of the server, and /health latency, until ``stop``.

    A process of its own, so that neither the load's event loop nor its GIL delays it."""
    page = os.sysconf("SC_PAGE_SIZE")
    start = time.monotonic()
    series: dict[int, dict[str, int]] = {}  # per second: peaks
    peaks = {"front_rss": 0, "front_fds": 0, "tree_rss": 0, "tree_processes": 0}
    health: list[tuple[float, float, str]] = []  # (s since start, ms, outcome)

    def resources() -> None:
        tick = 0
        while not stop.is_set():
            now = time.monotonic()
            sample = {}
            with contextlib.suppress(OSError, ValueError):
                sample["front_rss"] = _statm_rss(pid, page)
                sample["front_fds"] = len(os.listdir(f"/proc/{pid}/fd"))
            if tick % 2 == 0:
                rss = processes = 0
                for member in _tree(pid):
                    with contextlib.suppress(OSError, ValueError):
                        rss += _statm_rss(member, page)
                        processes += 1
                sample["tree_rss"], sample["tree_processes"] = rss, processes
            second = series.setdefault(int(now - start), {})
            for key, value in sample.items():
                peaks[key] = max(peaks[key], value)
                second[key] = max(second.get(key, 0), value)
            tick += 1
            time.sleep(max(0.0, sample_s - (time.monotonic() - now)))

    def probes() -> None:
        while not stop.is_set():
            now = time.monotonic()
            try:
                status, _ = http_get(host, port, "/health", HEALTH_TIMEOUT_S)
                outcome = str(status)
            except (OSError, ValueError, IndexError) as error:
                outcome = type(error).__name__
            health.append((now - start, (time.monotonic() - now) * 1e3, outcome))
            time.sleep(max(0.0, HEALTH_INTERVAL_S - (time.monotonic() - now)))

    threads = [threading.Thread(target=resources), threading.Thread(target=probes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.send({"peaks": peaks, "health": health, "cpu_s": own_cpu_seconds(),
              "series": [{"s": s, **values} for s, values in sorted(series.items())]})
