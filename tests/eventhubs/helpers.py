"""Helpers for Event Hubs tests: read events back with the real ``EventHubConsumerClient``."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .broker import EventHubsBroker

# Small retry settings: with the SDK defaults a down broker takes 12-24 s per call to fail.
FAST_RETRY: dict[str, Any] = {"retry_total": 1, "retry_backoff_factor": 0.1}


@dataclass
class Received:
    """One event as a real consumer saw it."""

    partition_id: str
    sequence_number: int
    offset: str
    partition_key: bytes | None
    body: bytes
    content_type: str | None
    properties: dict
    event: Any  # the azure.eventhub.EventData


def consume(
    connection_string: str,
    count: int,
    *,
    partition_id: str | None = None,
    partition_ids: list[str] | None = None,
    starting_position: Any = "-1",
    inclusive: bool = False,
    timeout: float = 20.0,
    consumer_group: str = "$Default",
) -> list[Received]:
    """Receive until ``count`` events arrived (or ``timeout``), then close the clients.

    Reads one partition when ``partition_id`` is given, else ``partition_ids`` (default: asked from
    the hub), each with its own
    client in parallel (faster than the SDK's load balancer claiming them one by one). Returns what
    arrived, in arrival order.
    """
    from azure.eventhub import EventHubConsumerClient

    def new_client() -> Any:
        return EventHubConsumerClient.from_connection_string(
            connection_string, consumer_group=consumer_group, **FAST_RETRY
        )

    if partition_id is not None:
        partitions = [partition_id]
    elif partition_ids is not None:
        partitions = list(partition_ids)
    else:
        with new_client() as probe:
            partitions = probe.get_partition_ids()
    got: list[Received] = []
    lock = threading.Lock()
    done = threading.Event()

    def on_event(context: Any, event: Any) -> None:
        if event is None:
            return
        with lock:
            got.append(
                Received(
                    partition_id=context.partition_id,
                    sequence_number=event.sequence_number,
                    offset=event.offset,
                    partition_key=event.partition_key,
                    body=event.body if isinstance(event.body, bytes) else b"".join(event.body),
                    content_type=event.content_type,
                    properties=dict(event.properties or {}),
                    event=event,
                )
            )
            if len(got) >= count:
                done.set()

    clients = [new_client() for _ in partitions]
    workers = []
    for client, pid in zip(clients, partitions, strict=True):
        kwargs: dict[str, Any] = {
            "on_event": on_event,
            "partition_id": pid,
            "starting_position": starting_position,
            "starting_position_inclusive": inclusive,
            "max_wait_time": 0.1,
        }
        worker = threading.Thread(
            target=client.receive, kwargs=kwargs, name=f"test-consumer-{pid}", daemon=True
        )
        worker.start()
        workers.append(worker)
    done.wait(timeout)
    closers = [threading.Thread(target=client.close, daemon=True) for client in clients]
    for closer in closers:
        closer.start()
    for thread in closers + workers:
        thread.join(timeout=10)
    with lock:
        return list(got)


ARM_PREFIX = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines"


def cloud_event(
    vmid: str,
    event_id: str,
    state: str = "scheduled",
    *,
    incarnation: int = 1,
    event_type: str = "Freeze",
    extra_data: dict | None = None,
) -> dict:
    """A CloudEvent as the agent emits it (design.md schema), as a dict."""
    status = {"scheduled": "Scheduled", "started": "Started"}.get(state, "Scheduled")
    data = {
        "EventId": event_id,
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": [f"vm-{vmid[-6:]}"],
        "EventStatus": status,
        "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": 9,
        "NotBeforeUtc": "2016-09-19T18:29:47Z",
        "DocumentIncarnation": incarnation,
        "AffectsThisVm": True,
        "Vm": {"vmId": vmid, "name": f"vm-{vmid[-6:]}"},
    }
    data.update(extra_data or {})
    return {
        "specversion": "1.0",
        "type": f"com.azure.scheduledevents.{state}",
        "source": f"{ARM_PREFIX}/vm-{vmid[-6:]}",
        "id": f"{event_id}/{state}",
        "subject": event_id,
        "time": "2024-05-01T10:00:00.123Z",
        "datacontenttype": "application/json",
        "eventtype": event_type,
        "eventstatus": status,
        "incarnation": incarnation,
        "vmid": vmid,
        "data": data,
    }


def stored(seq: int, event: dict) -> Any:
    """The outbox row for ``event`` (payload = its structured JSON text)."""
    import json

    from se_forwarder.sinks.base import StoredEvent

    return StoredEvent(
        seq=seq,
        ce_id=event["id"],
        event_id=event["subject"],
        state=event["type"].rsplit(".", 1)[-1],
        ce_type=event["type"],
        payload=json.dumps(event, separators=(",", ":")),
        observed_at=time.time(),
    )


def parse_received(received: Received) -> Any:
    """The CloudEvent in an Event Hubs event, structured or binary (``cloudevents`` SDK)."""
    from cloudevents.core.bindings.amqp import AMQPMessage, from_amqp
    from cloudevents.core.formats.json import JSONFormat

    def text(value: Any) -> Any:
        return value.decode("utf-8") if isinstance(value, bytes) else value

    props = {text(k): text(v) for k, v in received.properties.items()}
    message = AMQPMessage(
        properties={"content-type": received.content_type} if received.content_type else {},
        application_properties=props,
        application_data=received.body,
    )
    return from_amqp(message, JSONFormat())


def stored_types_and_ids(broker: EventHubsBroker) -> list[tuple[str, str]]:
    """(type, id) of each CloudEvent the broker stored, structured (JSON body) or binary, read from
    the broker's own store (no consumer needed)."""
    out = []
    for stored in broker.all_messages():
        message = stored.message()
        props = message.properties or {}
        if "cloudEvents_id" in props:
            out.append((props["cloudEvents_type"], props["cloudEvents_id"]))
        else:
            event = json.loads(message.body)
            out.append((event["type"], event["id"]))
    return out
