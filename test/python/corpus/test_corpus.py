"""Send every malformed request of cases.py raw over HTTP and check the exact error answer.

Each case must get its exact HTTP status and the protocol's error body
``{"status": "ERROR", "request_id": ..., "error": {"kind": ..., "message": ...}}`` with a
message naming what was wrong, plus an ``X-Request-ID`` header equal to the body's id
(echoing the one sent). After each case the server must still run a valid program.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from corpus.cases import CASES, MAX_REQUEST_BYTES, Case, valid_body

ERROR_KINDS = {"parse", "request_too_large", "busy", "timeout", "engine", "response_too_large",
               "not_found", "method_not_allowed"}


@pytest.fixture(scope="module")
def corpus_server(start_module_server):
    return start_module_server("--num-workers", "2", "--max-request-bytes", str(MAX_REQUEST_BYTES))


def assert_serves_valid_program(server) -> None:
    content_type, body = valid_body()
    response = server.post(content_type, body, timeout_s=30)
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["status"] == "COMPLETED", document.get("error")
    assert document["results"] == {"out": {"type": "integer", "value": 0}}


def test_corpus_is_large_and_distinct():
    names = [case.name for case in CASES]
    assert len(names) >= 40
    assert not [name for name, n in Counter(names).items() if n > 1]
    assert {case.status for case in CASES} == {400, 404, 405, 413}
    assert all(case.message.strip() and case.kind in ERROR_KINDS for case in CASES)


def check_case(server, case: Case) -> None:
    sent_id = str(uuid.uuid4())
    headers = {"X-Request-ID": sent_id}
    if case.content_type is not None:
        headers["Content-Type"] = case.content_type
    response = server.request(case.method, case.path, content=case.body, headers=headers,
                              timeout_s=30)
    assert response.status_code == case.status, response.text
    assert response.headers["content-type"].startswith("application/json")
    document = json.loads(response.content)
    assert set(document) == {"status", "request_id", "error"}, document
    assert document["status"] == "ERROR"
    assert set(document["error"]) == {"kind", "message"}, document
    assert document["error"]["kind"] == case.kind, document
    message = document["error"]["message"]
    assert isinstance(message, str) and message.strip()
    assert case.message in message, message
    assert response.headers["x-request-id"] == document["request_id"]
    if case.echoes_request_id:
        assert document["request_id"] == sent_id
    else:
        assert str(uuid.UUID(document["request_id"])) == document["request_id"]
    if case.status == 405:
        assert response.headers.get("allow") in ("GET", "POST")


@pytest.mark.parametrize(
    "case",
    [pytest.param(case, id=case.name,
                  marks=[pytest.mark.xfail(strict=True, reason=case.bug)] if case.bug else [])
     for case in CASES],
)
def test_malformed_request(corpus_server, case: Case):
    try:
        check_case(corpus_server, case)
    finally:
        assert_serves_valid_program(corpus_server)


def test_server_still_serves_after_the_corpus(corpus_server):
    assert corpus_server.get("/health").json()["status"] == "ok"
    for _ in range(3):
        assert_serves_valid_program(corpus_server)
    rejected = corpus_server.metric('kcoral_execute_requests_total{outcome="rejected"}')
    assert rejected >= sum(1 for case in CASES if case.status == 400)
