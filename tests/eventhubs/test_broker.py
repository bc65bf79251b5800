"""The local Event Hubs broker works with the unmodified azure-eventhub client.

These tests pin down the fixture the sink and fleet tests rely on: sending (batches, partition keys,
explicit partitions), management reads, consuming from offsets and sequence numbers, outages with a
restart on the same port, authentication, server-busy rejections, and clean shutdown.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from proton import Data, Described, symbol, ulong

from tests.support.waiting import wait_for

from .broker import FIELD_COUNTS, EventHubsBroker, pad_frame
from .helpers import FAST_RETRY, consume


def _producer(broker: EventHubsBroker, **kwargs):
    from azure.eventhub import EventHubProducerClient

    return EventHubProducerClient.from_connection_string(broker.connection_string(**kwargs), **FAST_RETRY)


def _send(producer, bodies: list[str], **batch_kwargs) -> None:
    from azure.eventhub import EventData

    batch = producer.create_batch(**batch_kwargs)
    for body in bodies:
        batch.add(EventData(body))
    producer.send_batch(batch)


# -- the relay's re-padding ---------------------------------------------------------------------


def _frame(body: bytes) -> bytes:
    return (8 + len(body)).to_bytes(4, "big") + b"\x02\x00\x00\x00" + body


def test_relay_pads_a_truncated_attach_and_its_nested_error_to_full_field_count():
    from azure.eventhub._pyamqp._decode import decode_frame

    error = Described(ulong(0x1D), [symbol("amqp:not-found")])  # condition only, as Proton sends
    data = Data()
    data.put_object(Described(ulong(0x16), [0, True, error]))  # detach(handle, closed, error)
    padded = pad_frame(_frame(data.encode()))
    code, fields = decode_frame(memoryview(padded)[8:])
    assert code == 0x16
    assert len(fields) == FIELD_COUNTS[0x16]
    assert fields[2] == [b"amqp:not-found", None, None]


def test_relay_keeps_a_transfer_payload_after_the_padded_performative():
    from azure.eventhub._pyamqp._decode import decode_frame

    data = Data()
    data.put_object(Described(ulong(0x14), [0, 7, b"tag"]))  # transfer(handle, id, tag)
    padded = pad_frame(_frame(data.encode() + b"PAYLOAD"))
    code, fields = decode_frame(memoryview(padded)[8:])
    assert code == 0x14
    assert len(fields) == FIELD_COUNTS[0x14] + 1  # the SDK appends the payload as field 11
    assert fields[1] == 7
    assert bytes(fields[11]) == b"PAYLOAD"


def test_heartbeat_frames_pass_the_relay_unchanged():
    heartbeat = b"\x00\x00\x00\x08\x02\x00\x00\x00"
    assert pad_frame(heartbeat) == heartbeat


# -- the SDK against the broker -----------------------------------------------------------------


def test_hub_properties_list_the_partitions(eventhubs_broker):
    with _producer(eventhubs_broker) as producer:
        props = producer.get_eventhub_properties()
    assert props["eventhub_name"] == "scheduled-events"
    assert props["partition_ids"] == ["0", "1", "2", "3"]


def test_partition_properties_follow_what_was_sent(eventhubs_broker):
    with _producer(eventhubs_broker) as producer:
        empty = producer.get_partition_properties("1")
        _send(producer, ["a", "b", "c"], partition_id="1")
        filled = producer.get_partition_properties("1")
    assert empty["is_empty"] is True
    assert filled["is_empty"] is False
    assert filled["beginning_sequence_number"] == 0
    assert filled["last_enqueued_sequence_number"] == 2
    assert filled["last_enqueued_offset"] == str(eventhubs_broker.messages(1)[-1].offset)


def test_expired_events_are_gone_for_consumers_and_the_properties_say_where_the_partition_begins(
        eventhubs_broker):
    with _producer(eventhubs_broker) as producer:
        _send(producer, ["r0", "r1", "r2", "r3"], partition_id="3")
        eventhubs_broker.expire(3, 2)
        props = producer.get_partition_properties("3")
    assert (props["beginning_sequence_number"], props["last_enqueued_sequence_number"]) == (2, 3)
    got = consume(eventhubs_broker.connection_string(), 2, partition_id="3", starting_position=0)
    assert [r.body for r in got] == [b"r2", b"r3"]  # asked from 0: it starts where retention begins


def test_stalled_deliveries_keep_events_from_consumers_until_resumed(eventhubs_broker):
    with _producer(eventhubs_broker) as producer:
        _send(producer, ["t0"], partition_id="1")
        eventhubs_broker.stall_deliveries()
        _send(producer, ["t1", "t2"], partition_id="1")
        assert producer.get_partition_properties("1")["last_enqueued_sequence_number"] == 2
    try:
        got = consume(eventhubs_broker.connection_string(), 1, partition_id="1", timeout=2)
        assert got == []
    finally:
        eventhubs_broker.resume_deliveries()
    got = consume(eventhubs_broker.connection_string(), 3, partition_id="1")
    assert [r.body for r in got] == [b"t0", b"t1", b"t2"]


def test_batch_with_partition_key_lands_on_one_partition_in_order(eventhubs_broker):
    bodies = [f"event-{i}" for i in range(5)]
    with _producer(eventhubs_broker) as producer:
        _send(producer, bodies, partition_key="vm-1234")
    partition = eventhubs_broker.store.partition_for_key("vm-1234")
    got = consume(eventhubs_broker.connection_string(), 5, partition_id=str(partition))
    assert [r.body.decode() for r in got] == bodies
    assert [r.sequence_number for r in got] == [0, 1, 2, 3, 4]
    assert {r.partition_key for r in got} == {b"vm-1234"}
    assert all(int(a.offset) < int(b.offset) for a, b in zip(got, got[1:], strict=False))


def test_partition_keys_spread_events_over_partitions_stably(eventhubs_broker):
    keys = [f"vm-{i}" for i in range(12)]
    with _producer(eventhubs_broker) as producer:
        for key in keys + keys:
            _send(producer, [key], partition_key=key)
    used = set()
    for partition in eventhubs_broker.partition_ids:
        for stored in eventhubs_broker.messages(partition):
            assert stored.partition_key == stored.message().body.decode()
            assert eventhubs_broker.store.partition_for_key(stored.partition_key) == int(partition)
            used.add(partition)
    assert len(used) > 1
    assert eventhubs_broker.received_count == 2 * len(keys)


def test_consumer_starts_after_a_sequence_number(eventhubs_broker):
    with _producer(eventhubs_broker) as producer:
        _send(producer, ["s0", "s1", "s2", "s3"], partition_id="2")
    got = consume(eventhubs_broker.connection_string(), 2, partition_id="2", starting_position=1)
    assert [r.body for r in got] == [b"s2", b"s3"]


def test_consumer_starts_at_an_offset_inclusive(eventhubs_broker):
    with _producer(eventhubs_broker) as producer:
        _send(producer, ["o0", "o1", "o2"], partition_id="0")
    offset = str(eventhubs_broker.messages(0)[1].offset)
    got = consume(
        eventhubs_broker.connection_string(),
        2,
        partition_id="0",
        starting_position=offset,
        inclusive=True,
    )
    assert [r.body for r in got] == [b"o1", b"o2"]


def test_consumer_at_latest_sees_only_new_events(eventhubs_broker):
    from azure.eventhub import EventHubConsumerClient

    with _producer(eventhubs_broker) as producer:
        _send(producer, ["old"], partition_id="3")
        client = EventHubConsumerClient.from_connection_string(
            eventhubs_broker.connection_string(), consumer_group="$Default", **FAST_RETRY
        )
        seen: list[bytes] = []
        first = threading.Event()

        def on_event(_ctx, event):
            if event is not None:
                seen.append(b"".join(event.body))
                first.set()

        worker = threading.Thread(
            target=client.receive,
            kwargs={"on_event": on_event, "partition_id": "3", "starting_position": "@latest"},
            daemon=True,
        )
        worker.start()
        assert wait_for(lambda: eventhubs_broker.consumers_attached(3) == 1, timeout=10)
        _send(producer, ["new"], partition_id="3")
        assert first.wait(10)
        client.close()
        worker.join(10)
    assert seen == [b"new"]


def test_stopped_broker_refuses_and_restart_keeps_events_on_the_same_port(eventhubs_broker):
    from azure.eventhub.exceptions import ConnectError

    port = eventhubs_broker.port
    with _producer(eventhubs_broker) as producer:
        _send(producer, ["before"], partition_id="0")
        eventhubs_broker.stop()
        started = time.monotonic()
        with pytest.raises(ConnectError):
            _send(producer, ["during"], partition_id="0")
        assert time.monotonic() - started < 5
        eventhubs_broker.start()
        _send(producer, ["after"], partition_id="0")  # the same producer reconnects
    assert eventhubs_broker.port == port
    assert [m.message().body for m in eventhubs_broker.messages(0)] == [b"before", b"after"]


def test_wrong_key_is_refused_by_cbs(eventhubs_broker):
    from azure.eventhub.exceptions import AuthenticationError

    with (
        _producer(eventhubs_broker, key="bm90LXRoZS1rZXk=") as producer,
        pytest.raises(AuthenticationError, match="401"),
    ):
        producer.get_eventhub_properties()


def test_server_busy_rejection_reaches_the_client_as_an_error(eventhubs_broker):
    from azure.eventhub.exceptions import EventHubError

    eventhubs_broker.fail_next_sends(2)  # more than the client's one retry
    with _producer(eventhubs_broker) as producer:
        with pytest.raises(EventHubError, match="server-busy|busy"):
            _send(producer, ["busy"], partition_id="0")
        _send(producer, ["fine"], partition_id="0")
    assert [m.message().body for m in eventhubs_broker.messages(0)] == [b"fine"]


def test_link_limit_bounds_the_clients_batches(small_broker):
    from azure.eventhub import EventData

    with _producer(small_broker) as producer:
        batch = producer.create_batch()
        assert batch.max_size_in_bytes == 4096
        with pytest.raises(ValueError):
            batch.add(EventData("x" * 5000))


def test_stored_events_carry_event_hubs_annotations(eventhubs_broker):
    with _producer(eventhubs_broker) as producer:
        _send(producer, ["a"], partition_key="vm-a")
    (stored,) = list(eventhubs_broker.all_messages())
    annotations = stored.message().annotations
    assert annotations[symbol("x-opt-partition-key")] == "vm-a"
    assert annotations[symbol("x-opt-sequence-number")] == 0
    assert annotations[symbol("x-opt-offset")] == "0"
    assert abs(annotations[symbol("x-opt-enqueued-time")] / 1000 - time.time()) < 60


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_start_stop_cycles_leave_no_threads_or_descriptors():
    broker = EventHubsBroker()
    threads_before = set(threading.enumerate())
    fds_before = _open_fds()
    for _ in range(3):
        broker.start()
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as client:
            client.sendall(b"AMQP\x00\x01\x00\x00")  # through the relay to Proton and back
            assert client.recv(8) == b"AMQP\x00\x01\x00\x00"
        broker.stop()
    assert not broker.running
    assert set(threading.enumerate()) - threads_before == set()
    assert wait_for(lambda: _open_fds() <= fds_before, timeout=3), _open_fds() - fds_before
