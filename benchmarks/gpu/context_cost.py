"""What a fresh GPU worker pays before its first program, phase by phase, and how many
fresh CUDA contexts one GPU gives per second.

    python benchmarks/gpu/context_cost.py [--seconds S] [--in-flight 1,2,4,8]
                                          [--variant "KIND [NAME=VALUE ...]" ...] [--json FILE]

Mirrors the server's zygote: this process imports torch without touching CUDA, then forks
children that each make their CUDA context and exit. It prints

- per phase (cuInit, the primary context, torch's CUDA init, torch's first copy and
  kernels, and the exit that tears the context down), the median over the children;
- how much the children's context creation overlapped in time (1.0: fully serialized);
- the steady rate: K children in flight at all times, each replaced as soon as it exits,
  for S seconds, in completed children per second.

for each variant: a kind of child, `driver` (cuInit and the primary context only) or `torch`
(also torch's CUDA init and first copy and kernels, as a server worker does), and the
environment it makes its context in. By default: both kinds, each as CUDA makes it and with
CUDA_DEVICE_MAX_CONNECTIONS=1 (fewer hardware queues per context). A long-lived holder
process keeps a context open throughout, as a server's other workers do.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time

import torch  # imported before forking, as the zygote does; CUDA is not touched here

CUDA = ctypes.CDLL("libcuda.so.1")


def child(kind: str, env: dict[str, str], write_fd: int) -> None:
    os.environ.update(env)
    stamps = {"start": time.perf_counter()}
    assert CUDA.cuInit(0) == 0
    stamps["cuInit"] = time.perf_counter()
    device, context = ctypes.c_int(), ctypes.c_void_p()
    assert CUDA.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert CUDA.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    assert CUDA.cuCtxSetCurrent(context) == 0
    stamps["primary_context"] = time.perf_counter()
    if kind == "torch":
        torch.cuda.init()
        stamps["torch_cuda_init"] = time.perf_counter()
        values = torch.arange(256, dtype=torch.float32).to("cuda")
        (values + 1).sum().item()
        torch.cuda.synchronize()
        stamps["first_copy_and_kernels"] = time.perf_counter()
    os.write(write_fd, json.dumps(stamps).encode())
    os._exit(0)


def spawn(kind: str, env: dict[str, str]) -> tuple[int, int, float]:
    read_fd, write_fd = os.pipe()
    forked = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            child(kind, env, write_fd)
        finally:
            os._exit(1)
    os.close(write_fd)
    return pid, read_fd, forked


def reap_one(children: dict[int, tuple[int, float]]) -> dict[str, float]:
    pid, status = os.waitpid(-1, 0)
    reaped = time.perf_counter()
    read_fd, forked = children.pop(pid)
    data = os.read(read_fd, 4096)
    os.close(read_fd)
    if status != 0 or not data:
        raise RuntimeError(f"child {pid} failed with status {status}")
    stamps = json.loads(data)
    phases, previous = {"fork": stamps["start"] - forked}, stamps["start"]
    for name, value in stamps.items():
        if name != "start":
            phases[name], previous = value - previous, value
    phases["exit"] = reaped - previous
    phases["context_interval"] = (stamps["cuInit"], stamps["primary_context"])
    return phases


def overlap(intervals: list[tuple[float, float]]) -> float:
    """Sum of the intervals' lengths over the length of their union: 1.0 when they never
    overlap (serialized), up to len(intervals) when they all coincide."""
    intervals = sorted(intervals)
    union, end = 0.0, float("-inf")
    for a, b in intervals:
        union += max(0.0, b - max(a, end))
        end = max(end, b)
    return sum(b - a for a, b in intervals) / union if union else 0.0


def burst(kind: str, env: dict[str, str], count: int) -> dict:
    children = {}
    for _ in range(count):
        pid, read_fd, forked = spawn(kind, env)
        children[pid] = (read_fd, forked)
    results = [reap_one(children) for _ in range(count)]
    medians = {name: round(statistics.median(r[name] for r in results) * 1e3, 1)
               for name in results[0] if name != "context_interval"}
    medians["context_overlap"] = round(overlap([r["context_interval"] for r in results]), 2)
    return medians


def steady(kind: str, env: dict[str, str], in_flight: int, seconds: float) -> float:
    children, done = {}, 0
    start = time.perf_counter()
    deadline = start + seconds
    for _ in range(in_flight):
        pid, read_fd, forked = spawn(kind, env)
        children[pid] = (read_fd, forked)
    while children:
        reap_one(children)
        if time.perf_counter() < deadline:
            done += 1
            pid, read_fd, forked = spawn(kind, env)
            children[pid] = (read_fd, forked)
    return round(done / seconds, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each steady run")
    parser.add_argument("--in-flight", default="1,2,4,8", help="steady runs: children in flight")
    parser.add_argument("--variant", action="append", help='"KIND [NAME=VALUE ...]", repeatable')
    parser.add_argument("--json")
    args = parser.parse_args()
    variants = args.variant or ["driver", "driver CUDA_DEVICE_MAX_CONNECTIONS=1",
                                "torch", "torch CUDA_DEVICE_MAX_CONNECTIONS=1"]

    holder_read, holder_write = os.pipe()
    holder = os.fork()
    if holder == 0:  # keeps a context open, as a server's other workers do
        assert CUDA.cuInit(0) == 0
        device, context = ctypes.c_int(), ctypes.c_void_p()
        CUDA.cuDeviceGet(ctypes.byref(device), 0)
        CUDA.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
        os.read(holder_read, 1)
        os._exit(0)

    report = {}
    for name in variants:
        kind, *assignments = name.split()
        env = dict(assignment.split("=", 1) for assignment in assignments)
        entry = report[name] = {}
        for count in (1, 8):
            entry[f"burst {count}"] = burst(kind, env, count)
            print(name, f"| burst of {count}:", entry[f"burst {count}"], "(ms, medians)", flush=True)
        for in_flight in map(int, args.in_flight.split(",")):
            entry[f"steady {in_flight}"] = steady(kind, env, in_flight, args.seconds)
            print(name, f"| steady, {in_flight} in flight:", entry[f"steady {in_flight}"], "children/s", flush=True)
    os.write(holder_write, b"x")
    os.waitpid(holder, 0)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
