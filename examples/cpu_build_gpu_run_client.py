"""Build CUDA C into a library on a CPU server, then run, check and time it on a GPU server.

KCORAL_CPU_URL=http://localhost:8001 KCORAL_URL=http://localhost:8000 \
    python examples/cpu_build_gpu_run_client.py

The client needs no CUDA toolchain: the CPU server compiles (its nvcc, through TVM FFI)
for the architecture the GPU server reports with Client.target(), and returns the shared
library's bytes; the GPU server loads them as a library upload, checks the kernel against
a reference and times it.
"""

from __future__ import annotations

import os

from kcoral import Client, Program

N = 1 << 20

CUDA_KERNEL = r"""
__global__ void add_one_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  int n = static_cast<int>(x.numel());
  add_one_kernel<<<(n + 255) / 256, 256>>>(static_cast<const float*>(x.data_ptr()),
                                           static_cast<float*>(y.data_ptr()), n);
}
"""

# Runs on the CPU server: builds the selected CUDA source for the given architecture.
BUILD = r"""
import os
from pathlib import Path


def build(source, arch):
    import tvm_ffi.cpp

    digits = arch.removeprefix("sm_").removesuffix("a")
    os.environ["TVM_FFI_CUDA_ARCH_LIST"] = f"{digits[:-1]}.{digits[-1]}" + ("a" if arch.endswith("a") else "")
    path = tvm_ffi.cpp.build_inline(
        name=f"remote_{source.name}", cuda_sources=source.source, functions=source.name,
        backend="cuda", extra_cuda_cflags=["-O3"],
    )
    return Path(path).read_bytes()
"""

# Runs on the GPU server.
OPERATIONS = r"""
from kcoral.builtins import benchmark


def randn(n):
    import torch

    return torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))


def empty_like(tensor):
    import torch

    return torch.empty_like(tensor)


def check(kernel, src, dst):
    import torch

    kernel(src, dst)
    torch.testing.assert_close(dst, src + 1.0)
    return {"ok": True}
"""


def build_on_cpu_server(arch: str) -> Program:
    program = Program()
    builder = program.upload(id="builder", kind="module", source=BUILD)
    build = program.get_function(id="build", module=builder, name="build")
    kernel_module = program.upload(id="kernel", kind="module", source=CUDA_KERNEL, language="cuda")
    kernel = program.get_function(id="add_one", module=kernel_module, name="add_one")
    library = program.run(id="library", fn=build, args=[kernel, arch])
    program.return_(key="library", value=library)
    return program


def run_on_gpu_server(library: bytes) -> Program:
    program = Program()
    operations = program.upload(id="operations", kind="module", source=OPERATIONS)
    randn = program.get_function(id="randn", module=operations, name="randn")
    empty_like = program.get_function(id="empty_like", module=operations, name="empty_like")
    check = program.get_function(id="check", module=operations, name="check")
    benchmark = program.get_function(id="benchmark", module=operations, name="benchmark")
    module = program.upload(id="kernel_module", kind="library", value=library)
    kernel = program.get_function(id="kernel", module=module, name="add_one")
    src = program.run(id="src", fn=randn, args=[N])
    dst = program.run(id="dst", fn=empty_like, args=[src])
    program.return_(key="check", value=program.run(id="checked", fn=check, args=[kernel, src, dst]))
    program.return_(key="timing", value=program.run(id="timing", fn=benchmark, args=[kernel, src, dst]))
    return program


def main() -> None:
    gpu_url = os.environ.get("KCORAL_URL", "http://localhost:8000")
    cpu_url = os.environ.get("KCORAL_CPU_URL", "http://localhost:8001")
    with Client(gpu_url) as gpu, Client(cpu_url) as cpu:
        arch = gpu.target()["arch"]
        built = cpu.execute(build_on_cpu_server(arch), timeout_seconds=300)
        if not built.completed:
            raise SystemExit(f"build on the CPU server: {built.status} — {built.error}")
        library = built.results["library"]
        print(f"built {len(library) / 1024:.0f} KiB for {arch} on the CPU server "
              f"in {built.elapsed_ms:.0f} ms")
        result = gpu.execute(run_on_gpu_server(library), timeout_seconds=120)
        if not result.completed:
            raise SystemExit(f"run on the GPU server: {result.status} — {result.error}")
        timing = result.results["timing"]
        print(f"checked: {result.results['check']}, kernel {timing['latency_ms_median'] * 1e3:.1f} us "
              f"(median of {timing['repeat']}), {result.lease_held_ms:.0f} ms on the GPU")


if __name__ == "__main__":
    main()
