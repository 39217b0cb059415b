"""Long fuzzing runs: each fuzz target for a number of runs (10**7 by default) or a time.

Builds the targets (``scripts/fuzz.sh --build-only``), makes the seeds
(``fuzz/make_seeds.py``), then runs every target of ``fuzz/`` with libFuzzer and prints,
per target, the runs executed, crashes, leaks, timeouts and out-of-memory stops, the
corpus it grew to and the executions per second; ``--json`` writes the same to a file.

The cores are shared out among the targets: as many targets run at once as there are
cores, and where there are more cores than targets each target gets several libFuzzer
jobs (``-jobs``/``-workers``) that share its corpus, the runs split among them. A job
stops at its first finding, and libFuzzer keeps the input under
``build/fuzz/long/artifacts/<target>/`` (``--work``). The corpora grow in
``build/fuzz/long/corpus/`` and are kept for the next run (``--fresh`` starts over from the
seeds).

    .venv/bin/python benchmarks/fuzz_long.py --runs 10000000 --max-time 900 \\
        --max-time response_codec_fuzzer=3000 --json benchmarks/results/fuzz-long-2core.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import configparser
import datetime
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "fuzz"
# Slowest first, so that the longest run starts at once.
TARGETS = ["large_frame_fuzzer", "large_values_fuzzer", "response_codec_fuzzer", "program_fuzzer",
           "execute_request_fuzzer", "multipart_fuzzer", "wire_decode_fuzzer", "returned_values_fuzzer"]
FINDINGS = {"crash": "crashes", "leak": "leaks", "timeout": "timeouts", "oom": "ooms"}


def target_flags(target: str) -> list[str]:
    """The target's own libFuzzer flags, from fuzz/<target>.options (as fuzz/CMakeLists.txt reads them)."""
    options = configparser.ConfigParser()
    options.read(ROOT / "fuzz" / f"{target}.options")
    return [f"-{key}={value}" for key, value in options.items("libfuzzer")] if options.has_section("libfuzzer") else []


def final_stats(log: str) -> dict[str, int]:
    """libFuzzer's -print_final_stats lines (``stat::name: value``), also printed on a crash."""
    return {name: int(value) for name, value in re.findall(r"^stat::(\w+):\s+(\d+)", log, re.M)}


def run_target(target: str, paths: argparse.Namespace, runs: int, max_time: int | None, jobs: int) -> dict[str, Any]:
    long = paths.work
    corpus, artifacts, work = long / "corpus" / target, long / "artifacts" / target, long / "work" / target
    for folder in (corpus, artifacts):
        folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    before = set(artifacts.iterdir())
    folders = [corpus, paths.seeds / target]
    if (ROOT / "fuzz" / "regressions" / target).is_dir():
        folders.append(ROOT / "fuzz" / "regressions" / target)
    command = [str(paths.bin / target), *target_flags(target), f"-runs={math.ceil(runs / jobs)}", f"-jobs={jobs}",
               f"-workers={jobs}", "-print_final_stats=1", "-timeout=10", "-rss_limit_mb=2048",
               f"-artifact_prefix={artifacts}/"]
    if max_time is not None:
        command.append(f"-max_total_time={max_time}")
    command += [str(folder) for folder in folders]
    started = time.monotonic()
    # With -jobs, each job writes fuzz-<i>.log in the working directory.
    parent = subprocess.run(command, cwd=work, capture_output=True, text=True, errors="replace")
    wall_s = time.monotonic() - started
    logs = [path.read_text(errors="replace") for path in sorted(work.glob("fuzz-*.log"))]
    stats = [final_stats(log) for log in logs]
    executed = sum(s.get("number_of_executed_units", 0) for s in stats)
    found = [path.name for path in sorted(set(artifacts.iterdir()) - before)]
    files = [path for path in corpus.iterdir() if path.is_file()]
    result: dict[str, Any] = {
        "target": target,
        "jobs": jobs,
        "runs_asked": runs,
        "runs": executed,
        "wall_s": round(wall_s, 1),
        "exec_per_s": round(executed / wall_s) if wall_s > 0 else 0,
        "libfuzzer_exec_per_s": [s.get("average_exec_per_sec", 0) for s in stats],
        "new_units": sum(s.get("new_units_added", 0) for s in stats),
        "peak_rss_mb": max((s.get("peak_rss_mb", 0) for s in stats), default=0),
        "corpus_files": len(files),
        "corpus_bytes": sum(path.stat().st_size for path in files),
        "findings": found,
        "exit_code": parent.returncode,
    }
    for prefix, key in FINDINGS.items():
        result[key] = sum(name.startswith(prefix + "-") for name in found)
    # A job that died without leaving an input (killed from outside, say) is a failure too.
    result["sanitizer_reports"] = sum(log.count("==ERROR:") + log.count("runtime error:") for log in logs)
    return result


def first_line(command: list[str]) -> str:
    """The first line a command prints, or "" where it cannot run (a machine without it)."""
    try:
        output = subprocess.run(command, capture_output=True, text=True).stdout
    except OSError:
        return ""
    return output.splitlines()[0] if output else ""


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10**7, help="runs per target, all its jobs together")
    parser.add_argument("--max-time", action="append", default=[], metavar="[TARGET=]SECONDS",
                        help="seconds per target at most (libFuzzer -max_total_time); repeatable, "
                             "TARGET=SECONDS for one target")
    parser.add_argument("--targets", nargs="+", default=TARGETS, choices=TARGETS)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--fresh", action="store_true", help="drop the corpora grown by earlier runs")
    parser.add_argument("--no-build", action="store_true", help="use the targets as they are")
    parser.add_argument("--bin", type=Path, default=BUILD / "fuzz", help="where the targets are")
    parser.add_argument("--work", type=Path, default=BUILD / "long", help="corpora, artifacts and logs")
    parser.add_argument("--seeds", type=Path, help="seed folders made before (default: make them in --work)")
    parser.add_argument("--json", type=Path, help="write the figures here (e.g. benchmarks/results/...)")
    args = parser.parse_args()
    args.bin, args.work = args.bin.resolve(), args.work.resolve()  # the targets run in work folders

    if not args.no_build:
        subprocess.run([str(ROOT / "scripts" / "fuzz.sh"), "--build-only"], check=True)
    if args.fresh:
        shutil.rmtree(args.work / "corpus", ignore_errors=True)
    if args.seeds is not None:
        args.seeds = args.seeds.resolve()
    else:
        args.seeds = args.work / "seeds"
        subprocess.run([sys.executable, str(ROOT / "fuzz" / "make_seeds.py"), "--out", str(args.seeds)], check=True)

    max_time: dict[str, int | None] = dict.fromkeys(args.targets)
    for item in args.max_time:
        target, _, seconds = item.rpartition("=")
        for name in [target] if target else args.targets:
            if name not in max_time:
                parser.error(f"--max-time: no target {name}")
            max_time[name] = int(seconds)
    parallel = min(args.cores, len(args.targets))
    jobs = max(1, args.cores // len(args.targets))
    started = datetime.datetime.now(datetime.timezone.utc)
    commit = first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    load_before = load_average()
    print(f"fuzz_long: {len(args.targets)} targets, {parallel} at once, {jobs} job(s) each, "
          f"{args.runs} runs each, time limits {max_time}", flush=True)
    results = []
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        futures = [pool.submit(run_target, t, args, args.runs, max_time[t], jobs) for t in args.targets]
        for future in concurrent.futures.as_completed(futures):
            result = future.result()
            results.append(result)
            print(f"fuzz_long: {result['target']} done: {result['runs']} runs in {result['wall_s']} s", flush=True)
    results.sort(key=lambda r: args.targets.index(r["target"]))

    header = f"{'target':<24}{'runs':>12}{'crashes':>9}{'leaks':>7}{'timeouts':>10}{'ooms':>6}" \
             f"{'corpus':>8}{'corpus KB':>11}{'exec/s':>9}{'wall s':>9}"
    print(header)
    for r in results:
        print(f"{r['target']:<24}{r['runs']:>12}{r['crashes']:>9}{r['leaks']:>7}{r['timeouts']:>10}{r['ooms']:>6}"
              f"{r['corpus_files']:>8}{r['corpus_bytes'] / 1024:>11.0f}{r['exec_per_s']:>9}{r['wall_s']:>9}")
        for name in r["findings"]:
            print(f"  finding: {args.work}/artifacts/{r['target']}/{name}")

    if args.json:
        clang = first_line(["clang++-19", "--version"])
        document = {
            "started": started.isoformat(timespec="seconds"),
            "commit": commit,
            "compiler": clang,
            "cores": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": load_average(),
            "runs_per_target": args.runs,
            "max_time_s": max_time,
            "targets_at_once": parallel,
            "jobs_per_target": jobs,
            "targets": results,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"fuzz_long: wrote {args.json}")
    bad = sum(r["crashes"] + r["leaks"] + r["timeouts"] + r["ooms"] + r["sanitizer_reports"] for r in results)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
