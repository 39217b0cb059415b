"""GPU features against a running GPU server (KCORAL_GPU_URL); skipped without one.

benchmarks/gpu/run.sh starts the server on the GPU machine and runs these there:
the target and versions, CUDA tensors, the cpu_only guard (flags GPU use with the program
it interfered with, lets device queries through), benchmark() (its report, its refusal of a call without GPU activity,
selection through get_function, two streams timed side by side on a server of one-queue workers), library uploads, lease times, and recovery from a
sticky CUDA error.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from kcoral import Client, Program, RequestRejected

URL = os.environ.get("KCORAL_GPU_URL")
pytestmark = pytest.mark.skipif(not URL, reason="needs a GPU server: set KCORAL_GPU_URL")


def run(source: str, name: str, *args, cpu_only: bool = False, uploads=()):
    program = Program()
    module = program.upload(id="m", kind="module", source=source)
    function = program.get_function(id="f", module=module, name=name, cpu_only=cpu_only)
    refs = [program.upload(id=f"u{i}", kind="tensor", value=value) for i, value in enumerate(uploads)]
    program.return_(key="out", value=program.run(id="out", fn=function, args=[*refs, *args]))
    with Client(URL) as client:
        return client.execute(program, timeout_seconds=300)


def test_health_reports_the_gpu_and_its_software():
    with Client(URL) as client:
        health = client.health()
        assert health["gpu_count"] >= 1
        assert client.target()["arch"].startswith("sm_")
    assert {"torch", "cuda", "python", "numpy"} <= set(health["versions"])


def test_tensor_uploads_are_cuda_tensors_and_come_back_as_numpy():
    source = "def f(x):\n    assert x.is_cuda, x.device\n    return x * 2\n"
    result = run(source, "f", uploads=[np.arange(8, dtype=np.float32)])
    assert result.completed, result.error
    np.testing.assert_array_equal(result.results["out"], np.arange(8, dtype=np.float32) * 2)
    assert result.lease_held_ms > 0


def test_the_response_names_the_gpus_and_more_gpus_than_the_server_has_are_refused():
    source = "def f():\n    import torch\n    return torch.cuda.device_count()\n"
    program = Program()
    module = program.upload(id="m", kind="module", source=source)
    function = program.get_function(id="f", module=module, name="f")
    program.return_(key="out", value=program.run(id="out", fn=function))
    with Client(URL) as client:
        gpus = client.health()["gpu_count"]
        result = client.execute(program, timeout_seconds=300, gpu_count=1)
        assert result.completed, result.error
        assert result.results["out"] == 1  # its worker sees its one GPU
        assert len(result.gpu_ids) == 1 and 0 <= result.gpu_ids[0]
        assert client.execute(program, timeout_seconds=300).gpu_ids == result.gpu_ids or gpus > 1
        # A program may hold every GPU of the server (the protocol's 8 at most), in a worker
        # that sees them all; one more is refused.
        if gpus >= 2:
            pair = client.execute(program, timeout_seconds=300, gpu_count=2)
            assert pair.completed, pair.error
            assert pair.results["out"] == 2
            assert len(pair.gpu_ids) == 2 and pair.gpu_ids[0] < pair.gpu_ids[1]
        if gpus < 8:
            refused = f"'gpu_count' is {gpus + 1}, but this server has {gpus} GPU.* at most {gpus}"
            with pytest.raises(RequestRejected, match=refused):
                client.execute(program, gpu_count=gpus + 1)


def test_tensors_of_one_request_small_and_large_arrive_intact():
    # They share one memfd: the small ones unaligned (copied), the large one page-aligned
    # (mapped at its offset).
    source = "def f(a, b, c):\n    return [float(t.double().sum()) for t in (a, b, c)]\n"
    values = [np.arange(5, dtype=np.int32), np.arange(300_000, dtype=np.float32), np.arange(3, dtype=np.int16)]
    result = run(source, "f", uploads=values)
    assert result.completed, result.error
    assert result.results["out"] == [float(v.astype(np.float64).sum()) for v in values]


def test_cpu_only_use_of_the_gpu_is_caught_with_the_call_and_line():
    source = "import torch\n\ndef f():\n    x = 1\n    return torch.zeros(4, device='cuda').sum().item()\n"
    result = run(source, "f", cpu_only=True)
    assert result.status == "FAILED"
    assert result.error["kind"] == "gpu_access", result.error
    assert result.error["cuda_call"]
    assert result.error["location"].endswith(":5"), result.error["location"]


def test_a_cpu_only_call_that_uses_the_gpu_names_the_program_holding_it():
    # B loads its module (under the lease), then, in a cpu_only call, touches the GPU while
    # A holds the lease: B fails, naming A's request as the one it may have disturbed.
    holder_source = ("import time, torch\n\ndef f():\n    torch.ones(1, device='cuda').sum().item()\n"
                     "    time.sleep(4)\n")
    intruder_source = ("import time, torch\n\ndef f():\n    time.sleep(2)\n"
                       "    return torch.zeros(1, device='cuda').sum().item()\n")
    results = {}
    intruder = threading.Thread(target=lambda: results.update(b=run(intruder_source, "f", cpu_only=True)))
    intruder.start()
    time.sleep(0.5)
    results["a"] = run(holder_source, "f")
    intruder.join()
    assert results["a"].completed, results["a"].error
    assert results["b"].error["kind"] == "gpu_access", results["b"].error
    assert results["b"].error["interfered_request_id"] == results["a"].request_id


def test_cpu_only_device_queries_are_allowed():
    source = ("import torch\n\ndef f():\n    return [torch.cuda.device_count(), "
              "list(torch.cuda.get_device_capability()), torch.cuda.is_available()]\n")
    result = run(source, "f", cpu_only=True)
    assert result.completed, result.error
    assert result.results["out"][0] >= 1


def test_benchmark_reports_a_kernel_and_refuses_a_call_without_gpu_activity():
    source = ("import torch\nfrom kcoral.builtins import benchmark\n\n"
              "def f(x):\n    return benchmark(torch.add, x, 1.0, {'warmup': 3, 'repeat': 20})\n\n"
              "def none(x):\n    return benchmark(lambda v: None, x)\n")
    result = run(source, "f", uploads=[np.ones(1024, dtype=np.float32)])
    assert result.completed, result.error
    report = result.results["out"]
    assert report["repeat"] == 20 and report["warmup"] == 3
    assert 0 < report["latency_ms_min"] <= report["latency_ms_median"] <= report["latency_ms_max"]
    # torch.add of one tensor and a scalar is one kernel, the same in every call.
    assert report["activities_per_call"] == len(report["activities"]) == 1, report
    assert report["activities"][0].startswith("void at::native::"), report  # demangled
    assert report["activities_stable"] and report["calls_with_other_activities"] == 0, report
    assert report["calls_told_apart_by"] == "marks", report
    failed = run(source, "none", uploads=[np.ones(4, dtype=np.float32)])
    assert failed.status == "FAILED" and "no GPU activity" in failed.error["message"]


def test_benchmark_budgets_count_whole_calls():
    # A call of about 20 ms against budgets of 1 ms: one warm-up call and one timed call,
    # since the budgets bound what the calls cost, not an estimate made apart from them.
    source = ("import torch\nfrom kcoral.builtins import benchmark\n\n"
              "def f():\n"
              "    def slow():\n"
              "        torch.cuda._sleep(40_000_000)\n"
              "    return benchmark(slow, {'warmup_ms': 1, 'repeat_ms': 1})\n")
    result = run(source, "f")
    assert result.completed, result.error
    report = result.results["out"]
    assert report["warmup"] == 1 and report["repeat"] == 1
    assert report["latency_ms_median"] > 5


STREAMS = """
import os
import torch
from kcoral.builtins import benchmark

CYCLES = 4_000_000  # about 2 ms
ONCE = {"warmup": 2, "repeat": 10, "flush_l2": False}


def one_kernel():
    return torch.cuda._sleep(CYCLES)


def one_stream():
    return {"one": benchmark(one_kernel, ONCE)["latency_ms_median"],
            "queues": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")}


def two_streams():
    first, second = torch.cuda.Stream(), torch.cuda.Stream()

    def call():  # two kernels on the first stream, then two on the second
        for stream in (first, second):
            with torch.cuda.stream(stream):
                for _ in range(2):
                    torch.cuda._sleep(CYCLES)

    print("run on", os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"), "queues")
    return {"two": benchmark(call, ONCE)["latency_ms_median"], "one": benchmark(one_kernel, ONCE)["latency_ms_median"],
            "queues": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")}
"""


def test_a_two_stream_call_is_timed_side_by_side_as_cuda_runs_it():
    # Two streams of two ~2 ms kernels each take about two kernels' time where they run side
    # by side, three where one hardware queue makes the second stream's first kernel wait
    # behind the first stream's second. A server of one-queue workers (--cuda-connections
    # auto, the default) runs such a program again on a worker of CUDA's default queues; a
    # program of one stream stays on its one-queue worker.
    single = run(STREAMS, "one_stream")
    assert single.completed, single.error
    result = run(STREAMS, "two_streams")
    assert result.completed, result.error
    out = result.results["out"]
    assert out["two"] < 2.5 * out["one"], out
    if single.results["out"]["queues"] == "1":
        assert out["queues"] is None, out  # it ran again, on CUDA's default queues
        assert result.stdout.count("run on") == 1, result.stdout  # the first run's output is not kept


def test_benchmark_selected_with_get_function():
    program = Program()
    module = program.upload(id="m", kind="module",
                            source="import torch\nfrom kcoral.builtins import benchmark\n")
    bench = program.get_function(id="benchmark", module=module, name="benchmark")
    torch_module = program.upload(id="t", kind="module", source="import torch\nadd = torch.add\n")
    add = program.get_function(id="add", module=torch_module, name="add")
    x = program.upload(id="x", kind="tensor", value=np.ones(256, dtype=np.float32))
    program.return_(key="timing", value=program.run(id="timing", fn=bench, args=[add, x, 2.0]))
    with Client(URL) as client:
        result = client.execute(program, timeout_seconds=300)
    assert result.completed, result.error
    assert result.results["timing"]["latency_ms_median"] > 0


def test_a_library_that_does_not_load_is_a_compile_error():
    program = Program()
    library = program.upload(id="lib", kind="library", value=b"not a shared object")
    program.get_function(id="f", module=library, name="f")
    with Client(URL) as client:
        result = client.execute(program, timeout_seconds=60)
    assert result.status == "FAILED" and result.error["kind"] == "compile"


def test_a_sticky_cuda_error_fails_its_program_and_the_next_one_runs():
    source = r'''
import triton
import triton.language as tl
import torch


@triton.jit
def poke(pointer):
    tl.store(pointer + (1 << 40), 1.0)


def f():
    x = torch.zeros(1, device="cuda")
    poke[(1,)](x)
    torch.cuda.synchronize()
'''
    broken = run(source, "f")
    assert broken.status == "FAILED" and broken.error["kind"] == "runtime", broken.error
    healthy = run("def f(x):\n    return x + 1\n", "f", uploads=[np.zeros(2, dtype=np.float32)])
    assert healthy.completed, healthy.error
