"""Helpers for uploaded programs: ``benchmark`` (GPU timing) and ``compile_tirx`` (TVM).

Uploaded code imports them (``from kcoral.builtins import benchmark, compile_tirx``) and
may select them with ``get_function`` after importing them into a module. Both need a GPU
worker environment; where it is missing they fail their instruction with the error kind
``unavailable`` and a message saying what is missing, never silently.
"""

from __future__ import annotations

import hashlib
import os
import sys
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from kcoral._under_tool import UNDER_TOOL_VARIABLE

__all__ = ["CompileFailed", "ParseFailed", "Unavailable", "benchmark", "compile_tirx"]


class Unavailable(RuntimeError):
    """What this server lacks for a helper; fails the instruction with kind ``unavailable``."""

    kcoral_error_kind = "unavailable"


def benchmark(fn: Any, *args: Any) -> dict[str, Any]:
    """Time ``fn(*args)`` by its GPU activity (CUPTI), from first activity to last.

    An optional configuration dict may follow the arguments: ``warmup_ms``, ``repeat_ms``
    (defaults 25 and 100), ``warmup``, ``repeat`` (counts that override the budgets) and
    ``flush_l2`` (default True).

    The budgets are wall time, each call's L2 flush and device drains included: warm-up
    calls run until ``warmup_ms`` is spent (at least one), and the timed calls number what
    fits in ``repeat_ms`` by the warm-up calls' median (at least one), stopping once it is
    spent. Before them ``fn`` runs once, untimed, for what a first call compiles or loads.
    The report's ``warmup`` and ``repeat`` are the counts made.

    Each call's activity is told apart on the GPU's own timeline: before each call every
    device it uses is flushed (when flushing) and marked with a 4-byte memset, and a
    call's activities on a device are those between its mark and the next. The flushes
    and marks are in no call's time or activities. ``calls_told_apart_by`` says
    ``"marks"``; it says ``"windows"`` when a mark went missing from CUPTI's records and
    each call took the activities that started between its fence and its drain on
    CUPTI's clock instead, which can lose a call's kernel of a few microseconds or take in
    the flush before it.

    ``activities`` names what the timed calls launched, in start order (kernels by their
    demangled names, copies ``"memcpy"``, memsets ``"memset"``): the list most of them
    launched. ``calls_with_other_activities`` counts the calls that launched something
    else, and ``activities_stable`` says that there were none.

    A function that drives several GPUs (a program with ``gpu_count`` above 1) is timed on
    all of them: every device it used is flushed and drained around each call, and each
    call spans from its first activity on any device to its last on any. The report then
    also has ``per_device``: for each device (``device``, as the program numbers them), the
    median, min and max of its own span in the calls that used it (``calls``). A function
    on one device gets no ``per_device``.

    Work on several streams is timed as CUDA's default eight hardware queues run it, side
    by side. A kcoral-server GPU worker makes its context with one queue, which is twice as
    fast to make; there, a timed call whose work ran on more than one stream of a GPU
    raises, and the server runs the whole program again from the start, once, on a worker
    of CUDA's default queues, whose answer is the one returned.

    The report says ``"timed": True``. Under a tool that instruments the GPU itself (the
    environment variable ``KCORAL_UNDER_TOOL`` names it; ``kcoral run ncu`` and ``kcoral
    run compute-sanitizer`` set it), timing would compete with the tool for CUPTI and
    measure the tool: then ``fn`` is called once, untimed, and the report has the same
    keys with ``"timed": False``, ``"under_tool"`` and ``None`` for every measurement.
    """
    tool = os.environ.get(UNDER_TOOL_VARIABLE)
    if tool:
        return _untimed_call(tool, fn, args)
    from kcoral import _native

    measure = getattr(_native, "benchmark", None)
    if measure is None:
        raise Unavailable(
            "kcoral.builtins.benchmark measures GPU activity with CUPTI; this worker has no GPU "
            "support (a CPU server, or a build without CUDA)"
        )
    report: dict[str, Any] = measure(fn, *args)
    report["timed"] = True
    return report


_CONFIG_KEYS = frozenset({"warmup_ms", "repeat_ms", "warmup", "repeat", "flush_l2"})


def _untimed_call(tool: str, fn: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    """benchmark() under ``tool``: one call of ``fn``, finished on the GPU, nothing timed."""
    if not callable(fn):
        raise TypeError("benchmark(fn, *args[, config]) needs a callable first")
    if args and isinstance(args[-1], dict):
        unknown = set(args[-1]) - _CONFIG_KEYS
        if unknown:
            raise ValueError(
                f"benchmark: options {sorted(unknown)} are not among {sorted(_CONFIG_KEYS)}"
            )
        args = args[:-1]
    fn(*args)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return {
        "latency_ms_median": None,
        "latency_ms_mean": None,
        "latency_ms_min": None,
        "latency_ms_max": None,
        "latency_ms_p10": None,
        "latency_ms_p90": None,
        "warmup": 0,
        "repeat": 1,
        "flush_l2": False,
        "activities_stable": None,
        "activities_per_call": None,
        "activities": None,
        "calls_with_other_activities": None,
        "calls_told_apart_by": None,
        "sm_clock_mhz_min": None,
        "sm_clock_mhz_max": None,
        "timed": False,
        "under_tool": tool,
    }


class CompileFailed(RuntimeError):
    """A kernel that does not compile; fails the instruction with kind ``compile``."""

    kcoral_error_kind = "compile"


class ParseFailed(RuntimeError):
    """Kernel source the DSL cannot read; fails the instruction with kind ``parse``."""

    kcoral_error_kind = "parse"


# Each cached executable holds a loaded GPU module, hence the bound.
_COMPILED: OrderedDict[int, Any] = OrderedDict()
_COMPILED_LIMIT = 32


def compile_tirx(kernel: Any, bindings: dict[str, Any] | None = None) -> Any:
    """Specialize a TIRx ``@T.jit`` kernel with ``bindings`` (its ``T.constexpr`` values), or
    take a ``PrimFunc`` as it is, and compile it for CUDA.

    Executables are cached by structural hash, at most 32 per process, and on a server with
    compile caches also in the tenant's cache (``$KCORAL_COMPILE_CACHE/tirx``, a shared
    library per kernel, TVM version and target), so that a later program of the same
    tenant loads what an earlier one compiled. Compiling may call CUDA, so run it with GPU
    access (not in a ``cpu_only`` function).
    """
    try:
        import tvm
        import tvm_ffi
    except ImportError:
        raise Unavailable(
            "compile_tirx needs TVM (apache-tvm and apache-tvm-ffi) in the worker environment"
        ) from None
    if bindings is not None and not isinstance(bindings, dict):
        raise CompileFailed("compile_tirx bindings must be a dict of T.constexpr values")
    if isinstance(kernel, tvm.tirx.PrimFunc):
        if bindings:
            raise CompileFailed("bindings apply to @T.jit kernels; this kernel is already a PrimFunc")
        function = kernel
    elif hasattr(kernel, "specialize"):
        try:
            function = kernel.specialize(**(bindings or {}))
        except tvm.error.DiagnosticError as error:
            raise ParseFailed(str(error)) from error
        except TypeError as error:  # missing, unknown or unhashable constexpr values
            raise CompileFailed(str(error)) from error
    else:
        raise CompileFailed(
            f"compile_tirx expects a @T.jit kernel or a PrimFunc, not {type(kernel).__name__}"
        )
    key = tvm_ffi.structural_hash(function)
    if key in _COMPILED:
        _COMPILED.move_to_end(key)
        return _COMPILED[key]
    target = tvm.target.Target("cuda")
    stored = _stored_path(tvm, key, target)
    executable = _load_stored(tvm, stored)
    if executable is None:
        try:
            executable = tvm.compile(tvm.IRModule({"main": function}), target=target, tir_pipeline="tirx")
        except (tvm.error.InternalError, RuntimeError) as error:  # lowering, or nvcc/NVRTC
            raise CompileFailed(str(error)) from error
        _store(executable, stored)
    _COMPILED[key] = executable
    if len(_COMPILED) > _COMPILED_LIMIT:
        _COMPILED.popitem(last=False)
    return executable


def _stored_path(tvm: Any, key: int, target: Any) -> Path | None:
    """Where the tenant's compile cache keeps this kernel's library, if there is a cache."""
    root = os.environ.get("KCORAL_COMPILE_CACHE")
    if not root:
        return None
    version = hashlib.sha256(f"{tvm.__version__} {target}".encode()).hexdigest()[:16]
    return Path(root) / "tirx" / f"{key & 0xFFFF_FFFF_FFFF_FFFF:016x}-{version}.so"


def _load_stored(tvm: Any, path: Path | None) -> Any:
    """The executable an earlier program stored at ``path``, or None (absent, or unusable:
    then it is compiled and stored again)."""
    if path is None or not path.is_file():
        return None
    try:
        return tvm.runtime.Executable(tvm.runtime.load_module(str(path)))
    except Exception:  # noqa: BLE001 - a damaged or foreign file is a miss, never a failure
        return None


def _store(executable: Any, path: Path | None) -> None:
    """Exports ``executable`` to ``path`` as a shared library: written beside it, then
    renamed, so that a concurrent program loads the whole file or none. Best effort: the
    program's own result never depends on it."""
    if path is None:
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.so")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        executable.export_library(str(temporary))
        os.replace(temporary, path)
    except Exception:  # noqa: BLE001 - no compiler, a full cache: the kernel stays uncached
        temporary.unlink(missing_ok=True)
