"""Large allocations in transparent huge pages: the worker's interpreter and a program's
processes start with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, so a 64 MiB bytes value lies
in 2 MiB pages wherever the kernel gives them on request (its transparent_hugepage
setting "madvise" or "always"); an operator's --program-env GLIBC_TUNABLES replaces it,
for the workers' interpreters too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.programs import call

TUNABLE = "glibc.malloc.hugetlb=1"
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")

# The huge pages under a fresh 64 MiB bytes value, from the program's own /proc/self/smaps;
# the tunable as the program and a process it starts see it.
WHERE_A_LARGE_VALUE_LIES = """
import os, subprocess

def large():
    value = b"\\x01" * (64 << 20)
    address = id(value)  # the object's own memory, in CPython
    huge_kib, inside = None, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split()[0]
            if not first.endswith(":"):  # a mapping's line: start-end perms ...
                start, end = (int(bound, 16) for bound in first.split("-"))
                inside = start <= address < end
            elif inside and first == "AnonHugePages:":
                huge_kib = int(line.split()[1])
    child = subprocess.run(["sh", "-c", "echo \\"$GLIBC_TUNABLES\\""], capture_output=True, text=True)
    return {"tunables": os.environ.get("GLIBC_TUNABLES"), "child": child.stdout.strip(),
            "huge_kib": huge_kib}
"""


def thp_mode() -> str:
    """The kernel's transparent_hugepage setting (the bracketed word), or "" when unknown."""
    try:
        text = THP_SETTING.read_text()
    except OSError:
        return ""
    return text[text.find("[") + 1 : text.find("]")] if "[" in text else ""


def test_a_program_and_its_processes_have_the_tunable_and_a_large_value_lies_in_huge_pages(server):
    out = server.execute(call(WHERE_A_LARGE_VALUE_LIES, "large")).raise_for_error()["out"]
    assert (out["tunables"], out["child"]) == (TUNABLE, TUNABLE), out
    if thp_mode() not in ("madvise", "always"):
        pytest.skip(f"the kernel gives no transparent huge pages on request ({thp_mode() or 'unknown'})")
    # 64 MiB in 2 MiB pages: all but the pages at the ends of an unaligned mapping.
    assert out["huge_kib"] >= 60 << 10, out


def test_the_operators_program_env_replaces_it(start_server):
    server = start_server("--num-workers", "1", "--program-env", "GLIBC_TUNABLES=")
    out = server.execute(call(WHERE_A_LARGE_VALUE_LIES, "large")).raise_for_error()["out"]
    assert (out["tunables"], out["child"]) == ("", ""), out
    if thp_mode() != "madvise":
        pytest.skip(f"only a kernel that gives huge pages on request alone tells them apart ({thp_mode()})")
    assert out["huge_kib"] == 0, out  # the worker's interpreter started without it
