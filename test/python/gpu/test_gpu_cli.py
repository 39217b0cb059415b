"""The kcoral command's GPU tools against a GPU server (KCORAL_GPU_URL); skipped without one.

The README's GPU example runs as written: ncu profiles a torch script whose benchmark()
steps aside (one untimed call), and the report comes back as check.ncu-rep; racecheck
prints its log after the script's output. memcheck finds an out-of-bounds write, with
the exit code asked for; a plain `run python` holds the lease and times with CUPTI.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

URL = os.environ.get("KCORAL_GPU_URL")
pytestmark = pytest.mark.skipif(not URL, reason="needs a GPU server: set KCORAL_GPU_URL")

README = Path(__file__).resolve().parents[3] / "README.md"
CLI_TIMEOUT_S = 600

# The README's examples run from examples/, whose bench/ holds check.py and its helper.py.
EXAMPLES_BENCH = Path(__file__).resolve().parents[3] / "examples" / "bench"

OUT_OF_BOUNDS = """\
import torch
import triton
import triton.language as tl


@triton.jit
def poke(pointer):
    tl.store(pointer + (1 << 28), 1.0)  # a GiB past the tensor


x = torch.zeros(1, device="cuda")
poke[(1,)](x)
torch.cuda.synchronize()
"""


def kcoral_shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = f'kcoral() {{ {shlex.quote(sys.executable)} -m kcoral "$@"; }}\n{line}'
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KCORAL_")}
    environment["KCORAL_URL"] = URL or ""
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S)


def gpu_example() -> list[str]:
    text = README.read_text()
    start = text.index("### The kcoral command")
    blocks = re.findall(r"```sh\n(.*?)```", text[start:text.index("\n### ", start)], re.S)
    return blocks[1].strip().splitlines()


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES_BENCH, tmp_path / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "bench" / "oob.py").write_text(OUT_OF_BOUNDS)
    return tmp_path


def explain(out: subprocess.CompletedProcess[str]) -> str:
    text = out.stdout + out.stderr
    if "ERR_NVGPUCTRPERM" in text:
        return ("the GPU's performance counters are kept to administrators "
                "(NVreg_RestrictProfilingToAdminUsers=1), so the sandbox's user cannot profile:\n"
                + text)
    return text


def test_the_readme_gpu_example_runs_as_written(bench):
    profile, sanitize = gpu_example()
    out = kcoral_shell(profile, bench)
    assert out.returncode == 0, explain(out)
    assert "timed False ncu None" in out.stdout, explain(out)
    report = bench / "check.ncu-rep"
    assert report.is_file() and report.stat().st_size > 0, explain(out)
    assert "ncu report saved to check.ncu-rep" in out.stderr

    out = kcoral_shell(sanitize, bench)
    assert out.returncode == 0, explain(out)
    script_output, _, log = out.stdout.partition("=========")
    assert "timed False compute-sanitizer None" in script_output, explain(out)
    assert "COMPUTE-SANITIZER" in log, explain(out)


def test_memcheck_finds_an_out_of_bounds_write_with_the_exit_code_asked_for(bench):
    out = kcoral_shell("kcoral run compute-sanitizer --sanitizer-options '--error-exitcode 99' "
                       "-o memcheck.log bench/oob.py", bench)
    assert out.returncode == 99, explain(out)
    assert "Invalid __global__ write" in out.stdout, explain(out)
    assert "Invalid __global__ write" in (bench / "memcheck.log").read_text()


def test_a_plain_run_holds_the_lease_and_times_with_cupti(bench):
    out = kcoral_shell("kcoral run python bench/check.py", bench)
    assert out.returncode == 0, explain(out)
    size, timed = out.stdout.splitlines()
    assert size == "size 8: total 28 []"
    words = timed.split()
    assert words[:3] == ["timed", "True", "None"], out.stdout
    assert float(words[3]) > 0
