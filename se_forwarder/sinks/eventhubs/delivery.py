"""The eventhubs sink: stored CloudEvents as Event Hubs batches, one partition key per VM.

Events go out as ``send_batch`` calls of up to the link's maximum message size, with partition key
= the event's ``vmid`` extension, so one VM's events stay in order on one partition. The outbox
gives durability and retries, so the SDK's buffered mode and its long retry loops are not used: a
failure comes back at once as an outcome. An event larger than the hub accepts is dead-lettered
with the sizes. With a signer every event is signed as it is sent (``__init__``); the outbox
keeps it unsigned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...errors import one_line
from ...timestamps import rfc3339
from ..base import DeadLetter, Delivered, DeliveryReport, Outcome, Retry, StoredEvent
from .client import HubClient, missing_sdk
from .config import EventHubsOptions

STRUCTURED_CONTENT_TYPE = "application/cloudevents+json"
SEND_TIMEOUT = 30.0  # seconds for one send_batch, including reconnecting


@dataclass
class _Prepared:
    """One outbox event as Event Hubs event data, with its partition key."""

    index: int
    partition_key: str | None
    data: Any  # azure.eventhub.EventData
    dead: DeadLetter | None = None  # set when the stored event cannot be sent at all


class EventHubsSink:
    """Delivers CloudEvents to one Event Hub; see the module docstring."""

    max_batch = 200

    def __init__(self, name: str, options: EventHubsOptions, *,
                 sign: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 producer: Callable[[], Any] | None = None) -> None:
        self.name = name
        self.options = options
        self.mode = options.mode
        self.sign = sign
        self._hub = HubClient(options, producer)

    @property
    def target(self) -> str:
        """``namespace/hub`` for messages (never anything secret)."""
        return self._hub.target

    def deliver(self, batch: Sequence[StoredEvent]) -> DeliveryReport:
        """Send ``batch`` in order; outcomes for the prefix handled (see base.DeliveryReport)."""
        outcomes: list[Outcome] = []
        missing = missing_sdk(self.options.transport)
        if missing:
            return DeliveryReport([Retry(missing)])
        prepared: list[_Prepared] = []
        for index, event in enumerate(batch):
            try:
                prepared.append(self._prepare(index, event))
            except Exception as exc:  # a stored event that is not a CloudEvent never will be
                reason = f"not a valid CloudEvent: {type(exc).__name__}: {one_line(str(exc))}"
                prepared.append(_Prepared(index, None, None, DeadLetter(reason)))
        try:
            with self._hub.lock:
                producer = self._hub.producer()
                for run in _runs(prepared):
                    if run[0].dead is not None:
                        outcomes.append(run[0].dead)
                        continue
                    self._send_run(producer, run, outcomes)
        except Exception as exc:  # every failure becomes an outcome for the next event
            outcomes.append(self._failure(exc))
        return DeliveryReport(outcomes)

    def check(self) -> str | None:
        """Reach the hub (``get_eventhub_properties``); None when fine, else what failed."""
        missing = missing_sdk(self.options.transport)
        if missing:
            return missing
        try:
            with self._hub.lock:
                props = self._hub.producer().get_eventhub_properties()
        except Exception as exc:
            return self._failure(exc).reason
        if props.get("eventhub_name") and props["eventhub_name"] != self.options.eventhub:
            return f"{self.target} answered for hub {props['eventhub_name']!r}"
        if not props.get("partition_ids"):
            return f"Event Hub {self.target} has no partitions"
        return None

    def close(self) -> None:
        self._hub.drop()

    def _failure(self, exc: BaseException) -> Retry:
        return self._hub.failure(exc)

    def _prepare(self, index: int, event: StoredEvent) -> _Prepared:
        from azure.eventhub import EventData

        ce = event.as_dict()
        payload = event.payload
        if self.sign is not None:  # the exact object sent is the one signed
            ce = self.sign(ce)
            payload = json.dumps(ce, separators=(",", ":"), allow_nan=False)
        key = ce.get("vmid") or ce.get("source")
        if self.mode == "structured":
            data = EventData(payload.encode("utf-8"))
            data.content_type = STRUCTURED_CONTENT_TYPE
        else:
            message = to_binary_amqp(payload)
            data = EventData(message.application_data)
            if "content-type" in message.properties:
                data.content_type = message.properties["content-type"]
            data.properties = dict(message.application_properties)
        return _Prepared(index, str(key) if key is not None else None, data)

    def _send_run(self, producer: Any, run: list[_Prepared], outcomes: list[Outcome]) -> None:
        """Send events sharing one partition key in as few batches as the link size allows."""
        key = run[0].partition_key
        current = producer.create_batch(partition_key=key)
        pending: list[_Prepared] = []
        for item in run:
            if _added(current, item, pending):
                continue
            if pending:  # the batch is full: send it, start another
                self._send(producer, current, pending, outcomes)
                current = producer.create_batch(partition_key=key)
                pending = []
                if _added(current, item, pending):
                    continue
            outcomes.append(self._too_large(current, item))
        if pending:
            self._send(producer, current, pending, outcomes)

    def _send(self, producer: Any, batch: Any, items: list[_Prepared], outcomes: list[Outcome]) -> None:
        from azure.eventhub.exceptions import EventDataSendError

        try:
            producer.send_batch(batch, timeout=SEND_TIMEOUT)
        except EventDataSendError as exc:
            if "message-size-exceeded" not in str(exc):
                raise
            # The hub refused the size although the link allowed it: send one by one, and
            # dead-letter what is still refused.
            if len(items) == 1:
                outcomes.append(DeadLetter(self._size_reason(batch.size_in_bytes, batch.max_size_in_bytes)))
                return
            for item in items:
                single = producer.create_batch(partition_key=item.partition_key)
                single.add(item.data)
                self._send(producer, single, [item], outcomes)
            return
        outcomes.extend(Delivered() for _ in items)

    def _too_large(self, empty_batch: Any, item: _Prepared) -> DeadLetter:
        from azure.eventhub import EventDataBatch

        probe = EventDataBatch(max_size_in_bytes=2**31 - 1, partition_key=item.partition_key)
        probe.add(item.data)
        return DeadLetter(self._size_reason(probe.size_in_bytes, empty_batch.max_size_in_bytes))

    def _size_reason(self, size: int, limit: int) -> str:
        return (
            f"event of {size} bytes is larger than Event Hub {self.target} accepts "
            f"({limit} bytes per message)"
        )


def to_binary_amqp(payload: str | bytes) -> Any:
    """CloudEvents AMQP binary form of a structured JSON event (``cloudevents`` SDK binding).

    The binding writes ``time`` as epoch milliseconds, an int azure-eventhub encodes as a 32-bit
    AMQP int and fails on; it is replaced with the RFC 3339 string the binding also reads.
    """
    from cloudevents.core.bindings.amqp import AMQPMessage, to_binary
    from cloudevents.core.formats.json import JSONFormat

    fmt = JSONFormat()
    event = fmt.read(None, payload)
    message = to_binary(event, fmt)
    props = dict(message.application_properties)
    if "cloudEvents_time" in props:
        # The agent's own text when it is one, so both forms carry the same string.
        original = json.loads(payload).get("time")
        moment = event.get_attributes()["time"]
        props["cloudEvents_time"] = original if isinstance(original, str) else (
            rfc3339(moment) if isinstance(moment, datetime) else str(moment))
    return AMQPMessage(message.properties, props, message.application_data)


def _runs(items: list[_Prepared]) -> Iterator[list[_Prepared]]:
    """Consecutive events with the same partition key (a dead letter is a run of its own)."""
    run: list[_Prepared] = []
    for item in items:
        if item.dead is not None:
            if run:
                yield run
                run = []
            yield [item]
            continue
        if run and run[0].partition_key != item.partition_key:
            yield run
            run = []
        run.append(item)
    if run:
        yield run


def _added(batch: Any, item: _Prepared, pending: list[_Prepared]) -> bool:
    """Add ``item`` to ``batch`` (and to ``pending``) if it fits; False when it does not."""
    try:
        batch.add(item.data)
    except ValueError:
        return False
    pending.append(item)
    return True
