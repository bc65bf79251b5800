"""Fixtures: Teams and Slack stand-ins on loopback, and chat sinks built as the agent builds them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.sinks import webhook
from tests.support.chat_receiver import ChatReceiver


def chat_sink(url: str, fmt: str, name: str = "chat", **options: Any) -> webhook.WebhookSink:
    """A webhook sink with ``format = fmt``: validated, then created, like from the config file."""
    checked = webhook.validate({"url": url, "format": fmt, **options}, "sinks[0]")
    return webhook.create(name, checked, None)


@pytest.fixture
def teams() -> Iterator[ChatReceiver]:
    with ChatReceiver("teams") as r:
        yield r


@pytest.fixture
def slack() -> Iterator[ChatReceiver]:
    with ChatReceiver("slack") as r:
        yield r


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"
