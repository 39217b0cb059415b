"""docs/operating.md's sections on access control, the event log and the disk cache, run as written.

The access-control example: its shell lines make the token file (run here in a scratch
directory), a server is started on that file, and the Python example prints what its
comments say. The event log's sample line has exactly the fields a real line has.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from e2e.programs import call

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "operating.md"


def section(title: str) -> str:
    text = GUIDE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_the_access_control_example_runs_as_written(start_server, tmp_path):
    text = section("Access control")
    shell, = blocks(text, "sh")
    make_tokens, start = shell.strip().splitlines()
    subprocess.run(["bash", "-c", make_tokens], cwd=tmp_path, check=True)
    assert "--token-file tokens" in start
    server = start_server("--num-workers", "1", "--token-file", str(tmp_path / "tokens"))
    example, = blocks(text, "python")
    source = example.replace("http://localhost:8000", server.url)
    expected = [m.group(1) for m in re.finditer(r"^\s*print\(.*\)\s+# (.*)$", source, re.M)]
    out = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == expected == ["b'hi'", "401"]


def shape(value):
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items() if key != "ops"}
    return None


def test_the_event_log_sample_has_the_fields_of_a_real_line(start_server, tmp_path):
    sample = json.loads(blocks(section("Event log"), "json")[0])
    server = start_server("--num-workers", "1", "--log-dir", str(tmp_path))
    server.execute(call("def f():\n    raise ValueError('no')\n", "f"))
    real = json.loads((tmp_path / "events.jsonl").read_text().splitlines()[0])
    assert shape(sample) == shape(real)
    assert sample["program"]["ops"] == real["program"]["ops"]


def test_the_disk_cache_example_names_real_flags():
    shell, = blocks(section("Disk blob cache"), "sh")
    help_text = subprocess.run([str(Path(sys.executable).with_name("kcoral-server")), "--help"],
                               capture_output=True, text=True, check=True).stdout
    for flag in re.findall(r"--[a-z-]+", shell):
        assert flag in help_text, flag
