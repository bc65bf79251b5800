"""Azure's Event Grid feed as the simulator publishes it to an Event Hub (the local broker), read
back with the real ``azure-eventhub`` consumer: one ``ScheduledEventEmitted`` CloudEvent per
message, for every status change through Completed and Canceled; delayed or dropped on request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.event_grid import EVENT_TYPE, WRITE_TYPE
from tests.eventhubs.broker import EventHubsBroker
from tests.eventhubs.helpers import consume

STATUSES = ("Scheduled", "Started", "Completed", "Canceled")


@pytest.fixture(scope="module")
def broker() -> Iterator[EventHubsBroker]:
    with EventHubsBroker(eventhub="azure-feed", partition_count=2) as hub:
        yield hub


@pytest.fixture
def feed(broker: EventHubsBroker) -> Iterator[SimulatorServer]:
    options = AzureOptions(feed_connection_string=broker.connection_string())
    with SimulatorServer(vm_names=("vm0", "vm1"), azure=options) as server:
        yield server


def _received(broker: EventHubsBroker, count: int, **kwargs: Any) -> list[dict[str, Any]]:
    got = consume(broker.connection_string(), count, timeout=15, **kwargs)
    events = []
    for message in got:
        body = json.loads(message.body)
        assert isinstance(body, list) and len(body) == 1, "one CloudEvent per message, in an array"
        assert message.content_type == "application/cloudevents+json; charset=utf-8"
        events.append(body[0])
    # Event Grid does not promise order (partitions): order by time, then by the life cycle
    return sorted(
        events,
        key=lambda e: (e["time"], STATUSES.index(e["data"]["resourceInfo"]["properties"]["EventStatus"])),
    )


def _history(events: list[dict[str, Any]], event_id: str) -> list[str]:
    return [
        e["data"]["resourceInfo"]["properties"]["EventStatus"]
        for e in events
        if e["data"]["resourceInfo"]["name"] == event_id
    ]


def _wait_published(server: SimulatorServer, count: int) -> None:
    assert server.azure is not None
    assert server.sim.wait_until(lambda: server.azure.feed.settings()["published"] >= count, timeout=15)


def test_each_change_is_a_scheduled_event_emitted_cloudevent_in_the_documented_schema(broker, feed):
    before = sum(1 for _ in broker.all_messages())
    event = feed.sim.add_event({"EventType": "Freeze", "Resources": ["vm1"], "DurationInSeconds": 9})
    feed.sim.approve([event["EventId"]], vm="vm1")
    feed.sim.delete_event(event["EventId"])
    _wait_published(feed, 3)
    events = [
        e for e in _received(broker, before + 3) if e["data"]["resourceInfo"]["name"] == event["EventId"]
    ]
    assert _history(events, event["EventId"]) == ["Scheduled", "Started", "Completed"]
    first = events[0]
    assert set(first) == {"specversion", "id", "source", "subject", "type", "time", "data"}
    assert (first["specversion"], first["type"]) == ("1.0", EVENT_TYPE)
    assert first["source"] == f"/subscriptions/{feed.azure.fleet.subscription}"
    info = first["data"]["resourceInfo"]
    assert first["subject"] == info["id"]
    assert info["id"].endswith(
        f"/virtualMachines/vm1/providers/Microsoft.Maintenance/scheduledevents/{event['EventId']}"
    )
    assert (info["name"], info["type"]) == (event["EventId"], "microsoft.maintenance/scheduledevents")
    assert set(first["data"]) == {"resourceInfo", "operationalInfo", "apiVersion"}
    assert info["properties"] == {
        "DurationInSeconds": 9,
        "Description": event["Description"],
        "EventId": event["EventId"],
        "EventSource": "Platform",
        "EventStatus": "Scheduled",
        "EventType": "Freeze",
        "NotBefore": event["NotBefore"],
        "Resources": ["vm1"],
        "ResourceType": "VirtualMachine",
    }
    assert len({e["id"] for e in events}) == 3


def test_an_event_removed_while_scheduled_ends_canceled_on_the_feed(broker, feed):
    before = sum(1 for _ in broker.all_messages())
    event = feed.sim.add_event({"Resources": ["vm0"]})
    feed.sim.delete_event(event["EventId"])
    _wait_published(feed, 2)
    assert _history(_received(broker, before + 2), event["EventId"]) == ["Scheduled", "Canceled"]


def test_a_dropped_event_never_reaches_the_hub_and_resource_graph_still_has_it(broker, feed):
    before = sum(1 for _ in broker.all_messages())
    feed.azure.feed.update({"drop_next": 1})
    event = feed.sim.add_event({"Resources": ["vm0"]})
    feed.sim.approve([event["EventId"]], vm="vm0")
    _wait_published(feed, 1)
    assert _history(_received(broker, before + 1), event["EventId"]) == ["Started"]
    assert feed.azure.feed.settings()["dropped"] == 1
    assert feed.azure.ledger.get(event["EventId"]).status == "Started"


def test_a_delayed_event_arrives_after_one_published_later_without_delay(broker, feed):
    before = sum(1 for _ in broker.all_messages())
    feed.azure.feed.update({"delay_seconds": 2})
    late = feed.sim.add_event({"Resources": ["vm0"]})
    feed.azure.feed.update({"delay_seconds": 0})
    early = feed.sim.add_event({"Resources": ["vm1"]})
    _wait_published(feed, 2)
    arrived = [m for m in consume(broker.connection_string(), before + 2, timeout=15)]
    order = [json.loads(m.body)[0]["data"]["resourceInfo"]["name"] for m in arrived]
    enqueued = {name: m.event.enqueued_time for name, m in zip(order, arrived, strict=True)}
    assert enqueued[early["EventId"]] < enqueued[late["EventId"]]


def test_the_feed_can_use_the_field_tables_spelling_of_the_type(broker):
    options = AzureOptions(feed_connection_string=broker.connection_string(), feed_event_type=WRITE_TYPE)
    with SimulatorServer(vm_names=("vm0",), azure=options) as server:
        before = sum(1 for _ in broker.all_messages())
        event = server.sim.add_event({"Resources": ["vm0"]})
        _wait_published(server, 1)
        received = _received(broker, before + 1)
    events = [e for e in received if e["data"]["resourceInfo"]["name"] == event["EventId"]]
    assert [e["type"] for e in events] == ["microsoft.maintenance/scheduledevents/write"]
    assert events[0]["data"]["resourceInfo"]["type"] == "microsoft.maintenance/scheduledevents"


def test_the_feed_can_send_the_bare_cloudevent_object(broker, feed):
    before = sum(1 for _ in broker.all_messages())
    feed.azure.feed.update({"body": "object"})
    event = feed.sim.add_event({"Resources": ["vm0"]})
    _wait_published(feed, 1)
    bodies = [json.loads(m.body) for m in consume(broker.connection_string(), before + 1, timeout=15)]
    [mine] = [
        b for b in bodies if isinstance(b, dict) and b["data"]["resourceInfo"]["name"] == event["EventId"]
    ]
    assert mine["type"] == EVENT_TYPE


def test_without_a_hub_the_feed_is_kept_for_the_control_api():
    import requests

    with SimulatorServer(vm_names=("vm0",), azure=AzureOptions()) as server:
        event = server.sim.add_event({})
        server.sim.delete_event(event["EventId"])
        kept = requests.get(f"{server.url}/control/feed/events", timeout=5).json()
        settings = requests.post(f"{server.url}/control/feed", json={"drop": True}, timeout=5).json()
    assert [e["data"]["resourceInfo"]["properties"]["EventStatus"] for e in kept] == ["Scheduled", "Canceled"]
    assert (settings["hub"], settings["drop"]) == (False, True)


def test_a_bad_feed_setting_is_a_400_naming_it():
    import requests

    with SimulatorServer(vm_names=("vm0",), azure=AzureOptions()) as server:
        answer = requests.post(f"{server.url}/control/feed", json={"delay_seconds": -1}, timeout=5)
    assert answer.status_code == 400 and "delay_seconds" in answer.json()["error"]


def test_the_type_spelling_is_switched_through_the_control_api_for_later_events():
    import requests

    with SimulatorServer(vm_names=("vm0",), azure=AzureOptions()) as server:
        server.sim.add_event({})
        switched = requests.post(f"{server.url}/control/feed", json={"event_type": WRITE_TYPE}, timeout=5)
        server.sim.add_event({})
        back = requests.post(f"{server.url}/control/feed", json={"event_type": EVENT_TYPE}, timeout=5)
        server.sim.add_event({})
        kept = requests.get(f"{server.url}/control/feed/events", timeout=5).json()
        bad = requests.post(f"{server.url}/control/feed", json={"event_type": "ScheduledEventEmitted"},
                            timeout=5)
    assert (switched.json()["event_type"], back.json()["event_type"]) == (WRITE_TYPE, EVENT_TYPE)
    assert [e["type"] for e in kept] == [EVENT_TYPE, WRITE_TYPE, EVENT_TYPE]
    assert bad.status_code == 400 and "event_type must be one of" in bad.json()["error"]
