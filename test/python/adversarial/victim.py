"""The other client of every attack: a normal program that runs beside the attack and must
complete with its own result, and a check that the server still serves.

Not a test module.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from e2e.harness import Server
from e2e.programs import call
from kcoral import Program

from adversarial.attacks import VICTIM


@contextmanager
def victim_beside(server: Server, seconds: float = 2.0, token: str | None = None) -> Iterator[str]:
    """Runs a victim program of another client (with `token`, for a server that needs one)
    while the block runs; checks that it completed with its own result. Yields its secret."""
    secret = uuid.uuid4().hex
    blob = f"blob of {secret}".encode()
    program = Program()
    module = program.upload(id="m", kind="module", source=VICTIM)
    data = program.upload(id="data", kind="bytes", value=blob)
    fn = program.get_function(id="f", module=module, name="victim")
    program.return_(key="out", value=program.run(id="r", fn=fn, args=[secret, data, seconds]))
    outcome: dict = {}

    def run() -> None:
        try:
            with server.client(60, token=token) as client:
                outcome["result"] = client.execute(program)
        except Exception as error:  # reported below
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)  # the victim is running (it holds its secret for `seconds`)
    yield secret
    thread.join(timeout=90)
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result.status == "COMPLETED", result.error
    assert result["out"] == {"token": secret, "blob": hashlib.sha256(blob).hexdigest()}


def assert_serves(server: Server, token: str | None = None) -> None:
    with server.client(token=token) as client:
        assert client.execute(call("def f():\n    return 'fine'\n", "f")).raise_for_error()["out"] == "fine"
