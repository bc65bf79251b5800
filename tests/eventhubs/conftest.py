"""Fixtures for the Event Hubs tests: a local broker on a free loopback port.

``eventhubs_broker`` starts a fresh :class:`EventHubsBroker` (hub ``scheduled-events``, 4 partitions,
1 MiB link limit) for each test and stops it after, checking that it left no thread behind. Use
``eventhubs_broker.connection_string()`` with the SDK (``UseDevelopmentEmulator=true``, plain TCP),
``stop()`` / ``start()`` for outages (same port, events kept), ``messages(partition)`` to look at
what was stored, and ``fail_next_sends(n)`` to make the broker answer "server busy".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.azurite import INSTALL_HINT, Azurite, find_binary

from .broker import EventHubsBroker


def _broker_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(("eh-broker", "eh-relay"))}


@pytest.fixture
def eventhubs_broker() -> Iterator[EventHubsBroker]:
    """A running local Event Hubs broker; stopped (and checked for stray threads) afterwards."""
    before = _broker_threads()
    broker = EventHubsBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
    leaked = _broker_threads() - before
    assert not leaked, f"broker threads left running: {leaked}"


@pytest.fixture
def small_broker() -> Iterator[EventHubsBroker]:
    """A broker whose links accept at most 4 KiB per message (to exercise size limits)."""
    broker = EventHubsBroker(max_message_size=4096)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def azurite_blob() -> Iterator[Azurite]:
    """Azurite's blob service for checkpoint stores; the test is skipped when it is not installed."""
    if find_binary("blob") is None:
        pytest.skip(f"azurite-blob is not installed ({INSTALL_HINT})")
    with Azurite("blob") as azurite:
        yield azurite
