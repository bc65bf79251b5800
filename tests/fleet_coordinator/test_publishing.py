"""Decisions on their way out (output.py) to a real Event Hub: signed in one place, never unsigned.

The coordinator's own Output publishes through its HubPublisher (the azure-eventhub producer) to
the Event Hubs broker fixture; a control decision's future is what the API answers with. The
signing key is a file made here: a test removes it to show what happens while it cannot be read.
Nothing else of the service runs (``may_act`` always says yes; the queues are never used).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator import FleetState, Policy, observe, pause
from se_forwarder.fleet.coordinator.azure import parts
from se_forwarder.fleet.coordinator.config import Access, EventHubSettings
from se_forwarder.fleet.coordinator.edge import trust
from se_forwarder.fleet.coordinator.output import ApprovalMessages as Sender
from se_forwarder.fleet.coordinator.output import HubProducer as HubPublisher
from se_forwarder.fleet.coordinator.output import Outgoing, Output
from se_forwarder.fleet.coordinator.signer import Signer
from se_forwarder.fleet.coordinator.stats import Health
from tests.eventhubs.broker import EventHubsBroker
from tests.support.waiting import wait_for

SOURCE = "urn:se-forwarder:coordinator:out"
ENV = "PUBLISHING_TEST_HUB"
T0 = 1_772_452_800.0


@pytest.fixture(scope="module")
def broker() -> Iterator[EventHubsBroker]:
    with EventHubsBroker() as running:
        yield running


def on_hub(broker: EventHubsBroker) -> list[dict[str, Any]]:
    events = (json.loads(stored.message().body) for stored in broker.all_messages())
    return [e for e in events if e.get("source") == SOURCE]


@pytest.fixture
def output(broker: EventHubsBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Output]:
    monkeypatch.setenv(ENV, broker.connection_string())
    access = Access("connection-string", connection_string_env=ENV)
    settings = EventHubSettings("", broker.eventhub, "$Default", access)
    reach = parts()
    made = Output(HubPublisher(settings, partition_key=SOURCE),
                  Sender(None, Signer(str(tmp_path / "coordinator.key"), SOURCE), "q-{vm_name}", 900),  # type: ignore[arg-type]
                  SOURCE, lambda _term: True, lambda _term: None, lambda *_: None, reach["hub-publish"],
                  reach["queues"])
    made.start()
    yield made
    made.close(5)


def healthz(output: Output) -> tuple[bool, str]:
    """observe.health of a service that has only this output (every part answers)."""
    return observe.health(Health("leader", True, True, "", 0, {}, (), output.unsigned))


def test_a_decision_waits_unpublished_while_the_key_cannot_be_read_and_healthz_says_so(
        broker: EventHubsBroker, output: Output, tmp_path: Path) -> None:
    decision = pause(FleetState(), Policy(), T0, "fleet", "person:ops", "drill")
    done: Future[Any] = Future()
    output.put(Outgoing(decision, 1, None, done))
    ok, line = wait_for(lambda: (said := healthz(output))[1].startswith("degraded") and said, 30,
                        "/healthz to name the key")
    assert ok and "decisions cannot be signed" in line and "coordinator.key cannot be read" in line
    assert not done.done() and decision.id not in {e["id"] for e in on_hub(broker)}

    key = signing.generate_private_key()
    (tmp_path / "coordinator.key").write_bytes(signing.private_key_pem(key))
    event = done.result(30)  # what the API answers a control request with
    assert event["id"] == decision.id and event["keyid"] == signing.keyid(key)
    (published,) = [e for e in on_hub(broker) if e["id"] == decision.id]
    assert published == event
    assert trust.check(published, source=SOURCE, keys=signing.VerifyKeys([key.public_key()])).trusted
    assert healthz(output)[1].startswith("ok: ")
