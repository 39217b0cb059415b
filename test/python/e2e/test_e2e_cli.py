"""The kcoral command against real servers: ``python -m kcoral``, as a user runs it.

``kcoral run python`` with arguments and a helper module, exit codes and both streams,
a script that raises, ``run shell``, a run past its time, ``--token``, the errors of a
missing URL, an unreachable server and a CPU server asked for a GPU tool, the ncu program
on a server without ncu, benchmark() stepping aside in a worker, ``--help`` everywhere and
``kcoral server`` in place of kcoral-server. The README section's first example runs as
written (its server started through ``kcoral server``); the GPU example is refused here
and runs in test/python/gpu/test_gpu_cli.py.
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

from e2e import harness
from kcoral import _cli

README = Path(__file__).resolve().parents[3] / "README.md"
CLI_TIMEOUT_S = 120

# The README's examples run from examples/, whose bench/ holds check.py and its helper.py.
EXAMPLES_BENCH = Path(__file__).resolve().parents[3] / "examples" / "bench"


def kcoral(*argv: str, cwd: Path, url: str | None = None, timeout: float = CLI_TIMEOUT_S,
           **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m kcoral ARGV`` in ``cwd``, with KCORAL_URL=url and no other KCORAL_*."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KCORAL_")}
    if url is not None:
        environment["KCORAL_URL"] = url
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "kcoral", *argv], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    """A current directory with a copy of examples/bench (check.py, which imports helper.py)."""
    shutil.copytree(EXAMPLES_BENCH, tmp_path / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


# -- the README -------------------------------------------------------------------------------


def section_blocks() -> list[str]:
    text = README.read_text()
    start = text.index("### The kcoral command")
    return re.findall(r"```sh\n(.*?)```", text[start:text.index("\n### ", start)], re.S)


def test_the_readme_example_runs_as_written(bench, tmp_path_factory, monkeypatch):
    start, export, *runs = section_blocks()[0].strip().splitlines()
    # The server line, through `kcoral server`: the harness starts it on port 0 in place of
    # 8000 and checks what it leaves behind.
    flags = shlex.split(start.partition("#")[0].rstrip(" &"))
    assert flags[:2] == ["kcoral", "server"] and flags[-2:] == ["--port", "8000"]
    directory = tmp_path_factory.mktemp("readme-server")  # not in the uploaded directory
    wrapper = directory / "kcoral-server-through-kcoral"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m kcoral server "$@"\n')
    wrapper.chmod(0o700)
    monkeypatch.setattr(harness, "server_binary", lambda: str(wrapper))
    server = harness.Server(directory, flags[2:-2])
    try:
        assert export == "export KCORAL_URL=http://localhost:8000"
        script = "\n".join([f'kcoral() {{ {shlex.quote(sys.executable)} -m kcoral "$@"; }}',
                            f"export KCORAL_URL={server.url}", *runs])
        out = subprocess.run(["bash", "-ec", script], cwd=bench, capture_output=True, text=True,
                             timeout=CLI_TIMEOUT_S)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[:3] == ["size 1024: total 523776 []", "check.py", "helper.py"]
        assert lines[3].startswith("Python 3")
        assert out.stderr == "checked\n"
        assert server.process.poll() is None
    finally:
        assert server.stop() == 0


def test_the_readme_gpu_example_is_refused_by_a_cpu_server(server, bench):
    for line in section_blocks()[1].strip().splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[:2] == ["kcoral", "run"]
        out = kcoral(*argv[1:], cwd=bench, url=server.url)
        assert out.returncode == 125, out.stderr
        assert f"needs a GPU server; {server.url} has no GPU" in out.stderr
    assert not (bench / "check.ncu-rep").exists()


def test_gpus_asked_of_a_cpu_server_are_refused_with_its_reason(server, bench):
    out = kcoral("run", "--gpu-count", "2", "python", "bench/check.py", cwd=bench, url=server.url)
    assert out.returncode == 125, out.stderr
    assert "'gpu_count' is 2, but this is a CPU server: it has no GPU" in out.stderr


# -- python and shell -------------------------------------------------------------------------


def test_a_script_runs_with_its_arguments_helper_and_exit_code(server, bench):
    out = kcoral("run", "python", "bench/check.py", "--size", "4", "a", "three", cwd=bench,
                 url=server.url)
    assert out.returncode == 3
    assert out.stdout == "size 4: total 6 ['a', 'three']\n"
    assert out.stderr == "checked\n"
    out = kcoral("run", "--url", server.url, "python", "--cpu-only", "bench/check.py", "--",
                 "x", cwd=bench)
    assert (out.returncode, out.stdout) == (0, "size 8: total 28 ['x']\n")


def test_a_script_from_inside_its_folder_and_from_outside_the_current_directory(server, bench):
    inside = kcoral("run", "python", "check.py", "in", cwd=bench / "bench", url=server.url)
    (bench / "elsewhere").mkdir()
    outside = kcoral("run", "python", "../bench/check.py", "out", cwd=bench / "elsewhere",
                     url=server.url)
    assert (inside.returncode, inside.stdout) == (0, "size 8: total 28 ['in']\n")
    assert (outside.returncode, outside.stdout) == (0, "size 8: total 28 ['out']\n")


def test_a_script_that_raises_exits_1_with_its_traceback(server, tmp_path):
    (tmp_path / "boom.py").write_text("print('before')\nraise ValueError('boom here')\n")
    out = kcoral("run", "python", "boom.py", cwd=tmp_path, url=server.url)
    assert out.returncode == 1
    assert out.stdout == "before\n"
    assert "Traceback (most recent call last)" in out.stderr
    assert 'boom.py", line 2' in out.stderr and "ValueError: boom here" in out.stderr


def test_shell_runs_in_the_uploaded_current_directory(server, bench):
    (bench / "bench" / "run.sh").write_text('#!/bin/sh\necho "ran with $1"\n')
    (bench / "bench" / "run.sh").chmod(0o755)
    (bench / "bench" / "__pycache__").mkdir()
    out = kcoral("run", "shell", "ls bench; bench/run.sh arg; echo oops >&2; exit 7", cwd=bench,
                 url=server.url)
    assert out.returncode == 7
    assert out.stdout == "check.py\nhelper.py\nrun.sh\nran with arg\n"
    assert out.stderr == "oops\n"
    out = kcoral("run", "shell", "--cpu-only", "--no-upload", "--", "ls", "-A", cwd=bench,
                 url=server.url)
    assert (out.returncode, out.stdout) == (0, "")


def test_a_run_past_its_time_is_stopped_and_its_output_kept(server, tmp_path):
    out = kcoral("run", "--timeout-seconds", "3", "shell", "--no-upload",
                 "echo started; sleep 60", cwd=tmp_path, url=server.url)
    assert out.returncode == 124
    assert out.stdout == "started\n"
    assert "ran past" in out.stderr


def test_benchmark_steps_aside_in_a_worker_under_a_tool(server, tmp_path):
    (tmp_path / "bench.py").write_text(
        "import os\nos.environ['KCORAL_UNDER_TOOL'] = 'ncu'\n"
        "from kcoral.builtins import benchmark\n"
        "calls = []\nreport = benchmark(calls.append, 5, {'repeat': 20})\n"
        "print(calls, report['timed'], report['under_tool'], report['latency_ms_median'])\n")
    out = kcoral("run", "python", "bench.py", cwd=tmp_path, url=server.url)
    assert (out.returncode, out.stdout) == (0, "[5] False ncu None\n"), out.stderr


# -- servers that cannot run it ---------------------------------------------------------------


def test_a_token_is_taken_from_the_flag_or_the_environment(start_server, tmp_path):
    (tmp_path / "tokens").write_text("sesame\n")
    (tmp_path / "tokens").chmod(0o600)
    guarded = start_server("--num-workers", "1", "--token-file", str(tmp_path / "tokens"))
    command = ("run", "shell", "--no-upload", "echo in")
    assert kcoral(*command[:1], "--token", "sesame", *command[1:], cwd=tmp_path,
                  url=guarded.url).stdout == "in\n"
    assert kcoral(*command, cwd=tmp_path, url=guarded.url, KCORAL_TOKEN="sesame").stdout == "in\n"
    refused = kcoral(*command, cwd=tmp_path, url=guarded.url, KCORAL_TOKEN="guess")
    assert refused.returncode == 125 and "401" in refused.stderr


def test_no_url_and_an_unreachable_server(tmp_path):
    missing = kcoral("run", "shell", "true", cwd=tmp_path)
    assert missing.returncode == 2
    assert "no server: pass --url or set KCORAL_URL" in missing.stderr
    gone = kcoral("run", "shell", "--no-upload", "true", cwd=tmp_path, url="http://127.0.0.1:9")
    assert gone.returncode == 125 and "cannot run on http://127.0.0.1:9" in gone.stderr


def test_the_ncu_program_on_a_server_without_ncu_says_it_is_missing(server, bench, monkeypatch,
                                                                    capsys):
    # What the CLI would send after its GPU check: here the runner finds no ncu.
    monkeypatch.chdir(bench)
    run = _cli.ToolRun.from_args(_cli.parse(["run", "--url", server.url, "ncu", "bench/check.py"]))
    result = server.execute(run.program(), timeout_seconds=60)
    assert result.completed, result.error
    assert result.results["tool"] == {"exit_code": 127, "signal": None, "timed_out": False}
    assert "kcoral: ncu: not found on the server" in result.stderr
    assert _cli.report(run, result) == 127
    assert "ncu wrote no report.ncu-rep" in capsys.readouterr().err


# -- help and the server ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["run"], ["run", "python"], ["run", "ncu"],
                                     ["run", "compute-sanitizer"], ["run", "shell"]])
def test_every_command_has_help(command, tmp_path):
    out = kcoral(*command, "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: kcoral {' '.join(command)}".rstrip())
    if command[:1] == ["run"]:
        assert "nothing streams while the tool runs" in out.stdout
        assert "--url" in out.stdout


def test_kcoral_server_is_kcoral_server(tmp_path):
    out = kcoral("server", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "kcoral-server: runs uploaded KCoral programs" in out.stdout
    assert "--token-file" in out.stdout
    wrong = kcoral("server", "--no-such-flag", cwd=tmp_path)
    assert wrong.returncode != 0 and "--no-such-flag" in wrong.stderr + wrong.stdout
