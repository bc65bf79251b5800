"""The fleet demo's transport keeps the model of the Azure services it stands in for, as the code that
talks to them sees it: the coordinator's own hub reader, publisher, lease and sender, and the agents'
Event Hubs sink and queue client code, run against it here (the Azure paths themselves are tested
against the Event Hubs broker and Azurite elsewhere)."""

from __future__ import annotations

import json
import queue
import time

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.eventhub import EventData

from se_forwarder.approvals.queue.client import create_if_missing
from se_forwarder.demo.transport import DemoTransport
from se_forwarder.demo.transport.hub import LocalHub
from se_forwarder.fleet.coordinator.config import Access, EventHubSettings
from se_forwarder.fleet.coordinator.ha import Lease, ensure_container
from se_forwarder.fleet.coordinator.input import Batch, HubReader, Position, partition_ends
from se_forwarder.fleet.coordinator.output import HubProducer as HubPublisher
from tests.support.waiting import wait_for

HUB = EventHubSettings("local", "scheduled-events", "coordinator", Access())


def send(hub: LocalHub, key: str, *bodies: str) -> None:
    producer = hub.producer()
    batch = producer.create_batch(partition_key=key)
    for body in bodies:
        batch.add(EventData(body))
    producer.send_batch(batch)


def test_one_partition_key_keeps_its_events_in_order_with_sequence_numbers_and_offsets():
    hub = LocalHub(partitions=4)
    send(hub, "vm-a", "one", "two")
    send(hub, "vm-a", "three")
    [pid] = {hub.partition_for("vm-a")}
    events = hub.after(pid, -1, 10, 0)
    assert [e.body for e in events] == [b"one", b"two", b"three"]
    assert [e.sequence_number for e in events] == [0, 1, 2]
    assert [e.offset for e in events] == ["0", "3", "6"]  # byte positions, as strings
    assert hub.properties(pid)["last_enqueued_sequence_number"] == 2
    assert partition_ends(HUB, lambda settings: hub.consumer()) == {
        p: (2 if p == pid else -1) for p in hub.partition_ids}


def test_a_batch_refuses_an_event_that_would_pass_the_message_size_limit():
    batch = LocalHub().producer().create_batch(partition_key="k", max_size_in_bytes=100)
    batch.add(EventData("x" * 50))
    with pytest.raises(ValueError, match="size limit"):
        batch.add(EventData("x" * 60))
    assert len(batch) == 1


def test_the_coordinators_reader_reads_every_partition_from_where_it_was_and_its_publisher_writes():
    hub = LocalHub(partitions=2)
    event = {"specversion": "1.0", "type": "t", "source": "s"}
    send(hub, "vm-a", json.dumps({**event, "id": "a1"}), json.dumps({**event, "id": "a2"}))
    send(hub, "vm-b", json.dumps({**event, "id": "b1"}))
    read_to = {hub.partition_for("vm-a"): Position(0, "0")}  # a1 was folded before
    batches: queue.Queue[Batch] = queue.Queue()
    reader = HubReader(HUB, read_to, batches.put, connect=lambda settings, **_: hub.consumer())
    reader.start()
    try:
        HubPublisher(HUB, "coordinator", lambda settings: hub.producer()).publish(
            [json.dumps({**event, "id": "decision"})])
        got: list[str] = []

        def read() -> bool:
            while not batches.empty():
                got.extend(e["id"] for e, _ in batches.get_nowait().events if e is not None)
            return sorted(got) == ["a2", "b1", "decision"]

        wait_for(read, 10, "every event after where each partition was read up to")
    finally:
        reader.close()


def test_a_received_message_is_hidden_for_its_visibility_timeout_then_received_again_counted():
    queues = DemoTransport("hub", "c").queues
    client = queues.client("se-approvals-web-0")
    with pytest.raises(ResourceNotFoundError):
        client.send_message("to a queue nobody made")
    assert create_if_missing(client) and create_if_missing(client)  # the second finds it there
    client.send_message("approve", time_to_live=60)
    [first] = client.receive_messages(visibility_timeout=1)
    assert (first.content, first.dequeue_count) == ("approve", 1)
    assert client.receive_messages(visibility_timeout=1) == []
    time.sleep(1.1)
    [again] = client.receive_messages(visibility_timeout=30)
    assert (again.id, again.dequeue_count) == (first.id, 2)
    with pytest.raises(ResourceNotFoundError):
        client.delete_message(first)  # its pop receipt is no longer the message's
    client.delete_message(again)
    assert client.get_queue_properties()["approximate_message_count"] == 0


def test_an_update_keeps_a_message_hidden_and_an_expired_message_is_never_received():
    client = DemoTransport("hub", "c").queues.client("q")
    client.create_queue()
    with pytest.raises(ResourceExistsError):
        client.create_queue()
    client.send_message("short", time_to_live=1)
    client.send_message("waits", time_to_live=60)
    short, waits = client.receive_messages(visibility_timeout=0)
    client.update_message(waits, visibility_timeout=5)
    time.sleep(1.1)
    assert [m.content for m in client.receive_messages(visibility_timeout=1)] == []
    assert short.content == "short"


def test_the_coordinators_lease_is_held_by_one_instance_until_it_is_released():
    container = DemoTransport("hub", "se-coordinator").container
    ensure_container(container, "se-coordinator")
    ensure_container(container, "se-coordinator")  # there already: fine
    a = Lease(container, "demo", "a", "http://a", 15)
    b = Lease(container, "demo", "b", "http://b", 15)
    assert not a.try_acquire()  # made the blob first, as against Azure
    assert a.try_acquire() and a.acting()
    assert not b.try_acquire()
    assert b.holder() is not None and b.holder().instance == "a"
    assert a.renew()
    a.give_up(release=True)
    assert b.try_acquire() and b.holder().instance == "b"
    with pytest.raises(HttpResponseError) as refused:
        a.blob.set_blob_metadata({"instance": "a"})  # without the lease b holds
    assert refused.value.status_code == 412


def test_a_partition_keeps_its_last_events_and_says_where_it_begins(monkeypatch):
    from se_forwarder.demo.transport import hub as hub_module

    monkeypatch.setattr(hub_module, "KEEP", 10)
    hub = LocalHub(partitions=1)
    for n in range(25):
        send(hub, "vm-a", f"event {n}")
    props = hub.properties("0")
    assert props["last_enqueued_sequence_number"] == 24
    kept = hub.after("0", -1, 100, 0)
    assert kept[0].sequence_number == props["beginning_sequence_number"] > 0
    assert [e.sequence_number for e in kept] == list(range(kept[0].sequence_number, 25))
    assert [e.body for e in hub.after("0", 21, 100, 0)] == [b"event 22", b"event 23", b"event 24"]
    everything, _ = hub.read_all(0)
    assert [e.sequence_number for e in everything] == [e.sequence_number for e in kept]
