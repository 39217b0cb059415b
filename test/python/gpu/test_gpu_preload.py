"""The GPU server's preload: the modules kernel authors import are imported once in the
worker parent, CUDA untouched there, and work in every worker; a module that opens a CUDA
device on import is left out, with the reason on the start line. Needs a GPU (KCORAL_GPU_URL
says there is one) and starts servers of its own (KCORAL_SERVER, the build under test).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from e2e.programs import call

pytestmark = pytest.mark.skipif(not os.environ.get("KCORAL_GPU_URL"), reason="needs a GPU: set KCORAL_GPU_URL")

HEAVY = ["torch", "triton", "tvm", "tvm.script.tirx", "tvm_ffi", "cutlass", "cutlass.cute"]

IMPORTED = """
import sys

def imported(names):
    preloaded = [n for n in names if n in sys.modules]  # before this program imports anything
    preloaded_all = set(sys.modules)
    import torch
    from triton.backends.nvidia.driver import libcuda_dirs
    from triton.runtime.build import platform_key
    from triton.runtime.cache import triton_key
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    return {"preloaded": preloaded, "sum": float((x * 2).sum().item()),
            "triton_key_done": triton_key.cache_info().currsize == 1,
            "first_launch_done": [platform_key.cache_info().currsize == 1,
                                  libcuda_dirs.cache_info().currsize == 1,
                                  "triton.experimental.gluon.nvidia.hopper" in preloaded_all]}
"""


@pytest.mark.timeout(300)
def test_heavy_modules_are_preloaded_and_a_cuda_opening_one_left_out(start_server, tmp_path: Path):
    (tmp_path / "kc_preload_cuda.py").write_text("import torch\ntorch.cuda.init()\n")
    tmp_path.chmod(0o755)
    path = ":".join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    server = start_server("--device", "gpu", "--gpus", "0", "--workers-per-gpu", "1", "--python", sys.executable,
                          "--preload", ",".join(["kc_preload_cuda", *HEAVY]), "--readable-path", str(tmp_path),
                          "--program-env", f"PYTHONPATH={path}")
    line = next(line for line in server.stderr_text().splitlines() if "preloaded:" in line)
    assert "kc_preload_cuda (opened /dev/nvidia" in line, line
    for name in ("torch", "triton"):  # on the GPU machine whatever else is brought along
        assert f" {name} " in line, line
    n = 1 << 20
    result = server.execute(call(IMPORTED, "imported", ["kc_preload_cuda", *HEAVY]),
                            read_timeout_s=120).raise_for_error()["out"]
    assert result["sum"] == float(n * (n - 1))
    assert "kc_preload_cuda" not in result["preloaded"]
    assert {"torch", "triton"} <= set(result["preloaded"]), (result, line)
    assert result["triton_key_done"]  # computed once in the worker parent
    assert result["first_launch_done"] == [True, True, True]  # so was what a first launch asks
