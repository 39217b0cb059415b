"""Cross-compatibility with the public reference implementation, PyPI kcoral==0.1.1.

Every case of ``programs.CASES`` runs on both servers (ours, and the reference's
``kcoral server --device cpu``) through both clients (ours in this process, the reference
one in a subprocess). Outcomes are normalized by ``harness.py`` and compared:

- ``test_reference_client_on_our_server``: the reference client sees on our server what
  our client sees there (direction 1 against our baseline);
- ``test_our_client_on_reference_server``: our client sees on the reference server what
  the reference client sees there (direction 2 against the reference baseline);
- ``test_directions_agree``: direction 1 and direction 2 agree, except for the fields
  a case's :class:`programs.Difference` names, each quoting the public protocol's sentence that
  makes us differ on purpose. Error messages are implementation text and are compared
  only where the protocol fixes them, through ``expect``;
- ``test_expectations``: each pair meets the case's explicit expectations, so the two
  implementations cannot agree on something wrong;
- ``test_builders_agree``: both builders put the same program on the wire;
- ``test_request_id_header``: both servers treat ``X-Request-ID`` alike.

A known bug of ours is an ``xfail(strict=True)`` whose reason starts with "BUG:".
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from typing import Any

import httpx
import pytest

import kcoral

from cases import CASES  # type: ignore[import-not-found]
from programs import Case, Difference  # type: ignore[import-not-found]

pytestmark = pytest.mark.timeout(900)  # the first test pays for running every case

PAIRS = [("ours", "ours"), ("reference", "ours"), ("ours", "reference"),
         ("reference", "reference")]
MISSING = "<missing>"


def _params(test: str) -> list[Any]:
    return [pytest.param(case, id=case.name, marks=_bug_marks(case, test)) for case in CASES]


def _pair_params() -> list[Any]:
    return [
        pytest.param(case, client, server, id=f"{case.name}-{client}_client-{server}_server",
                     marks=_bug_marks(case, f"expect:{client}:{server}"))
        for case in CASES for client, server in PAIRS
    ]


def _bug_marks(case: Case, test: str) -> list[Any]:
    reason = case.bugs.get(test)
    # raises: a bug shows as a failed assertion; anything else (a server that did not
    # start, a missing reference venv) must still fail the test.
    return [pytest.mark.xfail(strict=True, reason=reason, raises=AssertionError)] if reason else []


def _plain(value: Any) -> Any:
    """As JSON would carry it, so in-process and subprocess outcomes compare alike."""
    return json.loads(json.dumps(value))


def lookup(outcome: Any, path: str) -> Any:
    node = outcome
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


def _under(path: str, masked: tuple[str, ...]) -> bool:
    return any(path == m or path.startswith(m + ".") for m in masked)


def _delete(outcome: Any, path: str) -> None:
    *parents, leaf = path.split(".")
    node = lookup(outcome, ".".join(parents)) if parents else outcome
    if isinstance(node, dict):
        node.pop(leaf, None)


def comparable(outcome: Any, difference: Difference | None) -> Any:
    """The outcome without what may differ between the servers: the masked fields of a
    documented difference, and error messages (implementation text; where the public protocol
    fixes one, the case's ``expect`` checks it on every pair)."""
    view = copy.deepcopy(_plain(outcome))
    for execution in view.get("executions", [view]):
        if isinstance(execution.get("error"), dict):
            execution["error"].pop("message", None)
        for path in difference.masked if difference else ():
            _delete(execution, path)
    return view


def expectations(case: Case, server: str) -> dict[str, Any]:
    expected = dict(case.expect)
    if case.difference is not None:
        expected = {k: v for k, v in expected.items() if not _under(k, case.difference.masked)}
        expected.update(case.difference.ours if server == "ours" else case.difference.reference)
    return expected


def check_expectations(outcome: Any, expected: dict[str, Any]) -> None:
    outcome = _plain(outcome)
    mismatches = {path: {"want": want, "got": lookup(outcome, path)}
                  for path, want in expected.items() if lookup(outcome, path) != _plain(want)}
    assert not mismatches, f"{json.dumps(mismatches, indent=1)}\noutcome: {outcome}"


def same_server_view(outcome: Any) -> Any:
    """The outcome with the digits of error messages masked: the reference names file
    descriptors in some ('Is a directory: 16'), which vary from run to run."""
    view = _plain(outcome)
    for execution in view.get("executions", [view]):
        error = execution.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            error["message"] = re.sub(r"[0-9]+", "<n>", error["message"])
    return view


def assert_same(left: Any, right: Any) -> None:
    """Equal, and in the same order: results and objects keep their key order."""
    left, right = _plain(left), _plain(right)
    assert left == right
    assert json.dumps(left) == json.dumps(right), "same contents, different key order"


def _reference_builder_refuses(case: Case, outcome: Any) -> None:
    """The reference client cannot express an ours-only program at all."""
    assert outcome.get("builder_raised") == "TypeError", outcome


@pytest.mark.parametrize("case", _params("builders"))
def test_builders_agree(case: Case, wires: dict[str, dict[str, Any]]) -> None:
    ours, reference = _plain(wires["ours"][case.name]), wires["reference"][case.name]
    assert "builder_raised" not in ours, ours
    if case.ours_only:
        _reference_builder_refuses(case, reference)
        return
    assert ours == reference  # key order inside an instruction means nothing on the wire


@pytest.mark.parametrize("case", _params("reference_client_on_ours"))
def test_reference_client_on_our_server(case: Case, outcomes: Any) -> None:
    reference_client = outcomes["reference", "ours"][case.name]
    if case.ours_only:
        _reference_builder_refuses(case, reference_client)
        return
    assert_same(same_server_view(reference_client),
                same_server_view(outcomes["ours", "ours"][case.name]))


@pytest.mark.parametrize("case", _params("our_client_on_reference"))
def test_our_client_on_reference_server(case: Case, outcomes: Any) -> None:
    ours = outcomes["ours", "reference"][case.name]
    if case.ours_only:
        # No reference baseline exists; what the reference server answers is the
        # documented difference, checked in test_directions_agree.
        _reference_builder_refuses(case, outcomes["reference", "reference"][case.name])
        return
    assert_same(same_server_view(ours),
                same_server_view(outcomes["reference", "reference"][case.name]))


@pytest.mark.parametrize("case", _params("directions"))
def test_directions_agree(case: Case, outcomes: Any) -> None:
    """Direction 1 (reference client, our server) against direction 2 (our client,
    reference server); an ours-only case has only our client, on both servers."""
    on_ours = outcomes["ours" if case.ours_only else "reference", "ours"][case.name]
    on_reference = outcomes["ours", "reference"][case.name]
    if case.difference is not None:
        check_expectations(on_ours, case.difference.ours)
        check_expectations(on_reference, case.difference.reference)
    assert_same(comparable(on_ours, case.difference), comparable(on_reference, case.difference))


@pytest.mark.parametrize(("case", "client", "server"), _pair_params())
def test_expectations(case: Case, client: str, server: str, outcomes: Any) -> None:
    outcome = outcomes[client, server][case.name]
    if case.ours_only and client == "reference":
        _reference_builder_refuses(case, outcome)
        return
    check_expectations(outcome, expectations(case, server))


@pytest.mark.parametrize("server", ["ours", "reference"])
def test_request_id_header(server: str, servers: Any) -> None:
    """The public protocol: 'Every response carries `X-Request-ID`. A client may send its own as
    one lowercase canonical UUID; anything else is ignored and the server makes one. The
    same id appears in the body.' Checked below the clients, on both servers alike."""
    url = servers[server].url
    program = kcoral.Program()
    module = program.upload(kind="module", source="def f():\n    return 1\n")
    program.return_(key="r", value=program.run(fn=program.get_function(module=module, name="f")))
    content_type, body = program.to_request()
    mine = str(uuid.uuid4())
    with httpx.Client(base_url=url, timeout=60) as http:
        for sent in (mine, mine.upper(), "not-a-uuid", mine.replace("-", "")):
            response = http.post("/execute", content=body,
                                 headers={"Content-Type": content_type, "X-Request-ID": sent})
            assert response.status_code == 200, response.text
            answered = response.headers["x-request-id"]
            assert response.json()["request_id"] == answered
            if sent == mine:
                assert answered == mine
            else:
                assert answered != sent and str(uuid.UUID(answered)) == answered
        health = http.get("/health")
    if server == "ours":  # KCoral 0.1.1 sends no X-Request-ID with /health
        assert str(uuid.UUID(health.headers["x-request-id"])) == health.headers["x-request-id"]
    else:
        assert "x-request-id" not in health.headers
