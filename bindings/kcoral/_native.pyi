"""kcoral._native: the in-process KCoral executor, as bindings/native/native_module.cpp defines it.

The module is built and installed by kcoral-server (``pip install "kcoral[server]"``) into
this package's folder; the server's workers have it built in. ``kcoral.run_local`` reaches
``execute`` through it and ``kcoral.builtins.benchmark`` reaches ``benchmark``. Every
function takes its arguments by position only.
"""

from collections.abc import Callable, Iterable
from typing import Any, TypedDict

from typing_extensions import Buffer

# The type of benchmark()'s report; for type checkers only, the module has no such name.
class _BenchmarkReport(TypedDict):
    """What ``benchmark`` measured; latencies are per call, first GPU activity to last."""

    latency_ms_median: float
    latency_ms_mean: float
    latency_ms_min: float
    latency_ms_max: float
    latency_ms_p10: float
    latency_ms_p90: float
    warmup: int
    repeat: int
    flush_l2: bool
    activities_stable: bool
    activities_per_call: int
    # What most timed calls launched, in start order: kernels by their demangled names,
    # "memcpy", "memset".
    activities: list[str]
    calls_with_other_activities: int
    # Sampled during the timed calls; None when no sample could be read.
    sm_clock_mhz_min: int | None
    sm_clock_mhz_max: int | None

def execute(content_type: str, body: Buffer, /) -> tuple[int, str, bytes]:
    """Run one multipart /execute request in this process, with the server's defaults and
    no blob cache: return the HTTP status, the response content type and body.

    Answers as the server would, error responses included; RuntimeError only for a failure
    that leaves no response. No isolation from the caller and no timeout.
    """

def dtypes() -> dict[str, int]:
    """The wire's tensor dtypes and their item sizes in bytes."""

def normalize_path(path: str, /) -> str:
    """A workspace path's canonical form; ValueError when the server would refuse it."""

def check_paths(paths: Iterable[str], /) -> None:
    """ValueError when two canonical upload paths are equal or one is a folder of another."""

# GPU builds only (KCORAL_HAVE_CUDA): others lack the attribute, so callers look it up with
# getattr(_native, "benchmark", None).
def benchmark(fn: Callable[..., object], /, *args: Any) -> _BenchmarkReport:
    """Time ``fn(*args)`` by its GPU activity (CUPTI).

    A dict as the last argument is the configuration, not an argument of ``fn``:
    ``warmup_ms`` and ``repeat_ms`` (numbers >= 0), ``warmup`` and ``repeat`` (ints;
    repeat >= 1), ``flush_l2`` (bool); other keys or values raise ValueError. A failure of
    the measurement raises RuntimeError whose ``kcoral_error_kind`` names the error kind;
    an exception of ``fn`` propagates as it is.
    """
