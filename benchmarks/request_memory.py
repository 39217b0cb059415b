"""What one large upload costs the front in memory: its peak resident set, chunked and with
a declared length, side by side.

Starts a CPU server (``--server``, default the one beside this interpreter), sends it a
program that uploads one blob of ``--mib`` MiB, first with ``Content-Length``, then with
``Transfer-Encoding: chunked`` (64 KiB chunks), each on a fresh server, and reports the
server process's peak resident set (VmHWM) and the peak of its resident set plus the
system's shared memory (the blob's memfd is shared memory, outside any resident set),
sampled every 5 ms.

    .venv/bin/python benchmarks/request_memory.py --mib 255 [--json benchmarks/results/...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import server_process


def shmem_kib() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("Shmem:"):
            return int(line.split()[1])
    return 0


def status_kib(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def request_body(mib: int) -> tuple[bytes, bytes]:
    blob = os.urandom(1 << 20) * mib
    digest = hashlib.sha256(blob).hexdigest()
    program = json.dumps({"instructions": [{"op": "upload", "id": "b", "kind": "bytes", "blob": digest}]}).encode()
    boundary = b"kcoral-request-memory"
    body = (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="program"\r\n'
            b"Content-Type: application/json\r\n\r\n" + program + b"\r\n--" + boundary +
            b'\r\nContent-Disposition: form-data; name="blob:' + digest.encode() +
            b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + blob + b"\r\n--" + boundary + b"--\r\n")
    return boundary, body


def measure(server: str, mode: str, boundary: bytes, body: bytes) -> dict[str, float]:
    process, port = server_process.start([server, "--port", "0", "--num-workers", "1", "--sandbox", "none"])
    try:
        base_shmem, peak, stop = shmem_kib(), [0], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], status_kib(process.pid, "VmRSS") + shmem_kib() - base_shmem)
                time.sleep(0.005)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            head = b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=" + boundary
            if mode == "chunked":
                sock.sendall(head + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
                for at in range(0, len(body), 1 << 16):
                    chunk = body[at:at + (1 << 16)]
                    sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sock.sendall(b"0\r\n\r\n")
            else:
                sock.sendall(head + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            answer = sock.recv(64)
        seconds = time.monotonic() - started
        time.sleep(0.2)
        stop.set()
        sampler.join()
        assert answer.startswith(b"HTTP/1.1 200"), answer
        return {"seconds": seconds, "peak_rss_mb": status_kib(process.pid, "VmHWM") / 1024,
                "peak_rss_plus_shmem_mb": peak[0] / 1024}
    finally:
        server_process.terminate(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=str(Path(sys.executable).with_name("kcoral-server")))
    parser.add_argument("--mib", type=int, default=255, help="the blob's size (the body is a little more)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    boundary, body = request_body(args.mib)
    rows = {mode: measure(args.server, mode, boundary, body) for mode in ("content-length", "chunked")}
    print(f"one upload of {len(body) / (1 << 20):.1f} MiB, server {args.server}")
    print(f"{'body':<16}{'seconds':>9}{'peak RSS MB':>13}{'peak RSS+shmem MB':>19}")
    for mode, row in rows.items():
        print(f"{mode:<16}{row['seconds']:>9.2f}{row['peak_rss_mb']:>13.0f}{row['peak_rss_plus_shmem_mb']:>19.0f}")
    if args.json:
        args.json.write_text(json.dumps({"body_bytes": len(body), "server": args.server, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
