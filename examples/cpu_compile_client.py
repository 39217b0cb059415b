"""Compile a CUDA kernel on a CPU server, check a reference, and bring the binary back.

KCORAL_URL=http://localhost:8000 python examples/cpu_compile_client.py

A CPU server runs the uploaded compiler code: here it builds a CUDA C kernel with the
server's nvcc for the architecture given (sm_90a, the H200's, unless KCORAL_ARCH says
otherwise), reports the registers ptxas assigned, and times a numpy reference of the
same computation. The compiled cubin comes back as a file, ready to upload to a GPU
server. A server without nvcc still runs the rest and says so.
"""

from __future__ import annotations

import os

import numpy as np

from kcoral import Client, Program

CUDA_KERNEL = r"""
__global__ void add_one(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
"""

OPERATIONS = r"""
import shutil
import subprocess
import time

import numpy as np


def compile_cuda(kernel, arch):
    # `kernel` is what get_function returns for a CUDA C upload: .source and .name.
    nvcc = shutil.which("nvcc") or shutil.which("/usr/local/cuda/bin/nvcc")
    if nvcc is None:
        return {"compiled": False, "why": "no nvcc on this server"}
    with open(f"{kernel.name}.cu", "w") as source:
        source.write(kernel.source)
    started = time.perf_counter()
    done = subprocess.run(
        [nvcc, "-cubin", f"-arch={arch}", "-O3", "-Xptxas=-v", f"{kernel.name}.cu",
         "-o", f"{kernel.name}.cubin"],
        capture_output=True, text=True,
    )
    print(done.stderr.strip())  # ptxas' report, captured by the server as stdout
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed: {done.stderr.strip()}")
    with open(f"{kernel.name}.cubin", "rb") as cubin:
        binary = cubin.read()
    return {"compiled": True, "seconds": time.perf_counter() - started, "cubin": binary,
            "ptxas": [line for line in done.stderr.splitlines() if "registers" in line]}


def reference(values):
    expected = values + np.float32(1.0)
    repeats = 200
    started = time.perf_counter()
    for _ in range(repeats):
        values + np.float32(1.0)
    per_call_us = (time.perf_counter() - started) / repeats * 1e6
    assert expected.dtype == np.float32
    return {"first": expected[:4], "numpy_us_per_call": per_call_us}
"""


def build_program(arch: str, n: int) -> Program:
    program = Program()
    operations = program.upload(id="operations", kind="module", source=OPERATIONS)
    compile_cuda = program.get_function(id="compile_cuda", module=operations, name="compile_cuda")
    reference = program.get_function(id="reference", module=operations, name="reference")
    kernel_module = program.upload(id="kernel", kind="module", source=CUDA_KERNEL, language="cuda")
    kernel = program.get_function(id="add_one", module=kernel_module, name="add_one")
    values = program.upload(id="values", kind="tensor", value=np.arange(n, dtype=np.float32))
    build = program.run(id="build", fn=compile_cuda, args=[kernel, arch])
    check = program.run(id="check", fn=reference, args=[values])
    program.return_(key="build", value=build)
    program.return_(key="reference", value=check)
    return program


def main() -> None:
    arch = os.environ.get("KCORAL_ARCH", "sm_90a")
    with Client(os.environ.get("KCORAL_URL", "http://localhost:8000")) as client:
        result = client.execute(build_program(arch, 1 << 16), timeout_seconds=120)
        if not result.completed:
            raise SystemExit(f"FAILED: {result.error['kind']}: {result.error['message']}")
        build = result.results["build"]
        if build["compiled"]:
            print(
                f"compiled add_one for {arch} in {build['seconds'] * 1e3:.0f} ms, "
                f"cubin {len(build['cubin'])} bytes"
            )
            for line in build["ptxas"]:
                print(f"  {line.strip()}")
        else:
            print(f"not compiled: {build['why']}")
        reference = result.results["reference"]
        print(f"reference check passed, first values {reference['first'].tolist()}")
        print(f"numpy reference: {reference['numpy_us_per_call']:.1f} us per call on the server")
        print(
            f"request: {result.elapsed_ms:.0f} ms on the worker, {result.queue_ms:.1f} ms queued, "
            f"{result.lease_held_ms:.0f} ms holding a GPU"
        )


if __name__ == "__main__":
    main()
