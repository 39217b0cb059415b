"""The tenant's compile cache on a GPU server: what a program compiles, the next program of
the same tenant (a fresh worker, a fresh sandbox) loads instead of compiling, for
compile_tirx, Triton and TVM FFI's build_inline: in the second program the compiler itself
fails (compile_tirx, Triton) or the library must be the one built before (build_inline),
so that only a cache hit can pass. Needs a GPU (KCORAL_GPU_URL says
there is one) and starts a server of its own (KCORAL_SERVER, the build under test).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from e2e.programs import call

pytestmark = pytest.mark.skipif(not os.environ.get("KCORAL_GPU_URL"), reason="needs a GPU: set KCORAL_GPU_URL")

# The four-language client's kernels (examples/remote_compile_client.py), each followed by
# what the test runs of it.
_spec = importlib.util.spec_from_file_location(
    "remote_compile_client", Path(__file__).resolve().parents[3] / "examples" / "remote_compile_client.py")
assert _spec is not None and _spec.loader is not None
EXAMPLE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EXAMPLE)

TIRX = EXAMPLE.TIRX_KERNEL + r'''
import os, pathlib
import torch
from kcoral.builtins import compile_tirx


def run(compiler_broken):
    import tvm
    if compiler_broken:
        def broken(*args, **kwargs):
            raise RuntimeError("the compiler was called")
        tvm.compile = broken
    src = torch.arange(256, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    compile_tirx(main, {"N": 256})(src, dst)
    torch.cuda.synchronize()
    stored = pathlib.Path(os.environ["KCORAL_COMPILE_CACHE"]) / "tirx"
    return {"right": bool(torch.equal(dst, src + 1)), "stored": sorted(p.name for p in stored.glob("*.so"))}
'''

TRITON = EXAMPLE.TRITON_KERNEL + r'''
import torch


def run(compiler_broken):
    if compiler_broken:  # a cache hit never makes the IR
        import triton.compiler.compiler as compiler
        def broken(*args, **kwargs):
            raise RuntimeError("the compiler was called")
        compiler.ASTSource.make_ir = broken
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    add_one[(4,)](x, y, 1000, BLOCK=256)
    torch.cuda.synchronize()
    return {"right": bool(torch.equal(y, x + 1))}
'''

CUDA = "SOURCE = " + repr(EXAMPLE.CUDA_KERNEL) + r'''
import os, pathlib
import torch
import tvm_ffi
import tvm_ffi.cpp


def run(compiler_broken):
    # A cache hit runs ninja, which finds nothing to build: the library stays as it was.
    major, minor = torch.cuda.get_device_capability()
    os.environ["TVM_FFI_CUDA_ARCH_LIST"] = f"{major}.{minor}" + ("a" if major >= 9 else "")
    path = tvm_ffi.cpp.build_inline(name="cache_check", cuda_sources=SOURCE, functions="add_one", backend="cuda")
    library = pathlib.Path(path)
    function = tvm_ffi.load_module(str(library)).get_function("add_one")
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    function(x, y)
    torch.cuda.synchronize()
    return {"right": bool(torch.equal(y, x + 1)), "library": str(library),
            "built_at": library.stat().st_mtime_ns,
            "in_cache": str(library).startswith(os.environ["TVM_FFI_CACHE_DIR"])}
'''


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--device", "gpu", "--gpus", "0", "--workers-per-gpu", "1", "--python", sys.executable,
                               "--program-env", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}")


def has(server, module: str) -> bool:
    probe = "import importlib.util\ndef has(name):\n    return importlib.util.find_spec(name) is not None\n"
    return server.execute(call(probe, "has", module)).raise_for_error()["out"]


def twice(server, source: str) -> tuple[dict, dict]:
    first = server.execute(call(source, "run", False), read_timeout_s=300).raise_for_error()["out"]
    second = server.execute(call(source, "run", True), read_timeout_s=300).raise_for_error()["out"]
    return first, second


@pytest.mark.timeout(600)
def test_compile_tirx_loads_what_an_earlier_program_compiled(server):
    if not has(server, "tvm"):
        pytest.skip("no TVM in this worker environment")
    first, second = twice(server, TIRX)
    assert first["right"] and second["right"]
    assert len(first["stored"]) == 1 and second["stored"] == first["stored"]


@pytest.mark.timeout(600)
def test_triton_finds_its_kernel_in_the_cache(server):
    first, second = twice(server, TRITON)
    assert first["right"] and second["right"]


@pytest.mark.timeout(600)
def test_build_inline_finds_its_library_in_the_cache(server):
    if not has(server, "tvm_ffi"):
        pytest.skip("no TVM FFI in this worker environment")
    first, second = twice(server, CUDA)
    assert first["right"] and second["right"] and first["in_cache"]
    assert second["library"] == first["library"] and second["built_at"] == first["built_at"]
