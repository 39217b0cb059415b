"""The installed binaries are hardened: full RELRO (bound at load, the GOT read-only), a
stack protector and fortified libc calls, the native module above all, in whose processes
the workers run strangers' code. Read from the ELF files themselves with readelf (binutils).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

def native_module() -> Path:
    import kcoral._native

    return Path(kcoral._native.__file__)


def server_binary() -> Path:
    # The binary, in the package's folder; the environment's bin/ holds its launcher.
    import kcoral

    return Path(kcoral.__file__).parent / "bin" / "kcoral-server"


BINARIES = {"kcoral._native": native_module, "kcoral-server": server_binary}


def readelf(*args: str) -> str:
    if shutil.which("readelf") is None:
        pytest.fail("readelf (binutils) is needed to check the binaries")
    return subprocess.run(["readelf", "--wide", *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("name", BINARIES)
def test_the_binary_is_built_with_full_relro_a_stack_protector_and_fortify(name: str) -> None:
    binary = BINARIES[name]()
    assert binary.is_file(), binary
    assert "GNU_RELRO" in readelf("--program-headers", str(binary))
    dynamic = readelf("--dynamic", str(binary))
    assert "BIND_NOW" in dynamic or "(FLAGS_1)" in dynamic and "NOW" in dynamic.split("(FLAGS_1)", 1)[1].splitlines()[0]
    symbols = readelf("--dyn-syms", str(binary))
    assert "__stack_chk_fail" in symbols
    assert any(f"__{call}_chk" in symbols for call in ("memcpy", "snprintf", "vsnprintf", "fprintf", "read", "memset"))
