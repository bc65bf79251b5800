"""The coordinator's hub reader (hub.py) against a fold that is behind: a full inbox holds the
reader back instead of the backlog piling up decoded in memory, nothing is lost or repeated once
room is made, and a reader closed while it waits for room hands on nothing more.

The reader is the coordinator's own ``HubReader`` with the real azure-eventhub consumer, reading
the Event Hubs broker fixture, into the service's ``Inbox`` (inbox.py) made to hold one batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from se_forwarder.fleet.coordinator.config import Access, EventHubSettings
from se_forwarder.fleet.coordinator.input import Batch, HubReader, Inbox
from tests.eventhubs.broker import EventHubsBroker
from tests.support.waiting import wait_for

ENV = "BACKPRESSURE_TEST_HUB"
EVENTS = 400  # more than the SDK hands on in one batch (hub.MAX_BATCH): several batches


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[EventHubSettings]:
    with EventHubsBroker(partition_count=1) as broker:
        monkeypatch.setenv(ENV, broker.connection_string())
        publish(broker, EVENTS)
        yield EventHubSettings("", broker.eventhub, "$Default",
                               Access("connection-string", connection_string_env=ENV))


def publish(broker: EventHubsBroker, count: int) -> None:
    from azure.eventhub import EventData, EventHubProducerClient

    with EventHubProducerClient.from_connection_string(broker.connection_string()) as producer:
        for start in range(0, count, 100):
            batch = producer.create_batch(partition_id="0")
            for n in range(start, min(start + 100, count)):
                batch.add(EventData(json.dumps({"specversion": "1.0", "type": "t", "source": "s",
                                                "id": f"e{n}"})))
            producer.send_batch(batch)


def ids(batch: Batch) -> list[str]:
    return [event["id"] for event, _ in batch.events if event is not None]


def test_a_full_inbox_holds_the_reader_back_without_an_error_and_every_event_comes_once_in_order(settings):
    inbox = Inbox(batches=1)
    reader = HubReader(settings, {}, inbox.put)
    reader.start()
    try:
        wait_for(lambda: inbox.waiting() == 1, 30, "the first batch in the inbox")
        time.sleep(2)  # time enough to read the rest of the hub, were the reader not held back
        assert inbox.waiting() == 1
        assert reader.read_to["0"] < EVENTS - 1, "the reader went on reading past a full inbox"
        got: list[str] = []

        def drained() -> bool:
            for chunk in inbox.turn(0):
                got.extend(ids(chunk))
            return len(got) >= EVENTS

        wait_for(drained, 30, "every event once room is made")
        assert got == [f"e{n}" for n in range(EVENTS)]
        assert reader.health.errors == [] and reader.reach.failures == 0, "a fold behind is no hub error"
    finally:
        reader.close()


def test_a_reader_closed_while_waiting_for_room_hands_on_nothing_more(settings):
    inbox = Inbox(batches=1)
    reader = HubReader(settings, {}, inbox.put)
    reader.start()
    wait_for(lambda: inbox.waiting() == 1, 30, "the first batch in the inbox")
    time.sleep(0.5)  # the partition's thread now waits for room with the next batch
    reader.close()
    first = [ident for chunk in inbox.turn(0) for ident in ids(chunk)]
    time.sleep(1)  # a thread still waiting would put its batch now that there is room
    assert inbox.waiting() == 0, "a closed reader handed on a batch"
    assert first[0] == "e0"
