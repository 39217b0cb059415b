"""kcoral's two distributions, built from this checkout and installed as users install them.

- The client (the repository's pyproject.toml): a pure-Python wheel, installed into a fresh
  virtual environment by a pip that has no compiler on its PATH, runs a program end to end
  against a server and says plainly what needs the server side.
- The server side (server/pyproject.toml), installed with that client into another fresh
  environment: its own kcoral-server serves a program to its own client, and run_local runs
  one in process.
- The server side's manylinux wheel (scripts/server-wheel.sh, auditwheel): it carries its own
  copies of the shared libraries beyond the manylinux baseline, names no directory outside
  itself, and serves programs from an environment of an interpreter that has libpython
  linked in statically (Debian's), whose workers run under that interpreter.

The environments take the wheels' dependencies from the package index (pip's cache).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

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
    serves_its_own_client(bin_dir, tmp_path, env, monkeypatch)


def serves_its_own_client(bin_dir: Path, tmp_path: Path, env: dict[str, str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment's own kcoral-server, started with no --python (its launcher names the
    environment's interpreter), serves a program to the environment's client, whose
    run_local runs one too; the workers' sys.prefix is the environment's."""
    monkeypatch.setenv("KCORAL_SERVER", str(bin_dir / "kcoral-server"))
    (tmp_path / "server").mkdir()
    own = Server(tmp_path / "server", ["--device", "cpu", "--num-workers", "1"])
    try:
        script = tmp_path / "client.py"
        script.write_text(CLIENT_SCRIPT)
        done = run([str(bin_dir / "python"), str(script), own.url, "server"], env=env)
        assert done.stdout.splitlines() == ["COMPLETED [0.0, 2.0, 4.0, 6.0]",
                                            "run_local [0.0, 2.0, 4.0, 6.0]",
                                            f"workers' environment {bin_dir.parent}"]
    finally:
        assert own.stop() == 0


def pip_cache() -> str:
    return os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")


# What the manylinux policies let a wheel take from the system, as far as binaries like ours
# go: glibc's libraries and GCC's C++ runtime. Anything else they need, the wheel must carry.
MANYLINUX_BASELINE = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                      "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1"}


def dynamic_entries(elf: Path) -> dict[str, list[str]]:
    """The NEEDED libraries and the RPATH and RUNPATH directories of an ELF file (readelf)."""
    entries: dict[str, list[str]] = {"NEEDED": [], "RPATH": [], "RUNPATH": []}
    for line in run(["readelf", "--dynamic", "--wide", str(elf)]).stdout.splitlines():
        for tag, values in entries.items():
            if f"({tag})" in line:
                value = line[line.index("[") + 1:line.rindex("]")]
                values.extend(value.split(":") if tag != "NEEDED" else [value])
    return entries


def elf_files(root: Path) -> list[Path]:
    def is_elf(path: Path) -> bool:
        with path.open("rb") as file:
            return file.read(4) == b"\x7fELF"

    return sorted(path for path in root.rglob("*") if path.is_file() and is_elf(path))


@pytest.fixture(scope="module")
def repaired_server_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("repaired-server-wheel")
    done = run([str(ROOT / "scripts" / "server-wheel.sh"), str(out)])
    [wheel] = out.glob("*.whl")
    assert done.stdout.splitlines() == [str(wheel)]
    return wheel


def test_the_repaired_server_wheel_is_manylinux_and_carries_what_the_system_may_lack(
        repaired_server_wheel: Path, tmp_path: Path) -> None:
    _, _, _, tags = parse_wheel_filename(repaired_server_wheel.name)
    assert {tag.interpreter for tag in tags} == {f"cp{sys.version_info.major}{sys.version_info.minor}"}
    assert all(tag.platform.startswith("manylinux_") for tag in tags), tags
    # glibc 2.34 at most (Ubuntu 22.04, RHEL 9): the mount API, which glibc wraps only from
    # 2.36, is called by its system calls.
    floors = {tuple(int(part) for part in tag.platform.split("_")[1:3]) for tag in tags}
    assert max(floors) <= (2, 34), tags
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(repaired_server_wheel).extractall(unpacked)
    elves = {path.relative_to(unpacked).as_posix(): path for path in elf_files(unpacked)}
    assert {"kcoral/bin/kcoral-server", "kcoral/bin/kcoral-init"} <= elves.keys()
    assert any(name.startswith("kcoral/_native.") for name in elves)
    # No binary among the scripts (auditwheel would have moved it away from kcoral-init): the
    # environment's kcoral-server is the launcher.
    [launcher] = unpacked.glob("*.data/scripts/kcoral-server")
    assert launcher.read_text().startswith("#!python\n")
    assert not [name for name in elves if ".data/" in name]
    # The C++ package (find_package(kcoral)) comes with it, untouched by the repair.
    assert (unpacked / "kcoral" / "lib" / "cmake" / "kcoral" / "kcoralConfig.cmake").is_file()
    grafted = {path.name.split("-")[0] for path in (unpacked / "kcoral_server.libs").iterdir()}
    assert grafted == {"libsimdjson", "libcrypto", "libseccomp"}
    for name, elf in elves.items():
        # Nothing names the build machine's directories: not the sources (__FILE__), not its
        # Python, not its CUDA toolkit's CUPTI (found at run time instead).
        data = elf.read_bytes()
        for place in (str(ROOT), sys.prefix, sys.base_prefix, "/targets/x86_64-linux/lib"):
            assert place.encode() not in data, f"{name} names {place}"
        entries = dynamic_entries(elf)
        directories = []
        for directory in entries["RPATH"] + entries["RUNPATH"]:
            # Relative to the file itself, and within the wheel: no directory of the build machine.
            assert directory.startswith("$ORIGIN"), f"{name}: {directory}"
            resolved = (elf.parent / directory.replace("$ORIGIN", ".", 1)).resolve()
            assert resolved.is_relative_to(unpacked), f"{name}: {directory}"
            directories.append(resolved)
        for needed in entries["NEEDED"]:
            assert needed in MANYLINUX_BASELINE or any((d / needed).is_file() for d in directories), \
                f"{name} needs {needed}, which the wheel does not carry"


def test_the_repaired_server_wheel_serves_programs_under_a_python_without_a_shared_libpython(
        client_wheel: Path, repaired_server_wheel: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Debian's interpreter of this Python's version (the wheel's), with libpython linked into
    # the executable: the native module takes Python's symbols from the executable itself.
    interpreter = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not interpreter.is_file():
        pytest.fail(f"{interpreter} (Debian's python3 of this version, and python3-venv) is needed")
    assert not [lib for lib in dynamic_entries(interpreter)["NEEDED"] if lib.startswith("libpython")]
    run([str(interpreter), "-m", "venv", str(tmp_path / "venv")])
    bin_dir = tmp_path / "venv" / "bin"
    env = {**os.environ, "PIP_CACHE_DIR": pip_cache()}
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(client_wheel), str(repaired_server_wheel)],
        env=env)
    # The installed binaries load the wheel's own copies, not this machine's.
    [site_packages] = (tmp_path / "venv" / "lib").glob("python*/site-packages")
    for binary in [site_packages / "kcoral" / "bin" / "kcoral-server", *(site_packages / "kcoral").glob("_native.*.so")]:
        for line in run(["ldd", str(binary)]).stdout.splitlines():
            name, _, found = line.strip().partition(" => ")
            if found and name not in MANYLINUX_BASELINE:
                assert Path(found.split(" (")[0]).resolve().is_relative_to(site_packages), line
    serves_its_own_client(bin_dir, tmp_path, env, monkeypatch)
