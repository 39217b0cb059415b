"""Programs on several GPUs (options.gpu_count), against a running GPU server
(KCORAL_GPU_URL); skipped without one, and the multi-GPU cases skipped on a server with
fewer than two GPUs.

On any GPU server: a one-GPU benchmark() report has no per_device (test_gpu.py has the
refusal of more GPUs than the server has). On two GPUs or more: the program sees
exactly its GPUs, as devices 0 and 1, and the response names them; NCCL all-reduces
between them, from one process driving both and from two processes of the program
(torch.distributed); benchmark() of a function on both spans both, with each device's span
beside it; a two-GPU program queued behind one-GPU programs that hold its GPUs runs once
they are done.
"""

from __future__ import annotations

import os
import threading

import pytest

from kcoral import Client, Program

URL = os.environ.get("KCORAL_GPU_URL")
pytestmark = pytest.mark.skipif(not URL, reason="needs a GPU server: set KCORAL_GPU_URL")


def server_gpus() -> int:
    with Client(URL) as client:
        return int(client.health()["gpu_count"])


def needs_two_gpus() -> None:
    if server_gpus() < 2:
        pytest.skip("needs a server with two GPUs or more")


def run(source: str, name: str, *, gpu_count: int = 1, timeout_seconds: float = 300):
    program = Program()
    module = program.upload(id="m", kind="module", source=source)
    function = program.get_function(id="f", module=module, name=name)
    program.return_(key="out", value=program.run(id="out", fn=function))
    with Client(URL) as client:
        return client.execute(program, timeout_seconds=timeout_seconds, gpu_count=gpu_count)


BENCHMARK_ONE_GPU = """
import torch
from kcoral.builtins import benchmark

def f():
    x = torch.ones(1 << 20, device="cuda")
    return benchmark(lambda: x.mul_(1.0))
"""


def test_a_one_gpu_benchmark_has_no_per_device_part():
    result = run(BENCHMARK_ONE_GPU, "f")
    assert result.completed, result.error
    report = result.results["out"]
    assert report["latency_ms_median"] > 0
    assert "per_device" not in report


SEES_ITS_GPUS = """
import os
import torch

def f():
    count = torch.cuda.device_count()
    names = sorted(node for node in os.listdir("/dev") if node.startswith("nvidia") and node[6:].isdigit())
    return {"count": count, "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "nodes": names}
"""


def test_a_two_gpu_program_sees_exactly_its_two_gpus():
    needs_two_gpus()
    result = run(SEES_ITS_GPUS, "f", gpu_count=2)
    assert result.completed, result.error
    seen = result.results["out"]
    assert seen["count"] == 2
    assert len(seen["visible"].split(",")) == 2
    assert len(seen["nodes"]) == 2, seen  # its two device nodes, no other GPU's
    assert len(result.gpu_ids) == 2 and len(set(result.gpu_ids)) == 2
    one = run(SEES_ITS_GPUS, "f")
    assert one.completed, one.error
    assert one.results["out"]["count"] == 1 and len(one.results["out"]["nodes"]) == 1


NCCL_ONE_PROCESS = """
import torch
import torch.cuda.nccl as nccl

def f():
    tensors = [torch.full((1024,), float(device + 1), device=f"cuda:{device}") for device in range(2)]
    nccl.all_reduce(tensors)
    return [float(t[0].item()) for t in tensors]
"""


def test_nccl_all_reduces_between_the_two_gpus_of_one_process():
    needs_two_gpus()
    result = run(NCCL_ONE_PROCESS, "f", gpu_count=2)
    assert result.completed, result.error
    assert result.results["out"] == [3.0, 3.0]


NCCL_TWO_PROCESSES = """
import os
import tempfile
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def rank_main(rank, rendezvous, results):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    tensor = torch.full((1024,), float(rank + 1), device="cuda")
    dist.all_reduce(tensor)
    results[rank] = float(tensor[0].item())
    dist.destroy_process_group()

def f():
    rendezvous = os.path.join(tempfile.mkdtemp(), "rendezvous")
    results = mp.Manager().dict()
    mp.spawn(rank_main, args=(rendezvous, results), nprocs=2, join=True)
    return [results[0], results[1]]
"""


def test_nccl_all_reduces_between_two_processes_of_the_program():
    needs_two_gpus()
    result = run(NCCL_TWO_PROCESSES, "f", gpu_count=2)
    assert result.completed, result.error
    assert result.results["out"] == [3.0, 3.0]


BENCHMARK_TWO_GPUS = """
import torch
from kcoral.builtins import benchmark

def f():
    a = torch.ones(1 << 24, device="cuda:0")
    b = torch.ones(1 << 22, device="cuda:1")
    def both():
        a.mul_(1.0)
        b.mul_(1.0)
    return benchmark(both)
"""


def test_benchmark_of_a_two_gpu_function_spans_both_with_each_beside_it():
    needs_two_gpus()
    result = run(BENCHMARK_TWO_GPUS, "f", gpu_count=2)
    assert result.completed, result.error
    report = result.results["out"]
    per_device = report["per_device"]
    assert [part["device"] for part in per_device] == [0, 1]
    assert all(part["calls"] == report["repeat"] for part in per_device)
    # The span covers both devices' work: at least the longer device's own span.
    assert report["latency_ms_max"] >= max(part["latency_ms_min"] for part in per_device)
    assert report["activities_per_call"] == 2
    assert report["calls_told_apart_by"] == "marks", report  # each device by its own marks


HOLDS_A_GPU = """
import time
import torch

def f():
    torch.ones(1, device="cuda").sum().item()
    time.sleep(3)
    return torch.cuda.device_count()
"""


def test_a_two_gpu_program_queued_behind_one_gpu_programs_runs_once_they_are_done():
    needs_two_gpus()
    results = {}

    def send(key: str, source: str, gpu_count: int) -> None:
        results[key] = run(source, "f", gpu_count=gpu_count)

    singles = [threading.Thread(target=send, args=(f"one-{i}", HOLDS_A_GPU, 1)) for i in range(4)]
    for thread in singles:
        thread.start()
    pair = threading.Thread(target=send, args=("two", SEES_ITS_GPUS, 2))
    pair.start()
    for thread in [*singles, pair]:
        thread.join(timeout=600)
    assert all(results[f"one-{i}"].completed for i in range(4)), results
    assert results["two"].completed, results["two"].error
    assert results["two"].results["out"]["count"] == 2
    assert len(results["two"].gpu_ids) == 2
