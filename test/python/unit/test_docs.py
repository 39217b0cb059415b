"""The documentation holds together: its links lead somewhere, and the flag map is whole.

- Every relative link in README.md and docs/ names a file of the repository, and an anchor
  names a heading of that file (by the usual rule: lower case, spaces to hyphens,
  punctuation but hyphens dropped).
- docs/operating.md's flag map names every flag ``kcoral-server --help`` prints.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(document: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", document.read_text(), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_relative_link_leads_to_a_file_and_heading(document: Path) -> None:
    text = re.sub(r"```.*?```", "", document.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists() or not linked.resolve().is_relative_to(ROOT):
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{document.name}: {broken}"


def test_the_operators_flag_map_names_every_flag_of_the_server() -> None:
    server = Path(sys.executable).with_name("kcoral-server")
    if not server.is_file():
        pytest.skip("kcoral-server is not installed beside this Python (the server side)")
    help_text = subprocess.run([str(server), "--help"], capture_output=True, text=True, timeout=30,
                               check=True).stdout
    flags = set(re.findall(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", help_text, re.M)) - {"--help"}
    assert len(flags) > 40
    guide = (ROOT / "docs" / "operating.md").read_text()
    flag_map = guide[guide.index("\n## Flags\n"):guide.index("\n## ", guide.index("\n## Flags\n") + 1)]
    assert not sorted(flag for flag in flags if f"`{flag}`" not in flag_map)
