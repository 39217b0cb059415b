"""What the front holds beyond the bytes it counts: a large answer, a program of many literal
arguments, a request of many tiny blobs; two builds side by side.

For each shape, a fresh CPU server (``--server``, default the one beside this interpreter;
``--old-server`` adds an earlier build's, measured the same way in the same run) gets one
request, and the report gives the front process's peak resident growth (VmHWM, from just
before the request), the most of it the in-flight budget counted (``kcoral_inflight_bytes``
sampled every 20 ms), its CPU time, the wall time from sending to the last byte, and the
answer's HTTP status:

- ``answer``: a program returns a string of ``--answer-mb`` MB (its worker's frame, its
  decoding and its answer are the front's);
- ``arguments``: one run of ``--arguments`` literal arguments ``0`` (parsed by the front,
  and kept while the program waits or runs);
- ``blobs``: ``--blobs`` distinct blobs of 16 bytes in one request (their parts, their
  digests, the cache's copies);
- ``output``: a program prints ``--output-mb`` MB (its output limit and the server's
  raised to take it all).

    .venv/bin/python benchmarks/front_memory.py [--old-server OLD/kcoral-server] [--shapes answer,output]
        [--json FILE]
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
import urllib.request
from pathlib import Path

import server_process

MODULE = ("def text(n):\n    return 'a' * n\n\ndef count(*args):\n    return len(args)\n\n"
          "def shout(n):\n    import sys\n    sys.stdout.write('a' * n)\n    return n\n")


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def program(function: str, args: str, uploads: list[bytes]) -> dict[str, object]:
    instructions: list[dict[str, object]] = [
        {"op": "upload", "id": "m", "kind": "module", "source": MODULE},
        {"op": "get_function", "id": "f", "module": {"$ref": "m"}, "name": function}]
    instructions += [{"op": "upload", "id": f"b{i}", "kind": "bytes",
                      "blob": hashlib.sha256(data).hexdigest()} for i, data in enumerate(uploads)]
    instructions += [{"op": "run", "id": "r", "fn": {"$ref": "f"}, "args": "ARGS"},
                     {"op": "return", "key": "out", "value": {"$ref": "r"}}]
    return {"instructions": instructions, "args": args}


def request(shape: str, options: argparse.Namespace) -> tuple[bytes, bytes]:
    """(content type, body) of the shape's request, written by hand: the client would
    build each literal as a Python object first."""
    if shape == "answer":
        spec = program("text", str(int(options.answer_mb * 1e6)), [])
    elif shape == "arguments":
        spec = program("count", ",".join(["0"] * options.arguments), [])
    elif shape == "output":
        spec = program("shout", str(int(options.output_mb * 1e6)), [])
        spec["options"] = {"output_limit_bytes": int(options.output_mb * 1e6)}
    else:
        uploads = [b"blob %011d" % i for i in range(options.blobs)]
        spec = program("count", "", uploads)
    args = str(spec.pop("args"))
    text = json.dumps(spec, separators=(",", ":")).replace('"args":"ARGS"', '"args":[' + args + "]").encode()
    boundary = b"front-memory-boundary"
    parts = [b"--" + boundary + b'\r\nContent-Disposition: form-data; name="program"\r\n'
             b"Content-Type: application/json\r\n\r\n" + text]
    if shape == "blobs":
        for i in range(options.blobs):
            data = b"blob %011d" % i
            parts.append(b"\r\n--" + boundary + b'\r\nContent-Disposition: form-data; name="blob:' +
                         hashlib.sha256(data).hexdigest().encode() + b'"\r\n'
                         b"Content-Type: application/octet-stream\r\n\r\n" + data)
    body = b"".join(parts) + b"\r\n--" + boundary + b"--\r\n"
    return b"multipart/form-data; boundary=" + boundary, body


def measure(server: str, shape: str, options: argparse.Namespace) -> dict[str, object]:
    content_type, body = request(shape, options)
    flags = ["--max-output-limit-bytes", str(int(options.output_mb * 1e6))] if shape == "output" else []
    process, port = server_process.start([server, "--port", "0", "--num-workers", "1", "--sandbox", "none", *flags])
    try:
        time.sleep(1)  # its first worker ready
        counted, done = [0.0], threading.Event()

        def sample() -> None:
            while not done.is_set():
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as metrics:
                    for line in metrics.read().decode().splitlines():
                        if line.startswith("kcoral_inflight_bytes "):
                            counted[0] = max(counted[0], float(line.split()[1]))
                done.wait(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        before, cpu = status_kib(process.pid, "VmHWM"), cpu_seconds(process.pid)
        started = time.monotonic()
        answer = bytearray()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            head = (b"POST /execute HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    b"Content-Type: " + content_type + b"\r\nContent-Length: " + str(len(body)).encode() +
                    b"\r\n\r\n")
            sock.sendall(head + body)
            while chunk := sock.recv(1 << 20):
                answer += chunk
        wall = time.monotonic() - started
        done.set()
        sampler.join()
        return {"shape": shape, "request_mb": round(len(body) / 1e6, 2),
                "answer_mb": round(len(answer) / 1e6, 2),
                "http_status": int(answer.split(b" ", 2)[1]) if answer else 0,
                "front_peak_growth_mb": round((status_kib(process.pid, "VmHWM") - before) * 1024 / 1e6, 1),
                "counted_peak_mb": round(counted[0] / 1e6, 1),
                "front_cpu_s": round(cpu_seconds(process.pid) - cpu, 2), "wall_s": round(wall, 2)}
    finally:
        server_process.terminate(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=str(Path(sys.executable).parent / "kcoral-server"))
    parser.add_argument("--old-server", help="an earlier build's kcoral-server, measured beside it")
    parser.add_argument("--answer-mb", type=float, default=240)
    parser.add_argument("--arguments", type=int, default=4_000_000)
    parser.add_argument("--blobs", type=int, default=99_990)  # with the program: within 100,000 parts
    parser.add_argument("--output-mb", type=float, default=32)
    parser.add_argument("--shapes", default="answer,arguments,blobs,output")
    parser.add_argument("--json", help="also write the rows here")
    options = parser.parse_args()
    rows = []
    for shape in options.shapes.split(","):
        for label, server in (("old", options.old_server), ("this", options.server)):
            if server is None:
                continue
            row = {"server": label, **measure(server, shape, options)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
