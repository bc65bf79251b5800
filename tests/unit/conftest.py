"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.keep_alive import Server


@pytest.fixture
def serve() -> Iterator:
    """Makes keep-alive servers (``tests/support/keep_alive.py``); closes them after the test."""
    servers: list[Server] = []

    def make(**kwargs: object) -> Server:
        servers.append(Server(**kwargs))  # type: ignore[arg-type]
        return servers[-1]

    yield make
    for server in servers:
        server.close()
