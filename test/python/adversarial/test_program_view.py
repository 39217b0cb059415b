"""What a program sees of the server it runs on, on a sandboxed CPU server run as root, while
a normal program of another client runs beside it and completes with its own result:

- Environment: a fixed list and --program-env, nothing of the server's own (a token or an
  operator's secret in the server's environment stays out of os.environ, /proc and a
  child's environment); a --program-env without a value is refused at start.
- /sys: what Python reads of it (the CPUs), never the network interfaces or the firmware.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.harness import Server, descendants, server_binary
from e2e.programs import call

from adversarial.victim import victim_beside

pytestmark = pytest.mark.slow

SERVER_SECRETS = {"KCORAL_TOKEN": "kcoral-token-of-the-operator", "OPERATOR_SECRET": "operator-secret-value"}

PROGRAMS = r'''
import errno, os, subprocess, sys


def _name(error):
    return errno.errorcode.get(error.errno, str(error.errno))


def environment():
    """os.environ; what /proc shows of it (this process's is not readable: the worker is not
    dumpable); what a child process is given."""
    try:
        with open("/proc/self/environ", "rb") as f:
            own = f.read().decode("utf-8", "replace")
    except OSError as e:
        own = _name(e)
    child = subprocess.run(["env"], capture_output=True, text=True).stdout
    shown = subprocess.run(["cat", "/proc/self/environ"], capture_output=True, text=True).stdout
    return {"environ": dict(os.environ), "own": own, "child": child, "child_proc": shown,
            "executable": sys.executable}


def system_files():
    def listing(path):
        try:
            return sorted(os.listdir(path))
        except OSError as e:
            return _name(e)

    def read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as e:
            return _name(e)

    return {
        "sys": listing("/sys"),
        "class": listing("/sys/class"),
        "class_net": listing("/sys/class/net"),
        "firmware": listing("/sys/firmware"),
        "virtual_net": listing("/sys/devices/virtual/net"),
        "devices": listing("/sys/devices"),
        "online": read("/sys/devices/system/cpu/online"),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
    }
'''


def run(server: Server, name: str, *args):
    return server.execute(call(PROGRAMS, name, *args), read_timeout_s=60)


@pytest.fixture(scope="module")
def seen(start_module_server) -> Iterator[Server]:
    # The server's environment holds secrets of the operator's; programs must not see them.
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SERVER_SECRETS.items():
            patch.setenv(name, value)
        server = start_module_server("--num-workers", "2", "--program-env", "FOO=bar",
                                     "--program-env", "EQUATION=a=b")
    yield server


# -- what a program sees -----------------------------------------------------------------------


def environ_of(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
    except OSError:  # gone meanwhile
        return None


def test_the_environment_is_a_fixed_list_with_program_env_and_nothing_of_the_server(seen):
    server_environ = Path(f"/proc/{seen.pid}/environ").read_bytes().decode()
    assert all(f"{name}={value}" in server_environ for name, value in SERVER_SECRETS.items())  # it has them
    with victim_beside(seen):
        report = run(seen, "environment").raise_for_error()["out"]
        worker_environs = [text for pid, _ in descendants(seen.pid) if (text := environ_of(pid)) is not None]
    assert worker_environs  # the zygote, the inits and the workers, the victim's among them
    environ = report["environ"]
    compile_cache = {"TRITON_CACHE_DIR", "TVM_FFI_CACHE_DIR", "CUTE_DSL_CACHE_DIR", "CUDA_CACHE_PATH",
                     "CUDA_CACHE_MAXSIZE", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR", "KCORAL_COMPILE_CACHE"}
    assert set(environ) == {"PATH", "HOME", "TMPDIR", "LANG", "USER", "LOGNAME", "GLIBC_TUNABLES", "FOO",
                            "EQUATION", *compile_cache}, environ
    assert environ["KCORAL_COMPILE_CACHE"] == "/var/cache/kcoral"
    assert all(environ[name].startswith("/var/cache/kcoral/") for name in compile_cache - {
        "KCORAL_COMPILE_CACHE", "CUDA_CACHE_MAXSIZE"}), environ
    assert (environ["FOO"], environ["EQUATION"]) == ("bar", "a=b")
    assert environ["PATH"].split(":")[0] == os.path.dirname(report["executable"]), environ["PATH"]
    assert (environ["HOME"], environ["TMPDIR"], environ["LANG"]) == ("/tmp/home", "/tmp", "C.UTF-8")
    assert environ["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    assert report["own"] in ("EACCES", "\0".join(f"{k}={v}" for k, v in environ.items()) + "\0"), report["own"]
    assert report["child_proc"] == "\0".join(f"{k}={v}" for k, v in environ.items()) + "\0"
    assert "FOO=bar\n" in report["child"]
    # From outside too: no process of the server's but the server holds them (the zygote,
    # and so every worker's /proc/<pid>/environ, has only what the worker machinery reads).
    shown = [str(environ), report["own"], report["child"], report["child_proc"], *worker_environs]
    for text in shown:
        for name, value in SERVER_SECRETS.items():
            assert name not in text and value not in text, text


def test_a_program_env_without_a_value_is_refused_at_start(tmp_path):
    for bad in ("FOO", "=bar", "1X=2"):
        started = subprocess.run([server_binary(), "--port", "0", "--work-root", str(tmp_path / "work"),
                                  "--program-env", bad], capture_output=True, text=True, timeout=30)
        assert started.returncode != 0
        assert (f"--program-env: expected NAME=VALUE with a NAME of letters, digits and underscores, not '{bad}'"
                in started.stderr), started.stderr
        assert "listening" not in started.stdout


def test_sys_shows_the_cpus_and_not_the_network_or_the_firmware(seen):
    with victim_beside(seen):
        report = run(seen, "system_files").raise_for_error()["out"]
    assert set(report["sys"]) <= {"bus", "devices", "kernel", "module"}, report["sys"]
    for hidden in ("class", "class_net", "firmware", "virtual_net"):
        assert report[hidden] == "ENOENT", (hidden, report[hidden])
    assert set(report["devices"]) <= {"system", "pci0000:00"} and "system" in report["devices"], report["devices"]
    assert report["online"] == Path("/sys/devices/system/cpu/online").read_text().strip()
    assert report["cpu_count"] == os.cpu_count() and report["affinity"] >= 1
