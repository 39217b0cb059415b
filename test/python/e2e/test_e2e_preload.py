"""The worker parent's preload (--preload): modules imported once, before the workers are
forked, so that programs find them imported; one that is not installed is skipped, one
whose import raises or leaves a Python thread running is left out (a forked child would
lack the thread), and the start line says which. (A module that opens a CUDA device on
import is left out the same way: test/python/gpu.)
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy
import pytest

from e2e.programs import call

MODULES = {
    "kc_preload_good.py": "import os\nIMPORTED_IN = os.getpid()\n",
    "kc_preload_thread.py": "import threading, time\n"
                            "threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n",
    "kc_preload_raises.py": "raise RuntimeError('broken on purpose')\n",
}

WHAT_IS_IMPORTED = """
import os, sys

def imported():
    good = sys.modules.get("kc_preload_good")
    return {"good": good is not None, "in_parent": good is not None and good.IMPORTED_IN != os.getpid(),
            "thread": "kc_preload_thread" in sys.modules, "raises": "kc_preload_raises" in sys.modules,
            "numpy": "numpy" in sys.modules}
"""


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("preload")
    for name, source in MODULES.items():
        (folder / name).write_text(source)
    folder.chmod(0o755)
    return folder


def start(start_server, modules: Path, preload: str):
    return start_server("--num-workers", "1", "--preload", preload, "--readable-path", str(modules),
                        "--program-env", f"PYTHONPATH={modules}")


def test_modules_are_imported_in_the_parent_and_the_unsafe_left_out(start_server, modules):
    server = start(start_server, modules,
                   "kc_preload_good,kc_preload_thread,kc_preload_raises,kc_preload_missing,kc_preload_missing.sub")
    result = server.execute(call(WHAT_IS_IMPORTED, "imported")).raise_for_error()
    assert result["out"] == {"good": True, "in_parent": True, "thread": False, "raises": False, "numpy": False}
    line = next(line for line in server.stderr_text().splitlines() if "preloaded:" in line)
    assert "preloaded: kc_preload_good " in line, line
    assert "not installed: kc_preload_missing, kc_preload_missing.sub" in line, line
    assert "kc_preload_thread (started a Python thread)" in line, line
    assert "kc_preload_raises (RuntimeError: broken on purpose)" in line, line


def test_default_preloads_numpy_and_none_preloads_nothing(start_server, modules):
    default = start_server("--num-workers", "1")
    assert default.execute(call(WHAT_IS_IMPORTED, "imported")).raise_for_error()["out"]["numpy"] is True
    assert "preloaded: numpy " in default.stderr_text()
    nothing = start(start_server, modules, "none")
    assert nothing.execute(call(WHAT_IS_IMPORTED, "imported")).raise_for_error()["out"]["good"] is False
    assert "preloaded: nothing" in nothing.stderr_text()


WHAT_THE_PARENT_HOLDS = """
import sys

def held():
    return sorted(name for name in ("threading", "importlib.metadata", "zipfile", "httpx",
                                    "kcoral._client", "kcoral._result") if name in sys.modules)
"""


def test_the_worker_parent_holds_nothing_of_the_client_or_of_reading_versions(start_server):
    # Every module the parent holds makes each fresh worker dearer to fork, to start
    # (threading's after-fork work) and to tear down. kcoral.builtins brings none of the
    # client; the versions /health reports are read in a child of the parent.
    server = start_server("--num-workers", "1", "--preload", "kcoral.builtins,kcoral._native")
    assert server.execute(call(WHAT_THE_PARENT_HOLDS, "held")).raise_for_error()["out"] == []
    versions = server.get("/health").json()["versions"]
    assert versions["python"] == platform.python_version()
    assert versions["numpy"] == numpy.__version__  # read by importlib.metadata, in that child
