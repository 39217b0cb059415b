"""GET /health, GET /metrics and the X-Request-ID header.

/health reports status, a per-start instance id, the start time, no GPUs, the load, an
empty target and the worker environment's versions. /metrics is Prometheus text whose
counters move with the requests served. A request's own lowercase canonical UUID comes
back in the header and the body; any other X-Request-ID is replaced by a fresh one.
"""

from __future__ import annotations

import datetime
import platform
import re
import uuid

import httpx
import kcoral
import numpy
import pytest
from corpus.cases import MULTIPART, body_of, program, valid_body
from kcoral import ProtocolError

from e2e.programs import call

SAMPLE = re.compile(r'^([a-z_]+)(\{[a-z_]+="[^"]*"(?:,[a-z_]+="[^"]*")*\})? (-?[0-9.e+]+|\+Inf)$')


def test_health_fields(server):
    response = server.get("/health")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    health = response.json()
    assert set(health) == {"status", "instance_id", "started_at", "gpu_count", "load", "target",
                           "versions"}
    assert health["status"] == "ok"
    assert uuid.UUID(health["instance_id"]).version == 4
    assert str(uuid.UUID(health["instance_id"])) == health["instance_id"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", health["started_at"])
    started = datetime.datetime.fromisoformat(health["started_at"].replace("Z", "+00:00"))
    now = datetime.datetime.now(datetime.timezone.utc)
    assert now - datetime.timedelta(hours=1) < started < now + datetime.timedelta(seconds=5)
    assert health["gpu_count"] == 0
    assert health["load"] == {"request_capacity": 4, "requests_in_progress": 0,
                              "requests_waiting": 0, "gpus_in_progress": 0, "gpus_waiting": 0}
    assert health["target"] == {}
    versions = health["versions"]
    assert versions["python"] == platform.python_version()
    assert versions["numpy"] == numpy.__version__
    assert versions["kcoral"] == kcoral.__version__
    assert "torch" not in versions or isinstance(versions["torch"], str)
    assert uuid.UUID(response.headers["x-request-id"])


def test_health_is_stable_and_client_reads_it(server):
    with server.client() as client:
        first, second = client.health(), client.health()
        assert first["instance_id"] == second["instance_id"]
        assert first["started_at"] == second["started_at"]
        with pytest.raises(ProtocolError):
            client.target()


def metrics(server) -> dict[str, float]:
    response = server.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples: dict[str, float] = {}
    described: dict[str, set[str]] = {}
    for line in response.text.splitlines():
        if line.startswith("# "):
            kind, name = line.split()[1:3]
            described.setdefault(name, set()).add(kind)
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        name = match.group(1)
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in described else name
        assert described.get(family) == {"HELP", "TYPE"}, line
        samples[name + (match.group(2) or "")] = float(match.group(3).replace("+Inf", "inf"))
    return samples


def test_metrics_format_and_histogram(server):
    samples = metrics(server)
    buckets = [(key, value) for key, value in samples.items()
               if key.startswith("kcoral_execute_duration_seconds_bucket")]
    values = [value for _, value in buckets]
    assert values == sorted(values), "buckets must be cumulative"
    assert buckets[-1][0].endswith('{le="+Inf"}')
    assert buckets[-1][1] == samples["kcoral_execute_duration_seconds_count"]
    assert samples["kcoral_workers_capacity"] == 4
    for outcome in ("completed", "failed", "cache_miss", "rejected", "too_large", "busy",
                    "timeout"):
        assert f'kcoral_execute_requests_total{{outcome="{outcome}"}}' in samples


def test_metrics_counters_move(server):
    def count(outcome: str) -> float:
        return samples[f'kcoral_execute_requests_total{{outcome="{outcome}"}}']

    samples = metrics(server)
    before = dict(samples)
    server.execute(call("def f():\n    return 1\n", "f")).raise_for_error()
    server.execute(call("def f():\n    raise ValueError('x')\n", "f"))
    server.post(MULTIPART, body_of(program()))
    samples = metrics(server)
    assert count("completed") == before['kcoral_execute_requests_total{outcome="completed"}'] + 1
    assert count("failed") == before['kcoral_execute_requests_total{outcome="failed"}'] + 1
    assert count("rejected") == before['kcoral_execute_requests_total{outcome="rejected"}'] + 1
    assert (samples["kcoral_execute_duration_seconds_count"]
            == before["kcoral_execute_duration_seconds_count"] + 3)
    assert samples["kcoral_other_requests_total"] > before["kcoral_other_requests_total"]
    total = "kcoral_execute_duration_seconds_sum"
    assert samples[total] > before[total]


def send(server, headers, method: str = "POST", path: str = "/execute") -> httpx.Response:
    content_type, body = valid_body()
    with server.http() as http:
        return http.request(method, path, content=body if method == "POST" else b"",
                            headers=[("Content-Type", content_type), *headers])


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("POST", "/execute", 200), ("GET", "/health", 200), ("GET", "/metrics", 200),
     ("GET", "/nowhere", 404), ("GET", "/execute", 405)],
)
def test_canonical_request_id_is_echoed(server, method, path, status):
    sent = str(uuid.uuid4())
    response = send(server, [("X-Request-ID", sent)], method, path)
    assert response.status_code == status
    assert response.headers["x-request-id"] == sent
    if path == "/execute" or status >= 400:
        assert response.json()["request_id"] == sent


def test_request_id_of_a_failed_program_and_a_rejected_request(server):
    sent = str(uuid.uuid4())
    content_type, body = call("def f():\n    raise ValueError\n", "f").to_request()
    response = server.post(content_type, body, headers={"X-Request-ID": sent})
    assert response.json()["status"] == "FAILED"
    assert response.headers["x-request-id"] == response.json()["request_id"] == sent
    response = server.post(MULTIPART, body_of(program()), headers={"X-Request-ID": sent})
    assert response.status_code == 400
    assert response.headers["x-request-id"] == response.json()["request_id"] == sent


CANONICAL = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.mark.parametrize(
    "headers",
    [
        [("X-Request-ID", CANONICAL.upper())],
        [("X-Request-ID", "{" + CANONICAL + "}")],
        [("X-Request-ID", CANONICAL.replace("-", ""))],
        [("X-Request-ID", "urn:uuid:" + CANONICAL)],
        [("X-Request-ID", CANONICAL + "0")],
        [("X-Request-ID", CANONICAL[:-1])],
        [("X-Request-ID", "my-request-7")],
        [("X-Request-ID", "")],
        [("X-Request-ID", "0f8fad5b-d9cb-469f-a165-70867728950g")],
        [("X-Request-ID", CANONICAL), ("X-Request-ID", str(uuid.uuid4()))],
        [],
    ],
    ids=["uppercase", "braces", "no-hyphens", "urn", "too-long", "too-short", "free-text",
         "empty", "not-hex", "twice", "absent"],
)
def test_other_request_ids_are_replaced(server, headers):
    response = send(server, headers)
    assert response.status_code == 200
    made = response.headers["x-request-id"]
    assert made == response.json()["request_id"]
    assert str(uuid.UUID(made)) == made
    assert made not in {value for _, value in headers}
    assert made.lower() != CANONICAL


def test_each_request_gets_its_own_id(server):
    ids = {send(server, []).headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3


def test_request_id_is_echoed_on_413(start_server):
    server = start_server("--num-workers", "1", "--max-request-bytes", "1000")
    sent = str(uuid.uuid4())
    response = server.post(MULTIPART, b"x" * 5000, headers={"X-Request-ID": sent})
    assert response.status_code == 413
    assert response.headers["x-request-id"] == response.json()["request_id"] == sent
