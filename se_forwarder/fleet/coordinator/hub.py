"""The Event Hub at both ends: every partition read into the fold, and decisions published back.

``HubReader`` reads ALL partitions in the coordinator's own consumer group, from given sequence
numbers (or the start of retention), without the SDK's shared checkpoint store: every instance
reads everything into its own fold, and no two instances split the partitions between them. Its
checkpoint is the snapshot blob (blobs.py): the partition positions written together with the
fold they belong to, since a position alone says where to resume but not what was known. The
SDK's in-memory checkpoint only lets a partition that failed resume where it was. Each received
event is decoded to a structured CloudEvent dict (or None: not a CloudEvent) on the SDK's thread
and handed on as a ``Batch``.

``HubPublisher`` publishes decisions as structured-mode CloudEvents (``application/cloudevents+json``,
the form AMQP and Kafka consumers read alike) in as few ``send_batch`` calls as fit, with a timeout:
the lease margin counts on a publish that either lands within it or fails (blobs.py). They all
carry one partition key (the coordinator's source), so they land in one partition in the order
they were made, and every instance reads them in that order (switches.py counts on it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import one_line
from ...sinks.azure_common import scrub
from ..tail import cloud_event_of
from .access import consumer, producer
from .service_config import EventHubSettings

log = logging.getLogger("se_forwarder.coordinator.hub")

CONTENT_TYPE = "application/cloudevents+json"
PUBLISH_TIMEOUT = 5.0  # seconds for one send_batch; lease.MARGIN is larger
MAX_BATCH = 300
# The SDK hands events on once it has read PREFETCH frames or its socket was idle SOCKET_TIMEOUT s.
# Under a steady trickle (a fleet's heartbeats: gaps shorter than the SDK's default 0.2 s) only the
# frame count ends a read, so these two bound the time an event waits in the SDK before the fold.
PREFETCH = 50
SOCKET_TIMEOUT = 0.05


@dataclass(frozen=True)
class Position:
    """Where a partition was read up to: the last event folded (``enqueued``: when the hub took it,
    epoch seconds, for the fold's limits; not part of a saved position)."""

    sequence: int
    offset: str
    enqueued: float | None = field(default=None, compare=False)

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
    """The structured CloudEvent in ``event_data`` (a JSON object, or an array of one as Event Grid
    delivers); the fast path parses the JSON body directly."""
    props = event_data.properties or {}
    if not any((k.decode() if isinstance(k, bytes) else k) == "cloudEvents_id" for k in props):
        try:
            body = event_data.body
            text = body if isinstance(body, bytes | bytearray) else b"".join(body)
            if text[:1] in (b"{", b"["):
                parsed = json.loads(text)
                if isinstance(parsed, list) and len(parsed) == 1:  # Event Grid's delivery: [CloudEvent]
                    parsed = parsed[0]
                if isinstance(parsed, dict) and "specversion" in parsed:
                    return parsed
        except (ValueError, TypeError):
            return None
    return cloud_event_of(event_data)


class HubReader:
    """Reads every partition from ``start`` (partition -> Position; others from the beginning).

    One ``EventHubConsumerClient`` per partition, each receiving on its own thread: the SDK's own
    all-partitions loop visits the partitions in turn and waits up to its socket timeout on each
    idle one, which would add up to ``timeout x partitions`` to every decision's latency.
    """

    def __init__(self, settings: EventHubSettings, start: dict[str, Position],
                 deliver: Callable[[Batch], None]) -> None:
        self.settings = settings
        self.start_at = dict(start)
        self.deliver = deliver
        self.health = ReaderHealth()
        self._clients: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._starter: threading.Thread | None = None

    def start(self) -> None:
        self._starter = threading.Thread(target=self._start_partitions, name="coordinator-hub-start",
                                         daemon=True)
        self._starter.start()

    def _start_partitions(self) -> None:
        delay = 1.0
        while not self._closing.is_set():
            probe = None
            try:
                probe = consumer(self.settings)
                ids = probe.get_partition_ids()
                break
            except Exception as exc:  # noqa: BLE001 - said once per attempt; tried again
                self._error(None, exc)
            finally:
                if probe is not None:
                    _close_quietly(probe)
            self._closing.wait(delay)
            delay = min(delay * 2, 30.0)
        else:
            return
        for pid in ids:
            with self._lock:
                if self._closing.is_set():
                    return
                client = consumer(self.settings, load_balancing_interval=2.0, socket_timeout=SOCKET_TIMEOUT)
                self._clients[pid] = client
            start = self.start_at.get(pid)
            thread = threading.Thread(
                target=client.receive_batch, name=f"coordinator-hub-{pid}", daemon=True,
                kwargs={"on_event_batch": self._on_batch, "on_error": self._error, "partition_id": pid,
                        "max_batch_size": MAX_BATCH, "max_wait_time": None,
                        "starting_position": start.sequence if start is not None else "-1",
                        "starting_position_inclusive": False, "prefetch": PREFETCH})
            self._threads.append(thread)
            thread.start()

    def _on_batch(self, context: Any, events: list[Any]) -> None:
        if not events:
            return
        arrived = time.monotonic()
        batch = Batch(context.partition_id,
                      [(decode(e), Position(e.sequence_number, str(e.offset), _enqueued(e))) for e in events],
                      arrived)
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
        with self._lock:
            self._closing.set()
            clients = list(self._clients.values())
        closers = [threading.Thread(target=_close_quietly, args=(c,), daemon=True) for c in clients]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join(10)
        for thread in self._threads:
            thread.join(10)


def _enqueued(event_data: Any) -> float | None:
    when = getattr(event_data, "enqueued_time", None)
    return when.timestamp() if when is not None else None


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception as exc:  # noqa: BLE001 - closing a broken client must not stop the others
        log.debug("closing an Event Hubs client failed: %s", exc)


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

    def __init__(self, settings: EventHubSettings, partition_key: str | None = None) -> None:
        self.settings, self.partition_key = settings, partition_key
        self._producer: Any = None

    def warm(self) -> None:
        """Open the producer's link now (the first send on a new link takes about half a second)."""
        from azure.eventhub.exceptions import EventHubError

        try:
            if self._producer is None:
                self._producer = producer(self.settings)
            self._producer.create_batch()
        except (EventHubError, OSError, ValueError) as exc:
            log.debug("the producer is not open yet: %s", scrub(one_line(str(exc))))
            self.drop()

    def publish(self, texts: Sequence[str]) -> None:
        """Publish every text, in order, or raise ``PublishError`` (nothing is retried here)."""
        from azure.eventhub import EventData
        from azure.eventhub.exceptions import EventHubError

        try:
            if self._producer is None:
                self._producer = producer(self.settings)
            batch = self._producer.create_batch(partition_key=self.partition_key)
            for text in texts:
                data = EventData(text)
                data.content_type = CONTENT_TYPE
                try:
                    batch.add(data)
                except ValueError:  # full: send what we have, start another
                    self._producer.send_batch(batch, timeout=PUBLISH_TIMEOUT)
                    batch = self._producer.create_batch(partition_key=self.partition_key)
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
