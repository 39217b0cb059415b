"""The disk blob cache: uploads kept under --disk-cache-dir survive a restart.

A blob sent to one server is found by the next server on the same directory: the program
sent without it completes instead of answering CACHE_MISS. A file altered on disk is not
used: the client is asked for the blob again.
"""

from __future__ import annotations

from pathlib import Path

from kcoral import Program

from e2e.harness import wait_until


def program_with(data: bytes) -> Program:
    program = Program()
    program.return_(key="data", value=program.upload(kind="bytes", value=data))
    return program


def test_an_upload_survives_a_restart(start_server, tmp_path):
    cache = tmp_path / "blobs"
    data = b"uploaded before the restart" * 100
    first = start_server("--num-workers", "1", "--disk-cache-dir", str(cache))
    assert first.execute(program_with(data)).raise_for_error()["data"] == data
    assert wait_until(lambda: first.metric("kcoral_disk_cache_blobs") == 1, 10)
    assert first.stop() == 0

    # The client sends a program without its blobs first: no miss means the disk had it.
    miss = 'kcoral_execute_requests_total{outcome="cache_miss"}'
    second = start_server("--num-workers", "1", "--disk-cache-dir", str(cache))
    assert second.execute(program_with(data)).raise_for_error()["data"] == data
    assert second.metric(miss) == 0

    # Altered on disk: not used, and the client is asked again.
    [kept] = [p for p in Path(cache).rglob("*") if p.is_file() and len(p.name) == 64]
    kept.write_bytes(b"something else")
    third_data = b"another" * 10
    assert second.execute(program_with(third_data)).raise_for_error()["data"] == third_data
    assert second.stop() == 0
    third = start_server("--num-workers", "1", "--disk-cache-dir", str(cache))
    assert third.execute(program_with(data)).raise_for_error()["data"] == data
    assert third.metric(miss) == 1
