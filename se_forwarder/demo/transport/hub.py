"""The fleet demo's Event Hub: an event hub in memory, behind the interface of the SDK's clients.

Only ``se-forwarder demo --fleet`` uses it. It is handed in code to the agents' Event Hubs sink
(``agent.Transport``) and to the coordinator's hub reader and publisher (``coordinator.access.
Clients``); no key of an agent's configuration or of ``coordinator.toml`` can select it. It keeps
the model the real hub has, so the code that reads and writes it is the code that runs against
Azure:

- a fixed number of partitions, each an append-only log. An event gets its partition from its
  partition key (a stable hash, so one VM's events stay in order on one partition) or, without
  one, in turn; its sequence number (0, 1, ... per partition), its offset (a string: the byte
  position in the partition, as Event Hubs' offsets are) and its enqueued time (UTC);
- producers make batches (``create_batch``, ``add`` raising ValueError when the batch would pass
  ``MAX_BATCH_BYTES``, as ``EventDataBatch`` does) and send them (``send_batch``);
- consumers ask about the hub (``get_eventhub_properties``, ``get_partition_ids``,
  ``get_partition_properties``) and receive a partition, or all, from a starting position
  (``receive_batch``: an int is a sequence number, a string an offset, ``"-1"`` the beginning;
  exclusive unless ``starting_position_inclusive``) until they are closed. Each consumer reads on
  its own: there is no load balancing between consumers of a group, and nothing is checkpointed.

A partition keeps its last ``KEEP`` events (a real hub keeps them for its retention period): the
readers are live, and ``--keep`` may leave the demo running for hours of heartbeats. The first kept
sequence number is a partition's ``beginning_sequence_number``. ``read_all`` hands the demo's
terminal every kept event in the order the hub took them, across partitions.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

NAMESPACE = "local-hub.se-forwarder-demo"  # shown in messages; no Azure namespace
MAX_BATCH_BYTES = 1024 * 1024  # a Standard namespace's maximum message size
DEFAULT_PARTITIONS = 4
_WAIT = 0.5  # s a receiving consumer sleeps at most before looking at its stop flag again
KEEP = 5_000  # events kept per partition (about half an hour of the demo's heartbeats)


@dataclass(frozen=True)
class LocalEventData:
    """A received event, with what the SDK's ``EventData`` gives a consumer."""

    body: bytes
    properties: dict[Any, Any]
    content_type: str | None
    partition_key: str | None
    sequence_number: int
    offset: str
    enqueued_time: datetime

    def body_as_str(self, encoding: str = "UTF-8") -> str:
        return self.body.decode(encoding)


@dataclass(frozen=True)
class PartitionContext:
    """What ``receive_batch`` hands its callbacks with each batch."""

    partition_id: str
    eventhub_name: str
    consumer_group: str
    fully_qualified_namespace: str = NAMESPACE

    def update_checkpoint(self, event: Any = None) -> None:
        """Nothing is checkpointed here (the coordinator's checkpoint is its snapshot)."""


@dataclass
class _Partition:
    events: list[LocalEventData] = field(default_factory=list)  # the kept ones, oldest first
    first: int = 0  # the sequence number of events[0]
    next_offset: int = 0

    def trim(self, keep: int) -> None:
        if len(self.events) > keep + keep // 10:  # in steps: a list drops its head in O(n)
            dropped = len(self.events) - keep
            del self.events[:dropped]
            self.first += dropped

    def after(self, position: int) -> list[LocalEventData]:
        return self.events[max(0, position + 1 - self.first):]


class LocalHub:
    """The hub itself: its partitions and everything sent to it (module docstring)."""

    def __init__(self, name: str = "scheduled-events", partitions: int = DEFAULT_PARTITIONS) -> None:
        self.name = name
        self.created = datetime.now(UTC)
        self.partition_ids = [str(i) for i in range(partitions)]
        self._parts = {pid: _Partition() for pid in self.partition_ids}
        self._order: list[tuple[str, int]] = []  # (partition, sequence) in the order taken
        self._order_first = 0  # how many entries of _order were dropped
        self._turn = itertools.cycle(self.partition_ids)
        self._changed = threading.Condition()

    def producer(self, *_args: Any, **_kwargs: Any) -> LocalProducerClient:
        return LocalProducerClient(self)

    def consumer(self, *_args: Any, consumer_group: str = "$Default", **_kwargs: Any) -> LocalConsumerClient:
        return LocalConsumerClient(self, consumer_group)

    def partition_for(self, key: str | None) -> str:
        if key is None:
            return next(self._turn)
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        return self.partition_ids[int.from_bytes(digest[:4], "big") % len(self.partition_ids)]

    def append(self, partition_id: str, items: Iterable[tuple[bytes, dict[Any, Any], str | None]],
               partition_key: str | None) -> None:
        """Take a batch into one partition, in order, at one enqueued time."""
        with self._changed:
            part = self._parts[partition_id]
            now = datetime.now(UTC)
            for body, properties, content_type in items:
                sequence = part.first + len(part.events)
                part.events.append(LocalEventData(body, properties, content_type, partition_key, sequence,
                                                  str(part.next_offset), now))
                part.next_offset += len(body)
                self._order.append((partition_id, sequence))
            part.trim(KEEP)
            if len(self._order) > 2 * KEEP * len(self._parts):
                dropped = len(self._order) - KEEP * len(self._parts)
                del self._order[:dropped]
                self._order_first += dropped
            self._changed.notify_all()

    def properties(self, partition_id: str) -> dict[str, Any]:
        with self._changed:
            part = self._parts[partition_id]
            last = part.events[-1] if part.events else None
            return {"eventhub_name": self.name, "id": partition_id, "beginning_sequence_number": part.first,
                    "last_enqueued_sequence_number": last.sequence_number if last else -1,
                    "last_enqueued_offset": last.offset if last else "-1",
                    "last_enqueued_time_utc": last.enqueued_time if last else None,
                    "is_empty": last is None}

    def after(self, partition_id: str, position: int, limit: int, timeout: float) -> list[LocalEventData]:
        """Up to ``limit`` events of a partition after the sequence number ``position``, waiting up
        to ``timeout`` seconds for the first."""
        with self._changed:
            part = self._parts[partition_id]
            if not part.after(position):
                self._changed.wait(timeout)
            return part.after(position)[:limit]

    def sequence_at(self, partition_id: str, offset: str, inclusive: bool) -> int:
        """The sequence number a read from ``offset`` goes on after (-1: from the beginning)."""
        if offset == "-1":
            return -1
        with self._changed:
            part = self._parts[partition_id]
            for event in part.events:
                if event.offset == offset:
                    return event.sequence_number - (1 if inclusive else 0)
            return part.first + len(part.events) - 1

    def read_all(self, start: int) -> tuple[list[LocalEventData], int]:
        """Every kept event taken after the first ``start``, in the order taken, and the next start."""
        with self._changed:
            order = self._order[max(0, start - self._order_first):]
            out = []
            for pid, seq in order:
                part = self._parts[pid]
                if seq >= part.first:
                    out.append(part.events[seq - part.first])
            return out, self._order_first + len(self._order)

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()


class LocalBatch:
    """``EventDataBatch``: events for one partition (or key), up to ``MAX_BATCH_BYTES``."""

    def __init__(self, partition_id: str | None, partition_key: str | None,
                 max_size_in_bytes: int | None = None) -> None:
        self.partition_id, self.partition_key = partition_id, partition_key
        self.max_size_in_bytes = min(max_size_in_bytes or MAX_BATCH_BYTES, MAX_BATCH_BYTES)
        self.size_in_bytes = 0
        self.items: list[tuple[bytes, dict[Any, Any], str | None]] = []

    def add(self, event_data: Any) -> None:
        """Add an SDK ``EventData``; ValueError when the batch would be too large."""
        body = event_data.body
        raw = bytes(body) if isinstance(body, bytes | bytearray) else b"".join(body)
        properties = dict(event_data.properties or {})
        size = len(raw) + sum(len(str(k)) + len(str(v)) for k, v in properties.items()) + 24
        if self.size_in_bytes + size > self.max_size_in_bytes:
            raise ValueError(f"EventDataBatch has reached its size limit: {self.max_size_in_bytes}")
        self.items.append((raw, properties, getattr(event_data, "content_type", None)))
        self.size_in_bytes += size

    def __len__(self) -> int:
        return len(self.items)


class LocalProducerClient:
    """``EventHubProducerClient`` for the local hub."""

    def __init__(self, hub: LocalHub) -> None:
        self.hub = hub

    def create_batch(self, *, partition_id: str | None = None, partition_key: str | None = None,
                     max_size_in_bytes: int | None = None, **_kwargs: Any) -> LocalBatch:
        return LocalBatch(partition_id, partition_key, max_size_in_bytes)

    def send_batch(self, event_data_batch: LocalBatch, *, timeout: float | None = None,
                   **_kwargs: Any) -> None:
        batch = event_data_batch
        partition = batch.partition_id or self.hub.partition_for(batch.partition_key)
        self.hub.append(partition, batch.items, batch.partition_key)

    def get_eventhub_properties(self) -> dict[str, Any]:
        return {"eventhub_name": self.hub.name, "created_at": self.hub.created,
                "partition_ids": list(self.hub.partition_ids)}

    def get_partition_ids(self) -> list[str]:
        return list(self.hub.partition_ids)

    def close(self) -> None:
        """Nothing to release: the hub is in this process."""


class LocalConsumerClient:
    """``EventHubConsumerClient`` for the local hub, in one consumer group."""

    def __init__(self, hub: LocalHub, consumer_group: str) -> None:
        self.hub, self.consumer_group = hub, consumer_group
        self._closed = threading.Event()

    def get_eventhub_properties(self) -> dict[str, Any]:
        return {"eventhub_name": self.hub.name, "created_at": self.hub.created,
                "partition_ids": list(self.hub.partition_ids)}

    def get_partition_ids(self) -> list[str]:
        return list(self.hub.partition_ids)

    def get_partition_properties(self, partition_id: str) -> dict[str, Any]:
        return self.hub.properties(partition_id)

    def receive_batch(self, on_event_batch: Callable[[PartitionContext, list[LocalEventData]], None], *,
                      max_batch_size: int = 300, max_wait_time: float | None = None,
                      partition_id: str | None = None, starting_position: Any = None,
                      starting_position_inclusive: bool = False,
                      on_error: Callable[[PartitionContext, Exception], None] | None = None,
                      **_kwargs: Any) -> None:
        """Hand each partition's new events to ``on_event_batch`` until ``close`` (module docstring);
        with ``max_wait_time``, an empty batch after that long without events."""
        ids = [partition_id] if partition_id is not None else list(self.hub.partition_ids)
        read_to = {pid: self._start(pid, starting_position, starting_position_inclusive) for pid in ids}
        contexts = {pid: PartitionContext(pid, self.hub.name, self.consumer_group) for pid in ids}
        quiet_since = {pid: 0.0 for pid in ids}
        clock = threading.Event()
        while not self._closed.is_set():
            wait = _WAIT if len(ids) == 1 else 0.0
            got = False
            for pid in ids:
                events = self.hub.after(pid, read_to[pid], max_batch_size, wait)
                if events:
                    got = True
                    read_to[pid] = events[-1].sequence_number
                    quiet_since[pid] = 0.0
                    on_event_batch(contexts[pid], list(events))
                elif max_wait_time is not None:
                    quiet_since[pid] += wait or 0.05
                    if quiet_since[pid] >= max_wait_time:
                        quiet_since[pid] = 0.0
                        on_event_batch(contexts[pid], [])
            if not got and len(ids) > 1:
                clock.wait(0.05)

    def _start(self, pid: str, position: Any, inclusive: bool) -> int:
        if isinstance(position, dict):
            position = position.get(pid)
        if position is None or position == "-1":
            return -1
        if isinstance(position, bool) or not isinstance(position, int | str):
            raise ValueError(f"starting_position {position!r} is not a sequence number or an offset")
        if isinstance(position, int):
            return position - (1 if inclusive else 0)
        return self.hub.sequence_at(pid, position, inclusive)

    def close(self) -> None:
        self._closed.set()
        self.hub.wake()
