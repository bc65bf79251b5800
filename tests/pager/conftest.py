"""Fixtures: PagerDuty and Opsgenie stand-ins on loopback (tests/support/pager_receiver.py, which
check each request against the services' documented schemas), their keys in the environment, and
pager sinks built as the agent builds them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from se_forwarder import sinks
from tests.support.pager_receiver import OpsgenieReceiver, PagerDutyReceiver

ROUTING_KEY = "R0ut1ngKey0f32LettersAndD1g1ts00"  # an Events API v2 integration key's shape
API_KEY = "3f1c9b0e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"  # an Opsgenie API integration key's shape
assert len(ROUTING_KEY) == 32


def pager_sink(kind: str, name: str = "pager", **options: Any) -> Any:
    """A ``pagerduty`` or ``opsgenie`` sink: validated, then created, like from the config file."""
    checked = sinks.validate(kind, dict(options), "sinks[0]")
    return sinks.create(kind, name, checked, None)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PD_ROUTING_KEY", ROUTING_KEY)
    monkeypatch.setenv("OG_API_KEY", API_KEY)


@pytest.fixture
def pagerduty() -> Iterator[PagerDutyReceiver]:
    with PagerDutyReceiver(ROUTING_KEY) as r:
        yield r


@pytest.fixture
def opsgenie() -> Iterator[OpsgenieReceiver]:
    with OpsgenieReceiver(API_KEY) as r:
        yield r


@pytest.fixture
def pd_sink(pagerduty: PagerDutyReceiver, keys: None) -> Any:
    def make(**options: Any) -> Any:
        return pager_sink("pagerduty", url=pagerduty.url, routing_key_env="PD_ROUTING_KEY", **options)
    return make


@pytest.fixture
def og_sink(opsgenie: OpsgenieReceiver, keys: None) -> Any:
    def make(**options: Any) -> Any:
        return pager_sink("opsgenie", url=opsgenie.base_url, api_key_env="OG_API_KEY", **options)
    return make


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"
