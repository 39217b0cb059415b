"""Fixtures that run the real kcoral-server for the end-to-end tests and the request corpus.

``server`` is one server shared by the session; ``start_server`` and
``start_module_server`` start servers with flags of a test's (or a module's) own. All are
stopped at the end, and checked for leftover processes and files (see e2e/harness.py).
Every test gets a timeout unless it sets its own; ``slow`` marks the tests that take seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from e2e.harness import Server

DEFAULT_TEST_TIMEOUT_S = 120


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes seconds (timeouts, crashes, shutdowns)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The shared server: 4 workers, default limits. Tests must not stop or break it.

    Its queue timeout is short so that a wedged server fails tests instead of hanging them.
    """
    started = Server(tmp_path_factory.mktemp("server"),
                     ["--num-workers", "4", "--queue-timeout-seconds", "20"])
    try:
        yield started
    finally:
        ran_to_the_end = started.process.poll() is None
        code = started.stop()
        assert ran_to_the_end, (f"the shared server exited during the session with {code}: "
                                f"{started.stderr_text()}")
        assert code == 0, f"the shared server exited with {code}: {started.stderr_text()}"


def _server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(*flags: str, descriptor_limit: int | None = None) -> Server:
        instance = Server(tmp_path_factory.mktemp("extra-server"), list(flags), descriptor_limit)
        started.append(instance)
        return instance

    yield start
    failures = []
    for instance in started:
        try:
            instance.stop()
        except AssertionError as error:
            failures.append(str(error))
    assert not failures, failures


@pytest.fixture
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    """A factory: ``start_server("--num-workers", "1", ...)`` starts a server of one's own.

    Each is stopped, and checked for leftovers, after the test (unless the test stopped it).
    """
    yield from _server_factory(tmp_path_factory)


@pytest.fixture(scope="module")
def start_module_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Server]]:
    """``start_server`` for servers that the tests of one module share."""
    yield from _server_factory(tmp_path_factory)
