"""The kcoral command without a server: parsing, the program a run becomes, what goes up,
the runner module (executed here, as the worker would), printing a result, and benchmark()
stepping aside under a GPU tool.

The end-to-end tests against a real server are in test/python/e2e/test_e2e_cli.py.
"""

from __future__ import annotations

import signal
import sys
import time
import tomllib
import types
from pathlib import Path

import pytest

import kcoral
from kcoral import ProgramResult, ReturnedFile, ReturnedFolder, _cli
from kcoral import builtins as kcoral_builtins
from kcoral._terminal import printable

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A current directory holding bench/check.py (which imports bench/helper.py)."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "check.py").write_text("import helper\n")
    (tmp_path / "bench" / "helper.py").write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KCORAL_URL", "http://server.invalid:8000")
    return tmp_path


def tool_run(*argv: str) -> _cli.ToolRun:
    return _cli.ToolRun.from_args(_cli.parse(["run", *argv]))


def test_pyproject_declares_the_console_script():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["kcoral"] == "kcoral._cli:main"


# -- parsing --------------------------------------------------------------------------------


def test_options_go_before_or_after_the_tool_and_default_from_the_environment(project):
    args = _cli.parse(["run", "--timeout-seconds", "9", "python", "--url", "http://a:1",
                       "bench/check.py", "--url", "kept"])
    assert (args.url, args.timeout_seconds, args.args) == ("http://a:1", 9.0, ["--url", "kept"])
    args = _cli.parse(["run", "python", "bench/check.py"])
    assert args.url == "http://server.invalid:8000"
    assert (args.timeout_seconds, args.output_limit_bytes) == (300.0, 16 << 20)
    assert args.gpu_count is None  # the server's default
    assert _cli.parse(["run", "python", "--gpu-count", "2", "bench/check.py"]).gpu_count == 2


def test_a_separator_after_the_script_reaches_the_script(project):
    assert _cli.parse(["run", "python", "bench/check.py", "--", "-v"]).args == ["--", "-v"]
    assert _cli.parse(["run", "python", "--", "bench/check.py", "-v"]).args == ["-v"]


def test_no_url_is_a_usage_error(project, monkeypatch, capsys):
    monkeypatch.delenv("KCORAL_URL")
    with pytest.raises(SystemExit) as exit_info:
        _cli.parse(["run", "shell", "true"])
    assert exit_info.value.code == 2
    assert "no server: pass --url or set KCORAL_URL" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["run", "python", "missing.py"],
    ["run", "shell"],
    ["run", "ncu", "--ncu-options", "-o other", "bench/check.py"],
    ["run", "compute-sanitizer", "--sanitizer-options", "--log-file=x", "bench/check.py"],
    ["run", "--upload", "..", "python", "bench/check.py"],
    ["run", "--timeout-seconds", "inf", "shell", "true"],
    ["run", "--gpu-count", "9", "python", "bench/check.py"],
    ["run", "--gpu-count", "0", "shell", "true"],
])
def test_command_lines_that_cannot_run_exit_2_before_anything_is_sent(project, argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _cli.main(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


# -- the program a run becomes --------------------------------------------------------------


def test_python_uploads_the_scripts_folder_and_runs_it_unchanged(project):
    run = tool_run("python", "bench/check.py", "--size", "3")
    assert run.argv == [{"python": True}, "bench/check.py", "--size", "3"]
    assert [path for path, _, _ in run.uploads] == ["bench/check.py", "bench/helper.py"]
    assert not run.needs_gpu and not run.cpu_only and run.output_file is None
    instructions = run.program().instructions
    assert [i["path"] for i in instructions if i.get("kind") == "file"] == [
        "job/bench/check.py", "job/bench/helper.py"]
    select = next(i for i in instructions if i["op"] == "get_function")
    assert select["name"] == "run_tool" and "cpu_only" not in select  # holds the lease
    run_instruction = next(i for i in instructions if i["op"] == "run")
    spec = run_instruction["args"][0]
    assert spec["cwd"] == "job" and spec["env"] == {"PYTHONUNBUFFERED": "1"}
    assert spec["timeout_seconds"] == 290 and spec["grace_seconds"] == 5
    assert [i["op"] for i in instructions[-2:]] == ["run", "return"]


def test_cpu_only_releases_the_lease(project):
    for argv in (["python", "--cpu-only", "bench/check.py"], ["shell", "--cpu-only", "true"]):
        select = next(i for i in tool_run(*argv).program().instructions
                      if i["op"] == "get_function")
        assert select["cpu_only"] is True


def test_ncu_profiles_the_script_and_brings_the_report_back(project):
    run = tool_run("ncu", "--ncu-options", "--set full -k regex:add", "bench/check.py", "7")
    assert run.argv == ["ncu", "--export", {"output": "report.ncu-rep"}, "--set", "full", "-k",
                        "regex:add", {"python": True}, "bench/check.py", "7"]
    assert run.env["KCORAL_UNDER_TOOL"] == "ncu" and run.needs_gpu
    assert run.save_to == Path("check.ncu-rep") and not run.print_output_file
    last = run.program().instructions[-1]
    assert last == {"op": "return", "key": "output", "kind": "folder", "path": "kcoral-out"}
    assert tool_run("ncu", "-o", "out/prof", "bench/check.py").save_to == Path("out/prof.ncu-rep")


def test_an_existing_report_is_kept_unless_forced(project):
    Path("check.ncu-rep").write_bytes(b"old")
    with pytest.raises(_cli.UsageError, match="pass -f"):
        tool_run("ncu", "bench/check.py")
    assert tool_run("ncu", "-f", "bench/check.py").overwrite


def test_compute_sanitizer_logs_into_the_returned_folder(project):
    run = tool_run("compute-sanitizer", "--tool", "racecheck", "--sanitizer-options",
                   "--error-exitcode 99", "bench/check.py")
    assert run.argv == ["compute-sanitizer", "--tool", "racecheck", "--log-file",
                        {"output": "sanitizer.log"}, "--error-exitcode", "99",
                        {"python": True}, "bench/check.py"]
    assert run.env["KCORAL_UNDER_TOOL"] == "compute-sanitizer"
    assert run.print_output_file and run.save_to is None and run.needs_gpu
    assert tool_run("compute-sanitizer", "bench/check.py").argv[2] == "memcheck"


def test_shell_uploads_the_current_directory_and_joins_its_words(project):
    run = tool_run("shell", "--", "ls", "-l", "bench")
    assert run.argv == ["bash", "-c", "ls -l bench"]
    assert [path for path, _, _ in run.uploads] == ["bench/check.py", "bench/helper.py"]
    assert tool_run("shell", "--no-upload", "true").uploads == []


def test_uploads_chosen_explicitly_keep_their_paths_and_take_the_script_along(project):
    Path("data.bin").write_bytes(b"\0\1")
    run = tool_run("--upload", "data.bin", "python", "bench/check.py")
    assert [path for path, _, _ in run.uploads] == ["bench/check.py", "data.bin"]
    assert [p for p, _, _ in tool_run("python", "--no-upload", "bench/check.py").uploads] == [
        "bench/check.py"]


def test_a_script_outside_the_current_directory_runs_from_its_own_folder(project, monkeypatch):
    (project / "elsewhere").mkdir()
    monkeypatch.chdir(project / "elsewhere")
    run = tool_run("python", "../bench/check.py")
    assert run.argv[1] == "check.py"
    assert [path for path, _, _ in run.uploads] == ["check.py", "helper.py"]
    with pytest.raises(_cli.UsageError, match="outside the current directory"):
        tool_run("python", "--no-upload", "../bench/check.py")


def test_folders_leave_out_caches_and_links_to_folders_but_follow_links_to_files(project, capsys):
    (project / "bench" / "__pycache__").mkdir()
    (project / "bench" / "__pycache__" / "helper.pyc").write_bytes(b"x")
    (project / "bench" / "notes.tmp").write_text("x")
    (project / "bench" / "linked.py").symlink_to(project / "bench" / "helper.py")
    (project / "bench" / "all").symlink_to(project)
    (project / "bench" / "run.sh").write_text("#!/bin/sh\n")
    (project / "bench" / "run.sh").chmod(0o755)
    uploads = {path: (data, executable) for path, data, executable
               in _cli.collect_uploads(["bench"], (*_cli.DEFAULT_EXCLUDES, "*.tmp"))}
    assert sorted(uploads) == ["bench/check.py", "bench/helper.py", "bench/linked.py",
                               "bench/run.sh"]
    assert uploads["bench/linked.py"] == (b"X = 1\n", False)
    assert uploads["bench/run.sh"][1] is True
    assert "not uploaded: bench/all (a link to a folder)" in capsys.readouterr().err


def test_too_large_an_upload_is_refused_before_anything_is_read(project, monkeypatch):
    monkeypatch.setattr(_cli, "MAX_UPLOAD_FILES", 1)
    with pytest.raises(_cli.UsageError, match="--upload, --exclude or --no-upload"):
        _cli.collect_uploads(["bench"], ())


# -- the runner, executed here ----------------------------------------------------------------


@pytest.fixture
def run_tool(tmp_path, monkeypatch):
    """RUNNER_SOURCE's run_tool, in a working directory of its own."""
    namespace: dict = {}
    exec(compile(_cli.RUNNER_SOURCE, "kcoral-runner", "exec"), namespace)
    monkeypatch.chdir(tmp_path)

    def call(argv, **overrides):
        spec = {"argv": argv, "cwd": "job", "output_dir": "kcoral-out", "uses_output": False,
                "executables": [], "env": {}, "timeout_seconds": 30, "grace_seconds": 1}
        spec.update(overrides)
        return namespace["run_tool"](spec)

    return call


def test_the_runner_returns_the_exit_code_and_passes_the_environment(run_tool, tmp_path):
    code = "import os, sys; open('seen', 'w').write(os.environ['MARK']); sys.exit(3)"
    status = run_tool([{"python": True}, "-c", code], env={"MARK": "here"})
    assert status == {"exit_code": 3, "signal": None, "timed_out": False}
    assert (tmp_path / "job" / "seen").read_text() == "here"


def test_the_runner_resolves_the_output_folder_and_restores_executable_bits(run_tool, tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "tool.sh").write_text("#!/bin/sh\necho made > \"$1\"\n")
    (tmp_path / "job" / "tool.sh").chmod(0o600)
    status = run_tool(["bash", "-c", './tool.sh "$0"', {"output": "made.txt"}],
                      uses_output=True, executables=["tool.sh"])
    assert status["exit_code"] == 0
    assert (tmp_path / "kcoral-out" / "made.txt").read_text() == "made\n"


def test_a_missing_tool_is_127_with_a_note(run_tool, capfd):
    status = run_tool(["no-such-tool-kcoral", "x"])
    assert status["exit_code"] == 127
    assert "kcoral: no-such-tool-kcoral: not found on the server" in capfd.readouterr().err


def test_a_tool_ended_by_a_signal_is_128_plus_it(run_tool, capfd):
    status = run_tool(["bash", "-c", "kill -SEGV $$"])
    assert status == {"exit_code": 128 + signal.SIGSEGV, "signal": "SIGSEGV", "timed_out": False}
    assert "bash was ended by SIGSEGV" in capfd.readouterr().err


def test_a_tool_past_its_time_is_stopped_with_everything_it_started(run_tool, tmp_path):
    started = time.monotonic()
    status = run_tool(["bash", "-c", "(sleep 30; touch late) & echo $! > child; sleep 30"],
                      timeout_seconds=1, grace_seconds=0.5)
    assert status["timed_out"] and status["exit_code"] == 124
    assert time.monotonic() - started < 10
    child = int((tmp_path / "job" / "child").read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)
    assert not (tmp_path / "job" / "late").exists()


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


# -- printing a result ------------------------------------------------------------------------


def result(status="COMPLETED", results=None, error=None, **fields) -> ProgramResult:
    values = dict(status=status, request_id="r", queue_ms=0.0, elapsed_ms=1.0,
                  lease_wait_ms=0.0, lease_held_ms=0.0, results=results or {}, stdout="out\n",
                  stderr="err\n", stdout_truncated=False, stderr_truncated=False, error=error)
    values.update(fields)
    return ProgramResult(**values)


def test_output_is_printed_and_the_exit_code_is_the_tools(project, capsys):
    run = tool_run("python", "bench/check.py")
    code = _cli.report(run, result(results={"tool": {"exit_code": 5}}, stdout_truncated=True))
    printed = capsys.readouterr()
    assert code == 5 and printed.out == "out\n"
    assert printed.err.startswith("err\n") and "cut stdout at its output limit" in printed.err


def test_a_failed_program_is_1_with_its_error_and_traceback(project, capsys):
    error = {"kind": "runtime", "message": "OSError: no space", "traceback": "Traceback: here\n",
             "instruction_index": 3, "instruction_op": "run", "instruction_id": "kcoral:tool"}
    assert _cli.report(tool_run("python", "bench/check.py"), result("FAILED", error=error)) == 1
    err = capsys.readouterr().err
    assert "the run failed on the server: runtime: OSError: no space" in err
    assert "Traceback: here" in err


def test_the_ncu_report_is_saved_and_the_sanitizer_log_printed(project, capsys):
    folder = ReturnedFolder({"report.ncu-rep": ReturnedFile(b"REPORT")})
    code = _cli.report(tool_run("ncu", "bench/check.py"),
                       result(results={"tool": {"exit_code": 0}, "output": folder}))
    assert code == 0 and Path("check.ncu-rep").read_bytes() == b"REPORT"
    assert "ncu report saved to check.ncu-rep" in capsys.readouterr().err
    folder = ReturnedFolder({"sanitizer.log": ReturnedFile(b"========= ERROR SUMMARY: 0\n")})
    run = tool_run("compute-sanitizer", "-o", "log.txt", "bench/check.py")
    assert _cli.report(run, result(results={"tool": {"exit_code": 0}, "output": folder})) == 0
    assert capsys.readouterr().out == "out\n========= ERROR SUMMARY: 0\n"
    assert Path("log.txt").read_text() == "========= ERROR SUMMARY: 0\n"


def test_a_missing_report_is_said_and_the_exit_code_kept(project, capsys):
    code = _cli.report(tool_run("ncu", "bench/check.py"),
                       result(results={"tool": {"exit_code": 9}, "output": ReturnedFolder({})}))
    assert code == 9 and "ncu wrote no report.ncu-rep" in capsys.readouterr().err
    assert not Path("check.ncu-rep").exists()


@pytest.mark.parametrize("results", [{}, {"tool": None}, {"tool": {"exit_code": "0"}},
                                     {"tool": {"exit_code": True}},
                                     {"tool": {"exit_code": 0}, "output": "report"}])
def test_an_answer_without_the_runners_status_is_125_not_a_crash(project, capsys, results):
    assert _cli.report(tool_run("ncu", "bench/check.py"), result(results=results)) == 125
    assert "holds no exit status of ncu" in capsys.readouterr().err
    assert not Path("check.ncu-rep").exists()


@pytest.mark.parametrize("exit_code", [256, -1, 1 << 70, 1000])
def test_an_exit_status_outside_0_255_is_125_not_passed_on(project, capsys, exit_code):
    # 256 would read as success, -1 as 255.
    code = _cli.report(tool_run("python", "bench/check.py"),
                       result(results={"tool": {"exit_code": exit_code}}))
    assert code == 125
    assert f"gives python the exit status {str(exit_code):.40}, outside 0-255" in (
        capsys.readouterr().err)


def test_exit_statuses_0_to_255_are_passed_on(project):
    for exit_code in (0, 255):
        assert _cli.report(tool_run("python", "bench/check.py"),
                           result(results={"tool": {"exit_code": exit_code}})) == exit_code


CONTROLS = "\x1b[31mred\x1b[0m \x1b]52;c;eA==\x07 \x9b2J \u202etxt \x00\x7f a\rb c\r\n\td\n"
ESCAPED = ("\\x1b[31mred\\x1b[0m \\x1b]52;c;eA==\\x07 \\x9b2J \\u202etxt \\x00\\x7f "
           "a\\x0db c\r\n\td\n")


def test_the_tools_output_is_printed_with_its_terminal_controls_escaped(project, capsys):
    assert printable(CONTROLS) == ESCAPED
    run = tool_run("python", "bench/check.py")
    assert not run.raw_output
    _cli.report(run, result(results={"tool": {"exit_code": 0}}, stdout=CONTROLS, stderr=CONTROLS))
    printed = capsys.readouterr()
    assert printed.out == ESCAPED and printed.err == ESCAPED


def test_raw_output_prints_the_tools_output_as_it_came(project, capsys):
    for argv in (["--raw-output", "python", "bench/check.py"],
                 ["python", "--raw-output", "bench/check.py"]):
        run = tool_run(*argv)
        assert run.raw_output
        _cli.report(run, result(results={"tool": {"exit_code": 0}}, stdout=CONTROLS,
                                stderr=CONTROLS))
        printed = capsys.readouterr()
        assert printed.out == CONTROLS and printed.err == CONTROLS
    assert "--raw-output" in _cli.build_parser().parse_args(["run", "shell", "true"]).tool_parser \
        .format_help()


def test_the_servers_error_traceback_and_log_are_printed_escaped(project, capsys):
    error = {"kind": "runtime", "message": "bad\x1b[2J", "traceback": "Traceback\x1b]0;t\x07\n",
             "instruction_index": 3, "instruction_op": "run", "instruction_id": "kcoral:tool"}
    _cli.report(tool_run("--raw-output", "python", "bench/check.py"),
                result("FAILED", error=error))
    err = capsys.readouterr().err
    assert "\x1b" not in err and "bad\\x1b[2J" in err and "Traceback\\x1b]0;t\\x07" in err
    folder = ReturnedFolder({"sanitizer.log": ReturnedFile(b"\x1b[2Jfound\n")})
    _cli.report(tool_run("compute-sanitizer", "bench/check.py"),
                result(results={"tool": {"exit_code": 0}, "output": folder}))
    assert capsys.readouterr().out == "out\n\\x1b[2Jfound\n"


# -- benchmark() under a tool -----------------------------------------------------------------

# The keys of the native report (bindings/native/native_module.cpp) and "timed".
REPORT_KEYS = {
    "latency_ms_median", "latency_ms_mean", "latency_ms_min", "latency_ms_max",
    "latency_ms_p10", "latency_ms_p90", "warmup", "repeat", "flush_l2", "activities_stable",
    "activities_per_call", "activities", "calls_with_other_activities", "calls_told_apart_by", "sm_clock_mhz_min",
    "sm_clock_mhz_max", "timed",
}  # fmt: skip


def test_benchmark_under_a_tool_calls_once_untimed_with_the_usual_keys(monkeypatch):
    monkeypatch.setenv("KCORAL_UNDER_TOOL", "ncu")
    untouchable = types.SimpleNamespace(benchmark=lambda *a: pytest.fail("CUPTI timing ran"))
    monkeypatch.setattr(kcoral, "_native", untouchable, raising=False)
    monkeypatch.setitem(sys.modules, "kcoral._native", untouchable)
    calls = []
    report = kcoral_builtins.benchmark(lambda *a: calls.append(a), 1, 2, {"repeat": 50})
    assert calls == [(1, 2)]
    assert set(report) == REPORT_KEYS | {"under_tool"}
    assert report["timed"] is False and report["under_tool"] == "ncu"
    assert report["latency_ms_median"] is None and report["repeat"] == 1


def test_benchmark_under_a_tool_still_checks_its_arguments(monkeypatch):
    monkeypatch.setenv("KCORAL_UNDER_TOOL", "compute-sanitizer")
    with pytest.raises(ValueError, match="repeats"):
        kcoral_builtins.benchmark(lambda: None, {"repeats": 3})
    with pytest.raises(TypeError):
        kcoral_builtins.benchmark(3)
