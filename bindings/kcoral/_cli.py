"""The ``kcoral`` command: start a server, or run a tool on one with a local file or folder.

``kcoral server ...`` replaces itself with the ``kcoral-server`` installed beside this
Python, flags unchanged. ``kcoral run TOOL ...`` turns one command line into one program:
the local files go up as file uploads under ``job/`` (the remote working directory, which
stands for the local current directory), a small runner module (:data:`RUNNER_SOURCE`)
starts the tool there as a subprocess and returns its exit status, and a tool's report or
log comes back as a returned folder. The server captures the tool's stdout and stderr at
the descriptor level, so they arrive with the answer; the protocol answers each request
once, so nothing streams while the tool runs.

Exit codes: the tool's own (128+N when signal N ended it); 1 when the program failed on the
server; 2 for a usage error; 124 when the run passed its time limit; 125 when the server
could not run it (unreachable, refused, or a CPU server asked for a GPU tool) or answered
without a valid exit status (0-255); 127 when the tool is missing on the server.

What comes back is printed as text the server wrote: terminal controls in the tool's
output, and in anything else of the server's that kcoral prints, are shown as escapes
(see ``_terminal.py``) unless ``--raw-output`` asks for the tool's output as it is.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import os
import shlex
import shutil
import stat
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from kcoral._client import Client
from kcoral._errors import ExecutionTimeout, KCoralError
from kcoral._files import ReturnedFile, ReturnedFolder
from kcoral._program import Program
from kcoral._result import ProgramResult
from kcoral._terminal import printable
from kcoral._under_tool import UNDER_TOOL_VARIABLE

# The remote working directory of the tool, and the folder the runner makes for what a
# tool writes for us (a report, a log); the two never overlap, so no upload can collide
# with the tool's output.
JOB_DIR = "job"
OUTPUT_DIR = "kcoral-out"
NCU_REPORT = "report.ncu-rep"
SANITIZER_LOG = "sanitizer.log"

DEFAULT_TIMEOUT_SECONDS = 300.0  # the server's own default
# Asked for per stream; the server clamps it to its --max-output-limit-bytes (16 MiB).
DEFAULT_OUTPUT_LIMIT_BYTES = 16 << 20
# What one run may upload: the server's default request limit, and a file count that
# stops an accidental upload of a home directory early.
MAX_UPLOAD_BYTES = 256 << 20
MAX_UPLOAD_FILES = 10_000
DEFAULT_EXCLUDES = (
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", "node_modules",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints",
)  # fmt: skip
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

EXIT_PROGRAM_FAILED = 1  # usage errors are argparse's 2
EXIT_TIMEOUT = 124
EXIT_SERVER = 125
EXIT_NOT_FOUND = 127

# Uploaded as a module with every run. ``argv`` holds strings and two placeholders:
# {"python": true} (the worker's interpreter) and {"output": name} (a path in OUTPUT_DIR).
# The tool gets its own session, so that a timeout, or the end of the tool, can stop
# everything it started: nothing may keep using the GPU once the lease is given back.
RUNNER_SOURCE = '''\
"""Runs one tool for the kcoral command, as a subprocess in the uploaded folder."""

import os
import shutil
import signal
import subprocess
import sys


def run_tool(spec):
    root = os.getcwd()
    cwd = os.path.join(root, spec["cwd"])
    os.makedirs(cwd, exist_ok=True)
    output = os.path.join(root, spec["output_dir"])
    if spec["uses_output"]:
        os.makedirs(output, exist_ok=True)
    for path in spec["executables"]:
        os.chmod(os.path.join(cwd, path), 0o700)
    argv = [_resolve(part, output) for part in spec["argv"]]
    program = shutil.which(argv[0])
    if program is None:
        _note(f"{argv[0]}: not found on the server (PATH={os.environ.get('PATH', '')})")
        return {"exit_code": 127, "signal": None, "timed_out": False}
    env = dict(os.environ)
    env.update(spec["env"])
    sys.stdout.flush()
    sys.stderr.flush()
    process = subprocess.Popen([program, *argv[1:]], cwd=cwd, env=env,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out = False
    try:
        process.wait(timeout=spec["timeout_seconds"])
    except subprocess.TimeoutExpired:
        timed_out = True
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=spec["grace_seconds"])
        except subprocess.TimeoutExpired:
            pass
    finally:
        _signal_group(process.pid, signal.SIGKILL)  # the tool's leftovers too
        process.wait()
    code = process.returncode
    name = signal.Signals(-code).name if code < 0 else None
    if timed_out:
        _note(f"{argv[0]} ran past {spec['timeout_seconds']:g} s and was stopped")
        return {"exit_code": 124, "signal": name, "timed_out": True}
    if name is not None:
        _note(f"{argv[0]} was ended by {name}")
        code = 128 - code
    return {"exit_code": code, "signal": name, "timed_out": False}


def _resolve(part, output):
    if isinstance(part, str):
        return part
    if "python" in part:
        return sys.executable or "python3"
    return os.path.join(output, part["output"])


def _signal_group(pid, signum):
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _note(text):
    os.write(2, f"kcoral: {text}\\n".encode())
'''


class UsageError(Exception):
    """A command line that cannot run; reported like argparse's own errors (exit 2)."""


@dataclass
class ToolRun:
    """One ``kcoral run`` as a program: what goes up, what runs, and what comes back.

    Usage: ``ToolRun.from_args(args).program()``. ``argv`` is the runner's command line
    (strings and placeholders, see :data:`RUNNER_SOURCE`); ``uploads`` are (path under
    ``job/``, contents, executable) triples; ``output_file`` names the file of OUTPUT_DIR
    that ``save_to`` receives (ncu's report, compute-sanitizer's log).
    """

    tool: str
    argv: list[Any]
    uploads: list[tuple[str, bytes, bool]]
    env: dict[str, str] = field(default_factory=dict)
    cpu_only: bool = False
    needs_gpu: bool = False
    output_file: str | None = None
    save_to: Path | None = None
    overwrite: bool = False
    print_output_file: bool = False
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT_BYTES
    gpu_count: int | None = None
    raw_output: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ToolRun:
        """The run a parsed ``kcoral run`` command line asks for; UsageError if none."""
        limits: dict[str, Any] = {
            "timeout_seconds": args.timeout_seconds,
            "output_limit_bytes": args.output_limit_bytes,
            "gpu_count": args.gpu_count,
            "raw_output": args.raw_output,
        }
        excludes = (*DEFAULT_EXCLUDES, *args.exclude)
        if args.tool == "shell":
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not command:
                raise UsageError("shell needs a command line: kcoral run shell 'make && ./bench'")
            uploads = collect_uploads([] if args.no_upload else (args.upload or ["."]), excludes)
            argv: list[Any] = ["bash", "-c", " ".join(command)]
            return cls("shell", argv, uploads, cpu_only=args.cpu_only, **limits)
        script, uploads = script_uploads(args.script, args.upload, args.no_upload, excludes)
        python: list[Any] = [{"python": True}, script, *args.args]
        env = {"PYTHONUNBUFFERED": "1"}  # what it printed before a timeout or crash is kept
        if args.tool == "python":
            return cls("python", python, uploads, env, cpu_only=args.cpu_only, **limits)
        # benchmark() steps aside (one untimed call) under the tool this variable names.
        env[UNDER_TOOL_VARIABLE] = args.tool
        if args.tool == "ncu":
            options = tool_options(args.ncu_options, ("-o", "--export", "-f", "--force-overwrite"))
            argv = ["ncu", "--export", {"output": NCU_REPORT}, *options, *python]
            save_to: Path | None = report_destination(args.output, Path(args.script).stem)
            output_file = NCU_REPORT
        else:
            options = tool_options(args.sanitizer_options, ("--tool", "--log-file"))
            argv = ["compute-sanitizer", "--tool", args.sanitizer_tool,
                    "--log-file", {"output": SANITIZER_LOG}, *options, *python]
            save_to = Path(args.output) if args.output else None
            output_file = SANITIZER_LOG
        if save_to is not None and save_to.exists() and not args.force:
            raise UsageError(f"{save_to} exists; pass -f to overwrite it")
        return cls(args.tool, argv, uploads, env, needs_gpu=True, output_file=output_file,
                   save_to=save_to, overwrite=args.force,
                   print_output_file=args.tool == "compute-sanitizer", **limits)

    def shown(self, text: str) -> str:
        """The tool's output as printed: its terminal controls escaped, unless raw_output."""
        return text if self.raw_output else printable(text)

    def spec(self) -> dict[str, Any]:
        """The runner's argument: what to run, where, with what, for how long."""
        # The tool stops a little before the program's deadline, so that what it printed
        # still comes back rather than a bare timeout.
        margin = min(10.0, self.timeout_seconds * 0.2)
        return {
            "argv": self.argv,
            "cwd": JOB_DIR,
            "output_dir": OUTPUT_DIR,
            "uses_output": self.output_file is not None,
            "executables": [path for path, _, executable in self.uploads if executable],
            "env": self.env,
            "timeout_seconds": self.timeout_seconds - margin,
            "grace_seconds": margin / 2,
        }

    def program(self) -> Program:
        """The program that uploads the files, runs the tool and returns what it made."""
        program = Program()
        for path, data, _ in self.uploads:
            program.upload_file(blob=data, path=f"{JOB_DIR}/{path}")
        runner = program.upload(id="kcoral:runner", kind="module", source=RUNNER_SOURCE)
        run_tool = program.get_function(
            id="kcoral:run_tool", module=runner, name="run_tool", cpu_only=self.cpu_only
        )
        status = program.run(id="kcoral:tool", fn=run_tool, args=[self.spec()])
        program.return_(key="tool", value=status)
        if self.output_file is not None:
            program.return_folder(key="output", path=OUTPUT_DIR)
        return program


def script_uploads(
    script: str, chosen: list[str] | None, no_upload: bool, excludes: Sequence[str]
) -> tuple[str, list[tuple[str, bytes, bool]]]:
    """(the script as the remote command line names it, the uploads) of a script tool.

    The script's folder goes up unless ``--upload`` or ``--no-upload`` says otherwise, and
    the script itself always does. A script outside the current directory runs from its
    own folder, which then becomes the remote working directory.
    """
    local = Path(script)
    if not local.is_file():
        raise UsageError(f"{script}: no such file")
    relative = relative_inside(local, Path.cwd())
    if relative is None:
        if chosen or no_upload:
            raise UsageError(
                f"{script} is outside the current directory; --upload and --no-upload need "
                "it inside (kcoral mirrors the current directory on the server)"
            )
        relative, uploads = local.name, collect_uploads([str(local.parent)], excludes, local.parent)
    else:
        folders = [] if no_upload else (chosen or [str(local.parent)])
        uploads = collect_uploads(folders, excludes)
    if relative not in {path for path, _, _ in uploads}:  # excluded, or not chosen
        uploads.append((relative, local.read_bytes(), os.access(local, os.X_OK)))
        uploads.sort()
    return relative, uploads


def relative_inside(path: str | Path, root: Path) -> str | None:
    """``path`` relative to ``root``, ``/``-separated (``.`` for root); None when outside it."""
    relative = os.path.relpath(os.path.abspath(path), root)
    if relative == ".." or relative.startswith(".." + os.sep) or os.path.isabs(relative):
        return None
    return Path(relative).as_posix()


def collect_uploads(
    paths: Sequence[str], excludes: Sequence[str], base: Path | None = None
) -> list[tuple[str, bytes, bool]]:
    """(path relative to ``base``, contents, executable) of the files under ``paths``.

    ``base`` is the current directory unless given. Folders are walked without following
    links to folders; a link to a file goes up as that file's contents. Names matching an
    exclude pattern are skipped in folders (a path named explicitly is always taken), and
    so is what is not a regular file, with a note. UsageError past MAX_UPLOAD_FILES or
    MAX_UPLOAD_BYTES.
    """
    root = Path(base) if base is not None else Path.cwd()
    found: dict[str, tuple[bytes, bool]] = {}
    total = 0

    def take(local: str, remote: str) -> None:
        nonlocal total
        try:
            info = os.stat(local)
        except OSError as error:
            note(f"not uploaded: {local} ({error.strerror})")
            return
        if not stat.S_ISREG(info.st_mode):
            note(f"not uploaded: {local} (not a regular file)")
            return
        total += info.st_size
        if len(found) >= MAX_UPLOAD_FILES or total > MAX_UPLOAD_BYTES:
            raise UsageError(
                f"the upload is over {MAX_UPLOAD_FILES} files or {MAX_UPLOAD_BYTES >> 20} MiB; "
                "choose what goes up with --upload, --exclude or --no-upload"
            )
        with open(local, "rb") as stream:
            found[remote] = (stream.read(), bool(info.st_mode & stat.S_IXUSR))

    for path in paths:
        relative = relative_inside(path, root)
        if relative is None:
            raise UsageError(
                f"--upload {path}: outside the current directory, which the remote working "
                "directory stands for"
            )
        prefix = "" if relative == "." else relative + "/"
        if not os.path.isdir(path) or os.path.islink(path):
            if not os.path.lexists(path):
                raise UsageError(f"--upload {path}: no such file or folder")
            take(path, prefix.rstrip("/"))
            continue
        for folder, directories, files in os.walk(path, onerror=_unreadable):
            inner = os.path.relpath(folder, path)
            inner = "" if inner == "." else Path(inner).as_posix() + "/"
            for name in list(directories):
                if excluded(name, excludes):
                    directories.remove(name)
                elif os.path.islink(os.path.join(folder, name)):
                    note(f"not uploaded: {os.path.join(folder, name)} (a link to a folder)")
            for name in sorted(files):
                if not excluded(name, excludes):
                    take(os.path.join(folder, name), f"{prefix}{inner}{name}")
    return [(remote, data, executable) for remote, (data, executable) in sorted(found.items())]


def _unreadable(error: OSError) -> None:
    note(f"not uploaded: {error.filename} ({error.strerror})")


def excluded(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def tool_options(text: str, reserved: Sequence[str]) -> list[str]:
    """A tool's own options from one quoted string; UsageError for those kcoral sets."""
    options = shlex.split(text)
    for option in options:
        if option.split("=", 1)[0] in reserved:
            raise UsageError(f"kcoral sets {option.split('=', 1)[0]} itself; see --help")
    return options


def report_destination(output: str | None, stem: str) -> Path:
    """Where ncu's report lands here; like ncu, a name without the suffix gets it."""
    path = Path(output) if output else Path(f"{stem}.ncu-rep")
    return path if path.name.endswith(".ncu-rep") else path.with_name(path.name + ".ncu-rep")


def write(stream: Any, text: str) -> None:
    """Print the tool's output as UTF-8 whatever the local locale, which may not hold it."""
    stream.flush()
    raw = getattr(stream, "buffer", None)
    if raw is None:  # a stream without bytes underneath (captured, say)
        stream.write(text)
    else:
        raw.write(text.encode("utf-8", "replace"))
        raw.flush()
    stream.flush()


def note(text: str) -> None:
    """Say something on stderr; what it quotes of the server's is shown, never obeyed."""
    print(f"kcoral: {printable(text)}", file=sys.stderr, flush=True)


# -- running ------------------------------------------------------------------------------


def execute(run: ToolRun, program: Program, url: str, token: str | None) -> int:
    """Run ``program`` (``run``'s) on the server at ``url``, print what came back; the exit code."""
    try:
        with Client(url, token=token) as client:
            if run.needs_gpu:
                gpus = client.health().get("gpu_count", 0)
                if not gpus:
                    note(f"{run.tool} needs a GPU server; {url} has no GPU "
                         f"(gpu_count {gpus!r:.40})")
                    return EXIT_SERVER
            result = client.execute(
                program,
                timeout_seconds=run.timeout_seconds,
                output_limit_bytes=run.output_limit_bytes,
                gpu_count=run.gpu_count,
            )
    except ExecutionTimeout as error:
        note(f"the server stopped the run at its time limit (--timeout-seconds): {error}")
        return EXIT_TIMEOUT
    except KCoralError as error:
        note(f"cannot run on {url}: {error}")
        return EXIT_SERVER
    return report(run, result)


def report(run: ToolRun, result: ProgramResult) -> int:
    """Print the tool's output and what it made, save its report; the exit code."""
    write(sys.stdout, run.shown(result.stdout))
    write(sys.stderr, run.shown(result.stderr))
    for stream in ("stdout", "stderr"):
        if getattr(result, f"{stream}_truncated"):
            note(f"the server cut {stream} at its output limit (--output-limit-bytes)")
    if not result.completed:
        error = result.error or {}
        note(f"the run failed on the server: {error.get('kind')}: {error.get('message')}")
        if error.get("traceback"):
            print(printable(error["traceback"].rstrip()), file=sys.stderr)
        return EXIT_PROGRAM_FAILED
    # A completed program's answer comes from the server, not from this process: one
    # without the runner's status (a server that is not KCoral's, say) is said, not a crash.
    code: Any = None
    folder: Any = None
    try:
        code = result.results["tool"]["exit_code"]
        folder = result.results["output"] if run.output_file is not None else None
    except (KeyError, TypeError):
        pass
    if type(code) is not int or not (folder is None or isinstance(folder, ReturnedFolder)):
        note(f"the server's answer holds no exit status of {run.tool}: {result.results!r:.200}")
        return EXIT_SERVER
    # An exit status is 0-255; passed on, 256 would read as success and -1 as 255.
    if not 0 <= code <= 255:
        note(f"the server's answer gives {run.tool} the exit status {code!s:.40}, outside 0-255")
        return EXIT_SERVER
    if folder is not None:
        bring_back(run, folder)
    return code


def bring_back(run: ToolRun, folder: ReturnedFolder) -> None:
    made: ReturnedFile | None = folder.files.get(run.output_file or "")
    if made is None:
        note(f"{run.tool} wrote no {run.output_file}")
        return
    if run.print_output_file:
        write(sys.stdout, run.shown(made.read_bytes().decode("utf-8", "replace")))
    if run.save_to is not None:
        try:
            made.save(run.save_to, overwrite=run.overwrite)
        except (OSError, ValueError) as error:
            note(f"could not save {run.output_file} to {run.save_to}: {error}")
            return
        note(f"{run.tool} {'report' if run.tool == 'ncu' else 'log'} saved to {run.save_to}")


def exec_server(args: Sequence[str]) -> NoReturn:
    """Replace this process with kcoral-server, given ``args`` unchanged."""
    beside = Path(sys.executable).with_name("kcoral-server")
    binary = str(beside) if beside.is_file() else shutil.which("kcoral-server")
    if binary is None:
        note(f"kcoral-server is neither beside {sys.executable} nor on PATH; it comes with "
             "the server side of kcoral: pip install 'kcoral[server]' (from a checkout: "
             "pip install ./server)")
        raise SystemExit(EXIT_NOT_FOUND)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, [binary, *args])


# -- the command line ---------------------------------------------------------------------

RUN_EPILOG = f"""\
The remote working directory stands for the current directory here: uploads keep their
paths relative to it, and the command line runs there unchanged, so relative paths in
arguments mean what they mean here. By default python, ncu and compute-sanitizer upload
the script's folder (a script outside the current directory runs from its own folder), and
shell the current directory; folders named {', '.join(DEFAULT_EXCLUDES[:4])} and the like
are left out.

Output: the server answers a program once, so the tool's stdout and stderr arrive, in
full up to the output limit, when it ends, and are printed to kcoral's stdout and stderr;
nothing streams while the tool runs. Terminal control characters in them (escape
sequences, other controls but newline and tab, bidirectional overrides) are printed as
escapes such as \\x1b, so that output can neither drive nor fool the terminal;
--raw-output prints them as they came.

Exit codes: the tool's own (128+N when signal N ended it); 1 the program failed on the
server (its error is printed); 2 usage; 124 the run passed --timeout-seconds; 125 the
server could not run it (unreachable, refused, a CPU server for a GPU tool) or gave no
exit status in 0-255; 127 the tool is not on the server's PATH.
"""


def _common_options() -> argparse.ArgumentParser:
    # Accepted before and after TOOL; SUPPRESS keeps a tool parser from overwriting a
    # value given before it with its default.
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("server and upload options (before or after TOOL)")
    group.add_argument("--url", default=argparse.SUPPRESS,
                       help="the server, e.g. http://localhost:8000 (default: $KCORAL_URL)")
    group.add_argument("--token", default=argparse.SUPPRESS,
                       help="bearer token for a server with --token-file (default: $KCORAL_TOKEN)")
    group.add_argument("--timeout-seconds", type=float, default=argparse.SUPPRESS, metavar="N",
                       help=f"time limit of the run (default {DEFAULT_TIMEOUT_SECONDS:g}; the "
                       "server clamps it); the tool is stopped a little before it, so its output "
                       "still comes back")
    group.add_argument("--output-limit-bytes", type=int, default=argparse.SUPPRESS, metavar="N",
                       help="stdout and stderr kept, per stream (default "
                       f"{DEFAULT_OUTPUT_LIMIT_BYTES}; the server clamps it)")
    group.add_argument("--gpu-count", type=int, default=argparse.SUPPRESS, metavar="N",
                       help="GPUs the run holds at once, seen as devices 0 to N-1 (1-8, at most "
                       "the server's GPUs; default: the server's, one on a GPU server)")
    group.add_argument("--upload", action="append", metavar="PATH", default=argparse.SUPPRESS,
                       help="a file or folder inside the current directory to upload instead of "
                       "the default (repeatable)")
    group.add_argument("--exclude", action="append", metavar="PATTERN", default=argparse.SUPPRESS,
                       help="leave out files and folders whose name matches this glob (repeatable)")
    group.add_argument("--no-upload", action="store_true", default=argparse.SUPPRESS,
                       help="upload nothing but the script itself")
    group.add_argument("--raw-output", action="store_true", default=argparse.SUPPRESS,
                       help="print the tool's output with its terminal control sequences (colors, "
                       "cursor moves) as they came, instead of as escapes like \\x1b; only for "
                       "a server and programs you trust")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The whole command line of ``kcoral``; ``server`` is handled before it (exec)."""
    from kcoral import __version__

    parser = argparse.ArgumentParser(
        prog="kcoral",
        description="Start a KCoral server, or run a tool on one with a local file or folder.",
    )
    parser.add_argument("--version", action="version", version=f"kcoral {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "server", add_help=False,
        help="start kcoral-server with the same flags (kcoral server --help lists them)",
    )
    common = _common_options()
    run = commands.add_parser(
        "run", parents=[common], help="upload a file or folder and run a tool on a server",
        description="Upload a local file or folder and run a tool on a KCoral server.",
        epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tools = run.add_subparsers(dest="tool", required=True, metavar="TOOL")

    def tool(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        parser = tools.add_parser(name, parents=[common], help=summary, epilog=RUN_EPILOG,
                                  description=textwrap.fill(description, 88),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.set_defaults(tool_parser=parser)  # for errors found after parsing
        return parser

    def script_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("script", metavar="SCRIPT", help="the Python script to run")
        parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                            help="the script's arguments, passed unchanged")

    python = tool("python", "run a Python script with arguments",
                  "Run SCRIPT with the server's Python, in the uploaded folder, under the GPU "
                  "lease on a GPU server.")
    python.add_argument("--cpu-only", action="store_true",
                        help="run without the GPU lease; a promise, since CUDA use in a "
                        "subprocess is not watched")
    script_arguments(python)

    ncu = tool("ncu", "profile a Python script with Nsight Compute; the report comes back",
               "Run SCRIPT under Nsight Compute (ncu) on a GPU server, holding the GPU lease, "
               "and save its report here. kcoral.builtins.benchmark() steps aside under ncu: "
               "it calls the function once, untimed, and leaves CUPTI to ncu.")
    ncu.add_argument("-o", "--output", metavar="PATH",
                     help="where to save the report (default: SCRIPT's name with .ncu-rep, in the "
                     "current directory)")
    ncu.add_argument("-f", "--force", action="store_true", help="overwrite an existing report")
    ncu.add_argument("--ncu-options", default="", metavar="'OPTIONS'",
                     help="ncu's own options in one quoted string, e.g. '--set full -k regex:add'")
    script_arguments(ncu)

    sanitizer = tool("compute-sanitizer", "check a Python script with Compute Sanitizer",
                     "Run SCRIPT under compute-sanitizer on a GPU server, holding the GPU lease; "
                     "its findings (the tool's log) are printed after the script's output. The "
                     "exit code is compute-sanitizer's: the script's unless --error-exitcode "
                     "is among --sanitizer-options.")
    sanitizer.add_argument("--tool", dest="sanitizer_tool", choices=SANITIZER_TOOLS,
                           default="memcheck", help="the check (default memcheck)")
    sanitizer.add_argument("-o", "--output", metavar="PATH", help="also save the log here")
    sanitizer.add_argument("-f", "--force", action="store_true", help="overwrite an existing log")
    sanitizer.add_argument("--sanitizer-options", default="", metavar="'OPTIONS'",
                           help="compute-sanitizer's own options in one quoted string, e.g. "
                           "'--error-exitcode 99'")
    script_arguments(sanitizer)

    shell = tool("shell", "run a command line with bash in the uploaded folder",
                 "Run COMMAND with bash -c in the uploaded folder (the current directory by "
                 "default); several words are joined with spaces, as ssh does. It holds the "
                 "GPU lease on a GPU server unless --cpu-only.")
    shell.add_argument("--cpu-only", action="store_true",
                       help="run without the GPU lease (for builds and other host work)")
    shell.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                       help="the command line")
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse a ``kcoral run`` command line (without ``server``) and fill in the defaults."""
    parser = build_parser()
    args = parser.parse_args(argv)
    defaults: dict[str, Any] = {
        "url": os.environ.get("KCORAL_URL") or None,
        "token": None,  # Client reads KCORAL_TOKEN itself
        "timeout_seconds": DEFAULT_TIMEOUT_SECONDS,
        "output_limit_bytes": DEFAULT_OUTPUT_LIMIT_BYTES,
        "gpu_count": None,
        "upload": None,
        "exclude": [],
        "no_upload": False,
        "raw_output": False,
    }
    for name, value in defaults.items():
        if not hasattr(args, name):
            setattr(args, name, value)
    if args.tool != "shell":
        args.args = _restore_separator(argv, args.script, args.args)
    if not args.url:
        args.tool_parser.error("no server: pass --url or set KCORAL_URL")
    if not (math.isfinite(args.timeout_seconds) and args.timeout_seconds > 0):
        args.tool_parser.error("--timeout-seconds must be a positive number")
    if args.output_limit_bytes < 0:
        args.tool_parser.error("--output-limit-bytes must be >= 0")
    if args.gpu_count is not None and not 1 <= args.gpu_count <= 8:
        args.tool_parser.error("--gpu-count must be between 1 and 8")
    return args


def _restore_separator(argv: Sequence[str], script: str, args: list[str]) -> list[str]:
    # argparse drops a "--" right after the script, which belongs to the script's own
    # command line (python s.py -- -v passes it on).
    tail = len(argv) - len(args)
    if tail >= 2 and argv[tail - 1] == "--" and argv[tail - 2] == script:
        return ["--", *args]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """The ``kcoral`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["server"]:
        exec_server(argv[1:])
    args = parse(argv)
    try:
        run = ToolRun.from_args(args)
        program = run.program()
    except (UsageError, ValueError) as error:  # ValueError: a path the protocol refuses
        args.tool_parser.error(str(error))
    return execute(run, program, args.url, args.token)
