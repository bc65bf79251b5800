"""The Event Hub at both ends: every partition read into the fold, and decisions published back.

``HubReader`` reads ALL partitions with one ``EventHubConsumerClient`` in the coordinator's own
consumer group, from given sequence numbers (or the start of retention), without a shared
checkpoint store: every instance reads everything into its own fold, and no two instances split
the partitions between them. Its position lives in the coordinator's snapshot blob, written with
the fold it belongs to (snapshots.py); the SDK's in-memory checkpoint only lets a partition that
failed resume where it was. Each received event is decoded to a structured CloudEvent dict (or
None: not a CloudEvent) on the SDK's thread and handed on as a ``Batch``.

``HubPublisher`` publishes decisions as structured-mode CloudEvents (``application/cloudevents+json``,
the form AMQP and Kafka consumers read alike) in as few ``send_batch`` calls as fit, with a timeout:
the lease margin counts on a publish that either lands within it or fails (lease.py).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...sinks.eventhubs import one_line, scrub
from ..tail import cloud_event_of
from .access import consumer, producer
from .service_config import EventHubSettings

log = logging.getLogger("se_forwarder.coordinator.hub")

CONTENT_TYPE = "application/cloudevents+json"
PUBLISH_TIMEOUT = 5.0  # seconds for one send_batch; lease.MARGIN is larger
MAX_BATCH = 300


@dataclass(frozen=True)
class Position:
    """Where a partition was read up to: the last event folded."""

    sequence: int
    offset: str

    def as_data(self) -> dict[str, Any]:
        return {"sequence": self.sequence, "offset": self.offset}


@dataclass
class Batch:
    """Events of one partition, in order, as received (``arrived``: monotonic time of receipt)."""

    partition: str
    events: list[tuple[dict[str, Any] | None, Position]]
    arrived: float


@dataclass
class ReaderHealth:
    last_batch: float | None = None  # monotonic
    errors: list[str] = field(default_factory=list)
    last_error_at: float | None = None


def decode(event_data: Any) -> dict[str, Any] | None:
    """The structured CloudEvent in ``event_data``; the fast path parses the JSON body directly."""
    props = event_data.properties or {}
    if not any((k.decode() if isinstance(k, bytes) else k) == "cloudEvents_id" for k in props):
        try:
            body = event_data.body
            text = body if isinstance(body, bytes | bytearray) else b"".join(body)
            if text[:1] == b"{":
                parsed = json.loads(text)
                if isinstance(parsed, dict) and "specversion" in parsed:
                    return parsed
        except (ValueError, TypeError):
            return None
    return cloud_event_of(event_data)


class HubReader:
    """Reads every partition from ``start`` (partition -> Position; others from the beginning)."""

    def __init__(self, settings: EventHubSettings, start: dict[str, Position],
                 deliver: Callable[[Batch], None]) -> None:
        self.settings = settings
        self.start_at = dict(start)
        self.deliver = deliver
        self.health = ReaderHealth()
        self._client: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._client = consumer(self.settings, load_balancing_interval=2.0)
        position: dict[str, Any] = {pid: pos.sequence for pid, pos in self.start_at.items()}
        default = "-1"  # the start of retention for a partition without a position
        try:
            for pid in self._client.get_partition_ids():
                position.setdefault(pid, default)
        except Exception as exc:  # noqa: BLE001 - the receive loop retries; say it once here
            self._error(None, exc)
        self._thread = threading.Thread(
            target=self._client.receive_batch, name="coordinator-hub-reader", daemon=True,
            kwargs={"on_event_batch": self._on_batch, "on_error": self._error, "max_batch_size": MAX_BATCH,
                    "max_wait_time": None, "starting_position": position or default,
                    "starting_position_inclusive": False, "prefetch": 1000})
        self._thread.start()

    def _on_batch(self, context: Any, events: list[Any]) -> None:
        if not events:
            return
        arrived = time.monotonic()
        batch = Batch(context.partition_id,
                      [(decode(e), Position(e.sequence_number, str(e.offset))) for e in events], arrived)
        self.health.last_batch = arrived
        self.deliver(batch)
        try:
            context.update_checkpoint(events[-1])  # in memory: where a failed partition resumes
        except Exception as exc:  # noqa: BLE001 - only the resume point of a retry is at stake
            log.debug("in-memory checkpoint failed: %s", exc)

    def _error(self, context: Any, error: Exception) -> None:
        where = f"partition {context.partition_id}" if context is not None else "the Event Hub"
        text = f"reading {where}: {type(error).__name__}: {scrub(one_line(str(error)))}"
        self.health.errors = (self.health.errors + [text])[-20:]
        self.health.last_error_at = time.monotonic()
        log.warning("%s", text)

    def close(self) -> None:
        if self._client is not None:
            closer = threading.Thread(target=self._client.close, daemon=True)
            closer.start()
            closer.join(10)
        if self._thread is not None:
            self._thread.join(10)


def partition_ends(settings: EventHubSettings) -> dict[str, int]:
    """The last enqueued sequence number of every partition now (-1: empty). Raises on failure."""
    client = consumer(settings)
    try:
        return {pid: int(client.get_partition_properties(pid)["last_enqueued_sequence_number"])
                for pid in client.get_partition_ids()}
    finally:
        client.close()


class HubPublisher:
    """Publishes decision CloudEvents (JSON texts); one producer for the service's life."""

    def __init__(self, settings: EventHubSettings) -> None:
        self.settings = settings
        self._producer: Any = None

    def publish(self, texts: Sequence[str]) -> None:
        """Publish every text, in order, or raise ``PublishError`` (nothing is retried here)."""
        from azure.eventhub import EventData
        from azure.eventhub.exceptions import EventHubError

        try:
            if self._producer is None:
                self._producer = producer(self.settings)
            batch = self._producer.create_batch()
            for text in texts:
                data = EventData(text)
                data.content_type = CONTENT_TYPE
                try:
                    batch.add(data)
                except ValueError:  # full: send what we have, start another
                    self._producer.send_batch(batch, timeout=PUBLISH_TIMEOUT)
                    batch = self._producer.create_batch()
                    batch.add(data)
            if len(batch):
                self._producer.send_batch(batch, timeout=PUBLISH_TIMEOUT)
        except (EventHubError, OSError, ValueError) as exc:
            self.drop()
            raise PublishError(f"publishing to {self.settings.eventhub}: {scrub(one_line(str(exc)))}") \
                from None

    def drop(self) -> None:
        producer_, self._producer = self._producer, None
        if producer_ is not None:
            try:
                producer_.close()
            except Exception as exc:  # noqa: BLE001 - closing a broken client must not hide the failure
                log.debug("closing the producer failed: %s", exc)


class PublishError(Exception):
    """Decisions could not be published; one line, no secret."""
