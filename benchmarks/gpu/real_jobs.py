"""Kernel authors' real programs, sent several times in a row to our server and the reference's.

    python benchmarks/gpu/real_jobs.py [--ours URL] [--variant NAME=URL ...] [--reference URL] [--rounds 3]
                                       [--programs guide-tirx,tirx,cutedsl,cuda,triton,library]
                                       [--json PATH]

The programs are the user guide's: its TIRx job (examples/benchmark_kernel.py), the
four-language client's TIRx, CuTeDSL, CUDA C and Triton programs
(examples/remote_compile_client.py) and the library upload (examples/library_upload_client.py,
whose library is built here, once per target, with the local CUDA toolchain and TVM FFI).
Each is built by the example's own code and sent as a variant that times its phases inside
the worker with time.perf_counter() and returns them beside its results; otherwise the user's
instructions and code are unchanged:

- between the program's instructions, a small module of our own takes a mark wherever the
  phase changes (marks run under the GPU lease only where the program holds it anyway, so
  the lease is taken and given up at the same instructions as in the user's program);
- where one function holds several phases (the guide's evaluate(), which compiles, checks
  and times), lines appended to its module wrap compile_tirx and benchmark, so that the
  function records its phases itself.

Phases: imports (uploaded modules' top level), compile (compile_* calls; for the library
upload, loading the uploaded library), check (the kernel's first call, the expected values
and the comparison), timing (the benchmark() call), other (allocations, uploads of data,
returns; JSON only).

Per server, program and round it records the wall time this client saw around
Client.execute (blob negotiation included), the response's queue_ms, elapsed_ms,
lease_wait_ms and lease_held_ms, the phases, and the benchmark() median; an error (a failed
program, a refused request, a library that could not be built) is recorded in its cell with
the server's message, and the run goes on. Requests go one at a time, ours before the
reference's, with a pause between them (--pause-seconds) for the servers to replace the
workers they just used: every program gets a fresh worker on both servers by default, and
compiled functions are cached in the worker's process only, so later rounds differ from
the first only by what survives outside it (blobs the server keeps, the OS's file cache).

It prints a Markdown table per program (rows: rounds; columns: each server's wall, elapsed,
lease held, queue and phases, in ms; "-" for what a cell lacks) and a summary line (ours
against the reference in the first and the last round); --json writes every cell. It starts
no server: benchmarks/gpu/run.sh real-jobs starts both on the GPU machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from kcoral import Client, Program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PHASES = ("imports", "compile", "check", "timing")
PREFIX = "real_jobs_"  # ids and return keys of what the variant adds to the user's program

# The phase clock: mark(phase) starts a phase (and ends the one before); phases() sums them.
CLOCK = '''\
"""benchmarks/gpu/real_jobs.py's phase clock: marks taken between the program's instructions."""
import time

_marks = []


def mark(phase):
    _marks.append((phase, time.perf_counter()))


def phases():
    totals = {}
    for (phase, started), (_, ended) in zip(_marks, _marks[1:]):
        totals[phase] = totals.get(phase, 0.0) + (ended - started) * 1e3
    totals["in_program"] = (_marks[-1][1] - _marks[0][1]) * 1e3
    return totals
'''

# Appended to a module whose one function holds several phases: its names are rebound to
# timed wrappers (a module's functions look them up when called, so the user's code uses
# the wrappers unchanged). "call" is the whole of the selected function.
WRAPPER = '''

# Appended by benchmarks/gpu/real_jobs.py: the phases inside this module's functions.
import time as _real_jobs_time

_real_jobs_ms = {{}}


def _real_jobs_timed(phase, function):
    def timed(*args, **kwargs):
        started = _real_jobs_time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            elapsed_ms = (_real_jobs_time.perf_counter() - started) * 1e3
            _real_jobs_ms[phase] = _real_jobs_ms.get(phase, 0.0) + elapsed_ms

    return timed


{rebindings}


def real_jobs_phases():
    return dict(_real_jobs_ms)
'''


@dataclass
class Job:
    """One user program: how to build it (given the server's client) and where it comes from.

    ``wrapped`` maps a module upload's id to {name in that module: phase} for the names the
    variant rebinds to timed wrappers; a function mapped to "call" is split by the others.
    """

    name: str
    origin: str
    build: Callable[[Client], Program]
    wrapped: dict[str, dict[str, str]] = field(default_factory=dict)


def load_example(name: str) -> ModuleType:
    """An examples/ file as a module (examples/ is no package), without running its main()."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LibraryBuilds:
    """library_upload_client.build_library, once per target arch (the build is the client's)."""

    def __init__(self, example: ModuleType, arch_override: str | None) -> None:
        self._example = example
        self._arch_override = arch_override
        self.built: dict[str, dict[str, Any]] = {}  # arch -> {"bytes": ..., "build_ms": ...}
        self._failed: dict[str, Exception] = {}  # arch -> why its build failed (tried once)

    def program(self, client: Client) -> Program:
        arch = self._arch_override or client.target()["arch"]
        if self._arch_override and "TVM_FFI_CUDA_ARCH_LIST" not in os.environ:
            # Without a GPU here TVM FFI cannot find the arch, which it wants besides the flags.
            suffix = "a" if arch.endswith("a") else ""
            number = arch.removeprefix("sm_").removesuffix("a")
            os.environ["TVM_FFI_CUDA_ARCH_LIST"] = f"{number[:-1]}.{number[-1]}{suffix}"
        if arch in self._failed:
            raise self._failed[arch]
        if arch not in self.built:
            started = time.perf_counter()
            try:
                with tempfile.TemporaryDirectory() as directory:
                    library = self._example.build_library(arch, directory)
            except Exception as error:
                self._failed[arch] = error
                raise
            self.built[arch] = {"bytes": library, "build_ms": (time.perf_counter() - started) * 1e3}
        return self._example.build_program(self.built[arch]["bytes"])


def make_jobs(library_arch: str | None) -> tuple[list[Job], LibraryBuilds]:
    guide = load_example("benchmark_kernel")
    languages = load_example("remote_compile_client")
    library = LibraryBuilds(load_example("library_upload_client"), library_arch)
    jobs = [
        Job("guide-tirx", "the user guide's TIRx job: examples/benchmark_kernel.py build_program()",
            lambda client: guide.build_program(),
            {"module": {"compile_tirx": "compile", "benchmark": "timing", "evaluate": "call"}}),
        Job("tirx", "examples/remote_compile_client.py tirx_program()",
            lambda client: languages.tirx_program()),
        Job("cutedsl", "examples/remote_compile_client.py cutedsl_program()",
            lambda client: languages.cutedsl_program()),
        Job("cuda", "examples/remote_compile_client.py cuda_program() (CUDA C, TVM FFI build_inline)",
            lambda client: languages.cuda_program()),
        Job("triton", "examples/remote_compile_client.py triton_program()",
            lambda client: languages.triton_program()),
        Job("library", "examples/library_upload_client.py build_program(build_library(arch))",
            library.program),
    ]
    return jobs, library


def phase_of(instruction: dict[str, Any], functions: Mapping[str, tuple[str, str]],
             calls: set[tuple[str, str]]) -> str | None:
    """The phase an instruction belongs to; None keeps the phase of the one before."""
    op = instruction["op"]
    if op == "upload":
        return {"module": "imports", "library": "compile"}.get(instruction["kind"], "other")
    if op == "return":
        return "other"
    if op != "run":
        return None  # get_function: selecting costs nothing worth a mark of its own
    selected = functions.get(instruction["fn"]["$ref"])
    if selected is None:
        return "check"  # a value called as a function: the compiled kernel's first call
    if selected in calls:
        return "call"
    name = selected[1]
    if name.startswith("compile"):
        return "compile"
    if name == "benchmark":
        return "timing"
    if name in ("empty", "randn"):
        return "other"
    return "check"


def with_phases(program: Program, wrapped: Mapping[str, Mapping[str, str]]) -> Program:
    """The same program, replayed instruction by instruction, with the phase clock's marks
    between them, ``wrapped``'s modules extended by WRAPPER, and the phases returned."""
    variant = Program()
    clock = variant.upload(id=f"{PREFIX}clock", kind="module", source=CLOCK)
    mark = variant.get_function(id=f"{PREFIX}mark", module=clock, name="mark")
    marks = 0

    def take_mark(phase: str) -> None:
        nonlocal marks
        variant.run(id=f"{PREFIX}mark_{marks}", fn=mark, args=[phase])
        marks += 1

    functions: dict[str, tuple[str, str]] = {}  # get_function id -> (module id, name)
    calls = {(module, name) for module, names in wrapped.items()
             for name, phase in names.items() if phase == "call"}
    blobs = program.blobs
    current = None
    for instruction in program.instructions:
        phase = phase_of(instruction, functions, calls)
        if phase is not None and phase != current:
            take_mark(phase)
            current = phase
        op, id = instruction["op"], instruction.get("id")
        if op == "upload" and instruction["kind"] == "module":
            source = instruction["source"]
            if id in wrapped:
                rebindings = "\n".join(f'{name} = _real_jobs_timed("{phase}", {name})'
                                       for name, phase in wrapped[id].items())
                source += WRAPPER.format(rebindings=rebindings)
            variant.upload(id=id, kind="module", source=source, language=instruction.get("language"))
        elif op == "upload" and instruction["kind"] == "tensor":
            variant.upload(id=id, kind="tensor", value=blobs[instruction["blob"]],
                           dtype=instruction["dtype"], shape=instruction["shape"])
        elif op == "upload" and instruction["kind"] == "file":
            variant.upload_file(id=id, blob=blobs[instruction["blob"]], path=instruction["path"])
        elif op == "upload":
            variant.upload(id=id, kind=instruction["kind"], value=blobs[instruction["blob"]])
        elif op == "get_function":
            functions[id] = (instruction["module"]["$ref"], instruction["name"])
            variant.get_function(id=id, module=instruction["module"], name=instruction["name"],
                                 cpu_only=instruction.get("cpu_only", False))
        elif op == "run":
            variant.run(id=id, fn=instruction["fn"], args=instruction["args"])
        elif instruction.get("kind") == "file":
            variant.return_file(key=instruction["key"], path=instruction["path"])
        elif instruction.get("kind") == "folder":
            variant.return_folder(key=instruction["key"], path=instruction["path"])
        else:
            variant.return_(key=instruction["key"], value=instruction["value"])
    take_mark("end")
    phases = variant.get_function(id=f"{PREFIX}phases_fn", module=clock, name="phases")
    variant.return_(key=f"{PREFIX}phases", value=variant.run(id=f"{PREFIX}phases", fn=phases))
    for module in wrapped:
        inner = variant.get_function(id=f"{PREFIX}inner_fn_{module}", module={"$ref": module},
                                     name="real_jobs_phases")
        variant.return_(key=f"{PREFIX}inner_{module}",
                        value=variant.run(id=f"{PREFIX}inner_{module}", fn=inner))
    return variant


def merged_phases(results: Mapping[str, Any], wrapped: Mapping[str, Any]) -> dict[str, float] | None:
    """imports/compile/check/timing/other/in_program (ms) from the marks and the wrappers."""
    outer = results.get(f"{PREFIX}phases")
    if not isinstance(outer, dict):
        return None
    phases = {phase: outer.get(phase, 0.0) for phase in (*PHASES, "other")}
    phases["in_program"] = outer["in_program"]
    call_ms = outer.get("call", 0.0)
    inside_ms = 0.0
    for module in wrapped:
        inner = results.get(f"{PREFIX}inner_{module}") or {}
        whole = inner.get("call", 0.0)
        split = {phase: ms for phase, ms in inner.items() if phase != "call"}
        for phase, ms in split.items():
            phases[phase] = phases.get(phase, 0.0) + ms
        phases["check"] += whole - sum(split.values())  # the rest of the call: run and compare
        inside_ms += whole
    phases["other"] += call_ms - inside_ms  # the marks' own cost around the call
    return phases


def kernel_us(results: Mapping[str, Any]) -> float | None:
    """benchmark()'s median from the example's returned timing report, where there is one."""
    for report in (results.get("timing"), (results.get("report") or {}).get("timing")):
        if isinstance(report, dict) and isinstance(report.get("latency_ms_median"), (int, float)):
            return report["latency_ms_median"] * 1e3
    return None


def run_cell(client: Client, job: Job, timeout_seconds: float) -> dict[str, Any]:
    """One request: its timings and phases, or its error; never raises for the server's sake."""
    cell: dict[str, Any] = {"status": None, "wall_ms": None, "queue_ms": None, "elapsed_ms": None,
                            "lease_wait_ms": None, "lease_held_ms": None, "phases": None,
                            "kernel_us": None, "error": None}
    try:
        program = with_phases(job.build(client), job.wrapped)
    except Exception as error:  # the example's own code, a library build or /health
        cell.update(status="NOT SENT", error=f"{type(error).__name__}: {error}")
        return cell
    started = time.perf_counter()
    try:
        result = client.execute(program, timeout_seconds=timeout_seconds)
    except Exception as error:  # a refusal (ServerError), no answer, or one breaking the protocol
        cell.update(status="ERROR", wall_ms=(time.perf_counter() - started) * 1e3,
                    error=f"{type(error).__name__}: {error}")
        return cell
    cell.update(status=result.status, wall_ms=(time.perf_counter() - started) * 1e3,
                queue_ms=result.queue_ms, elapsed_ms=result.elapsed_ms,
                lease_wait_ms=result.lease_wait_ms, lease_held_ms=result.lease_held_ms,
                phases=merged_phases(result.results, job.wrapped),
                kernel_us=kernel_us(result.results))
    if result.error is not None:
        error = result.error
        cell["error"] = (f"{error['kind']} at instruction {error['instruction_index']} "
                         f"({error['instruction_op']} {error['instruction_id']}): {error['message']}")
    return cell


def shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def table(job: Job, rows: list[dict[str, dict[str, Any]]], servers: list[str]) -> str:
    columns = ["wall", "elapsed", "lease", "queue", *PHASES]
    header = ["round"] + [f"{server} {column}" if i == 0 else column
                          for server in servers for i, column in enumerate(columns)]
    lines = [f"### {job.name}: {job.origin}", "",
             "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    errors = []
    for number, row in enumerate(rows, start=1):
        cells = [str(number)]
        for server in servers:
            cell = row[server]
            phases = cell["phases"] or {}
            cells += [shown(cell["wall_ms"]), shown(cell["elapsed_ms"]), shown(cell["lease_held_ms"]),
                      shown(cell["queue_ms"]), *(shown(phases.get(phase)) for phase in PHASES)]
            if cell["error"]:
                message = cell["error"].replace("\n", " ").replace("|", "/")
                errors.append(f"- {server}, round {number}: {cell['status']}: "
                              f"{message[:300]}{'...' if len(message) > 300 else ''}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Times in ms; lease = lease_held_ms; phases measured inside the program."]
    if errors:
        lines += ["", *errors]
    lines += ["", summary(rows, servers)]
    return "\n".join(lines)


def summary(rows: list[dict[str, dict[str, Any]]], servers: list[str]) -> str:
    """Ours against each other server, in the first and the last round."""
    others = [server for server in servers if server != "ours"]
    if "ours" not in servers or not others:
        return "summary: one server only, nothing to compare"
    lines = []
    ends = [("round 1", rows[0])] + ([(f"round {len(rows)}", rows[-1])] if len(rows) > 1 else [])
    for other in others:
        parts = []
        for label, row in ends:
            ours, theirs = row["ours"], row[other]
            if ours["status"] != "COMPLETED" or theirs["status"] != "COMPLETED":
                parts.append(f"{label}: ours {ours['status']}, {other} {theirs['status']}")
                continue
            figures = []
            for name, key in (("wall", "wall_ms"), ("elapsed", "elapsed_ms"), ("lease", "lease_held_ms")):
                ratio = f" ({ours[key] / theirs[key]:.2f}x)" if theirs[key] else ""
                figures.append(f"{name} {ours[key]:.0f} vs {theirs[key]:.0f} ms{ratio}")
            parts.append(f"{label}: " + ", ".join(figures))
        lines.append(f"summary, ours vs {other}: " + "; ".join(parts))
    return "\n".join(lines)


def describe(client: Client) -> dict[str, Any]:
    try:
        health = client.health()
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {"versions": health.get("versions"), "target": health.get("target"),
            "load": health.get("load")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", metavar="URL", help="our server (kcoral-server)")
    parser.add_argument("--reference", metavar="URL", help="the reference's server (kcoral 0.1.1)")
    parser.add_argument("--rounds", type=int, default=3, help="times each program is sent (default 3)")
    parser.add_argument("--programs", default="guide-tirx,tirx,cutedsl,cuda,triton,library",
                        help="comma-separated selection (default: all)")
    parser.add_argument("--timeout-seconds", type=float, default=300.0,
                        help="each program's execution limit (default 300)")
    parser.add_argument("--pause-seconds", type=float, default=1.0,
                        help="pause after each request, for the server to replace its worker "
                             "(default 1)")
    parser.add_argument("--library-arch", metavar="ARCH",
                        help="build the library for ARCH instead of the server's target (to try "
                             "the library program against a CPU server, which reports none)")
    parser.add_argument("--variant", metavar="NAME=URL", action="append", default=[],
                        help="another of our servers (another build, other flags), measured "
                             "between ours and the reference (repeatable)")
    parser.add_argument("--json", metavar="PATH", help="write every cell here")
    args = parser.parse_args()
    variants = [variant.split("=", 1) for variant in args.variant]
    if any(len(variant) != 2 or variant[0] in ("ours", "reference") for variant in variants):
        parser.error("--variant takes NAME=URL, NAME neither ours nor reference")
    urls = {name: url for name, url in (("ours", args.ours), *variants, ("reference", args.reference)) if url}
    if not urls:
        parser.error("give --ours, --reference or both")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    jobs, library = make_jobs(args.library_arch)
    by_name = {job.name: job for job in jobs}
    selected = [name.strip() for name in args.programs.split(",") if name.strip()]
    unknown = [name for name in selected if name not in by_name]
    if unknown:
        parser.error(f"unknown programs {unknown}; choose from {', '.join(by_name)}")

    servers = list(urls)
    clients = {name: Client(url) for name, url in urls.items()}
    figures: dict[str, Any] = {
        "servers": {name: {"url": urls[name], **describe(client)} for name, client in clients.items()},
        "rounds": args.rounds, "pause_seconds": args.pause_seconds, "programs": {}}
    for name, server in figures["servers"].items():
        print(f"{name}: {server['url']} {server.get('versions') or server.get('error')}")
    print()
    try:
        for name in selected:
            job = by_name[name]
            rows = []
            for _ in range(args.rounds):
                row = {}
                for server in servers:
                    row[server] = run_cell(clients[server], job, args.timeout_seconds)
                    time.sleep(args.pause_seconds)
                rows.append(row)
            figures["programs"][name] = {"origin": job.origin, "rounds": rows}
            if name == "library":
                figures["programs"][name]["client_build_ms"] = {
                    arch: built["build_ms"] for arch, built in library.built.items()}
            print(table(job, rows, servers))
            if name == "library" and library.built:
                print("library built here (not in wall): " + ", ".join(
                    f"{arch} in {built['build_ms']:.0f} ms" for arch, built in library.built.items()))
            print(flush=True)
            if args.json:  # after every program: a run cut short keeps what it measured
                Path(args.json).write_text(json.dumps(figures, indent=2))
    finally:
        for client in clients.values():
            client.close()


if __name__ == "__main__":
    sys.exit(main())
