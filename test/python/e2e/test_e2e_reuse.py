"""Reused workers, checked (--programs-per-worker N, --reuse-check state, the default).

A worker that runs several programs of one tenant takes the next one only when the last
left its state as it was before the first: no thread, open descriptor, environment
variable, imported module or child process more or less. Each test marks the worker
(an attribute on builtins, which the check does not look at), runs a program that
changes one thing, and asks whether the next program runs in the same worker.
``--reuse-check none`` keeps the old full trust: the worker is reused whatever changed.
"""

from __future__ import annotations

import pytest
from e2e.harness import Server
from e2e.programs import call

MARK = """
import builtins

def mark():
    seen = getattr(builtins, "kcoral_test_mark", 0)
    builtins.kcoral_test_mark = seen + 1
    return seen
"""

# Each leaves one thing of the worker's state changed, under the label the server counts
# its retirements by.
CHANGES = {
    "environment": "import os\n\ndef change():\n    os.environ['KCORAL_TEST_LEFT'] = 'secret value'\n",
    "threads": (
        "import threading, time\n\n"
        "def change():\n    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    ),
    "descriptors": (
        "import builtins\n\n"
        "def change():\n    builtins.kcoral_test_file = open('/dev/null')\n"
    ),
    "imported modules": "def change():\n    import colorsys\n",
}


@pytest.fixture(scope="module")
def checked(start_module_server) -> Server:
    return start_module_server("--num-workers", "1", "--programs-per-worker", "100")


def marks(server: Server) -> int:
    """The worker's mark before this program's (0: a fresh worker)."""
    return server.execute(call(MARK, "mark")).raise_for_error()["out"]


def test_programs_that_change_nothing_share_the_worker(checked):
    first = marks(checked)
    assert marks(checked) == first + 1
    assert marks(checked) == first + 2
    assert "retired as soon as one leaves its threads" in checked.stderr_text()


@pytest.mark.parametrize("changed", sorted(CHANGES))
def test_a_program_that_changes_the_worker_retires_it(checked, changed):
    before = checked.metric(f'kcoral_workers_retired_total{{changed="{changed}"}}')
    marks(checked)
    assert marks(checked) >= 1  # the same worker, so far
    checked.execute(call(CHANGES[changed], "change")).raise_for_error()
    assert marks(checked) == 0, f"a program that changed {changed} left its worker to the next"
    assert checked.metric(f'kcoral_workers_retired_total{{changed="{changed}"}}') == before + 1


def test_a_retirement_names_no_value_of_the_program(checked):
    checked.execute(call(CHANGES["environment"], "change")).raise_for_error()
    assert "secret value" not in checked.get("/metrics").text
    assert "secret value" not in checked.stderr_text()


def test_without_the_check_a_changed_worker_is_reused(start_server):
    server = start_server("--num-workers", "1", "--programs-per-worker", "100", "--reuse-check", "none")
    assert "--reuse-check none" in server.stderr_text()
    marks(server)
    server.execute(call(CHANGES["environment"], "change")).raise_for_error()
    assert marks(server) >= 1
