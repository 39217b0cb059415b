"""What a fresh GPU worker pays before its first program, phase by phase.

    python benchmarks/gpu/context_cost.py [processes]

Starts `processes` fresh Python processes at once (default 1, then 8) that each time
cuInit, making the device's primary context, torch's CUDA init, and torch's first copy
and kernels, and prints the medians: which of these is slow, and which of them gets
slower when several processes do it together (the driver serializing it).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

CHILD = r"""
import ctypes, json, time
cuda = ctypes.CDLL("libcuda.so.1")
t0 = time.perf_counter()
assert cuda.cuInit(0) == 0
t1 = time.perf_counter()
device = ctypes.c_int()
context = ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
assert cuda.cuCtxSetCurrent(context) == 0
t2 = time.perf_counter()
import torch
t3 = time.perf_counter()
torch.cuda.init()
t4 = time.perf_counter()
values = torch.arange(256, dtype=torch.float32).to("cuda")
(values + 1).sum().item()
torch.cuda.synchronize()
t5 = time.perf_counter()
print(json.dumps({"cuInit": t1 - t0, "primary_context": t2 - t1, "import_torch": t3 - t2,
                  "torch_cuda_init": t4 - t3, "first_copy_and_kernels": t5 - t4}))
"""


def run(processes: int) -> dict[str, float]:
    children = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
                for _ in range(processes)]
    phases = [json.loads(child.communicate()[0]) for child in children]
    return {name: statistics.median(p[name] for p in phases) * 1e3 for name in phases[0]}


if __name__ == "__main__":
    for count in ([int(sys.argv[1])] if len(sys.argv) > 1 else [1, 8]):
        print(count, "at once:", {k: round(v, 1) for k, v in run(count).items()}, "(ms, medians)")
