"""The hostile server's fixture (hostile_server.py), for the client's tests against it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from adversarial.hostile_server import Exchange, HostileServer


@pytest.fixture
def hostile() -> Iterator[Callable[[Callable[[Exchange], bool | None]], HostileServer]]:
    servers: list[HostileServer] = []

    def start(answer: Callable[[Exchange], bool | None]) -> HostileServer:
        servers.append(HostileServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
