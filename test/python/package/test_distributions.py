"""kcoral's two distributions, built from this checkout and installed as users install them.

- The client (the repository's pyproject.toml): a pure-Python wheel, installed into a fresh
  virtual environment by a pip that has no compiler on its PATH, runs a program end to end
  against a server and says plainly what needs the server side.
- The server side (server/pyproject.toml), installed with that client into another fresh
  environment: its own kcoral-server serves a program to its own client, and run_local runs
  one in process.

Both environments take the wheels' dependencies from the package index (pip's cache).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from e2e.harness import Server

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(900)

# What the client does in the fresh environment: a program through a server, and the
# server side's absence said plainly.
CLIENT_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import kcoral
    from kcoral import Client, Program

    program = Program()
    module = program.upload(kind="module", source="import sys\\ndef twice(x):\\n    return x * 2\\n"
                                                   "def prefix():\\n    return sys.prefix\\n")
    twice = program.get_function(module=module, name="twice")
    values = program.upload(kind="tensor", value=np.arange(4, dtype=np.float32))
    program.return_(key="out", value=program.run(fn=twice, args=[values]))
    prefix = program.get_function(module=module, name="prefix")
    program.return_(key="where", value=program.run(fn=prefix, args=[]))
    with Client(sys.argv[1]) as client:
        result = client.execute(program, timeout_seconds=60)
    print(result.status, result.results["out"].tolist())
    if sys.argv[2] == "client":
        try:
            kcoral.run_local(program)
        except kcoral.KCoralError as error:
            print("run_local:", error)
        try:
            import kcoral.builtins
        except ImportError:
            print("no kcoral.builtins")
    else:
        print("run_local", kcoral.run_local(program).results["out"].tolist())
        print("workers' environment", result.results["where"])
""")


def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


def fresh_environment(where: Path) -> Path:
    """A new virtual environment of this Python's base interpreter; returns its bin/."""
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", str(where)])
    return where / "bin"


def build_wheel(source: Path, out: Path, *options: str) -> Path:
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), *options, str(source)])
    [wheel] = [path for path in out.iterdir() if path.suffix == ".whl" and path.name.startswith(
        "kcoral_server" if source.name == "server" else "kcoral-")]
    return wheel


@pytest.fixture(scope="module")
def client_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("client-wheel"))


def test_the_client_wheel_is_pure_python_without_the_server_side(client_wheel: Path) -> None:
    assert client_wheel.name.endswith("-py3-none-any.whl"), client_wheel.name
    names = zipfile.ZipFile(client_wheel).namelist()
    assert "kcoral/_client.py" in names and "kcoral/_cli.py" in names
    assert not [name for name in names if name.endswith((".so", ".pyd")) or "/bin/" in name]
    assert "kcoral/builtins.py" not in names
    assert any(name.endswith(".dist-info/entry_points.txt") for name in names)  # the kcoral command


def test_the_client_installs_without_a_compiler_and_runs_a_program(
        client_wheel: Path, server: Server, tmp_path: Path) -> None:
    bin_dir = fresh_environment(tmp_path / "venv")
    # Nothing but the environment's own bin/ on PATH: no cc, no c++, no cmake.
    bare = {"PATH": str(bin_dir), "HOME": str(tmp_path), "PIP_CACHE_DIR": pip_cache()}
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(client_wheel)], env=bare)
    script = tmp_path / "client.py"
    script.write_text(CLIENT_SCRIPT)
    done = run([str(bin_dir / "python"), str(script), server.url, "client"], env=bare)
    lines = done.stdout.splitlines()
    assert lines[0] == "COMPLETED [0.0, 2.0, 4.0, 6.0]"
    assert lines[1].startswith("run_local: run_local needs the server side of kcoral")
    assert "kcoral[server]" in lines[1]
    assert lines[2] == "no kcoral.builtins"
    missing = subprocess.run([str(bin_dir / "kcoral"), "server", "--help"], capture_output=True,
                             text=True, env=bare, timeout=60)
    assert missing.returncode == 127 and "kcoral[server]" in missing.stderr


def test_the_server_wheel_serves_its_own_client_and_runs_programs_in_process(
        client_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The build directory and options scripts/setup.sh uses, so that this reuses its build.
    server_wheel = build_wheel(
        ROOT / "server", tmp_path / "server-wheel", "-C", f"build-dir={ROOT / 'build' / 'pip'}",
        "-C", "cmake.define.KCORAL_BUILD_TESTS=ON", "-C", "cmake.define.KCORAL_BUILD_EXAMPLES=ON")
    names = zipfile.ZipFile(server_wheel).namelist()
    assert "kcoral/builtins.py" in names and any(n.startswith("kcoral/_native") for n in names)
    assert "kcoral/_client.py" not in names  # the client's, not this distribution's
    bin_dir = fresh_environment(tmp_path / "venv")
    env = {**os.environ, "PIP_CACHE_DIR": pip_cache()}
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(client_wheel), str(server_wheel)],
        env=env)
    monkeypatch.setenv("KCORAL_SERVER", str(bin_dir / "kcoral-server"))
    (tmp_path / "server").mkdir()
    # No --python: the workers embed the environment the server is installed in.
    own = Server(tmp_path / "server", ["--device", "cpu", "--num-workers", "1"])
    try:
        script = tmp_path / "client.py"
        script.write_text(CLIENT_SCRIPT)
        done = run([str(bin_dir / "python"), str(script), own.url, "server"], env=env)
        assert done.stdout.splitlines() == ["COMPLETED [0.0, 2.0, 4.0, 6.0]",
                                            "run_local [0.0, 2.0, 4.0, 6.0]",
                                            f"workers' environment {tmp_path / 'venv'}"]
    finally:
        assert own.stop() == 0


def pip_cache() -> str:
    return os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
