"""The installed package carries libkcoral for C++ users: find_package(kcoral) works.

Configures and builds test/cmake_consumer against the kcoral package installed in this
interpreter's environment, then runs it: one program through the embedded executor.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

import kcoral

CONSUMER = Path(__file__).resolve().parents[2] / "cmake_consumer"


@pytest.mark.timeout(600)
def test_an_installed_package_builds_and_runs_a_cpp_consumer(tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is needed to check the C++ package")
    prefix = Path(kcoral.__file__).resolve().parent
    assert (prefix / "lib" / "cmake" / "kcoral" / "kcoralConfig.cmake").is_file()
    # The package's version is kcoral's (git tags), in the X.Y.Z form CMake knows.
    version_file = (prefix / "lib" / "cmake" / "kcoral" / "kcoralConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{Version(kcoral.__version__).base_version}")' in version_file
    build = tmp_path / "build"
    configure = [
        "cmake", "-S", str(CONSUMER), "-B", str(build), "-G", "Ninja",
        f"-DCMAKE_PREFIX_PATH={prefix}", f"-DPython_EXECUTABLE={sys.executable}",
    ]
    subprocess.run(configure, check=True, capture_output=True, timeout=300)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True, timeout=300)
    environment = {**os.environ, "KCORAL_PYTHON": sys.executable}
    done = subprocess.run([str(build / "consumer")], capture_output=True, text=True, timeout=60,
                          env=environment)
    assert done.returncode == 0, done.stderr
    status, results = done.stdout.split(" ", 1)
    assert status == "COMPLETED"
    assert json.loads(results) == {"sum": {"type": "integer", "value": 42}}
