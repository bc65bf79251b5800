"""The agents' Event Hub read: every partition into the fold (the Azure feed hub is read the same way).

``HubReader`` reads ALL partitions in the coordinator's own consumer group, from given sequence
numbers (or the start of retention), without the SDK's shared checkpoint store: every instance
reads everything into its own fold, and no two instances split the partitions between them. Its
checkpoint is the snapshot blob (ha/snapshot_blob.py): the partition positions written together with the
fold they belong to, since a position alone says where to resume but not what was known. The
SDK's in-memory checkpoint only lets a partition that failed resume where it was. Each received
event is decoded to a structured CloudEvent dict (or None: not a CloudEvent) on the SDK's thread
and handed on as a ``Batch``.

Losing the hub and getting it back are said once each (reach.py, ``hub-read``); how, in
``HubReader``'s docstring.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from ....errors import one_line
from ....sinks.azure_common import scrub
from ...tail import cloud_event_of
from ..azure.clients import consumer
from ..azure.reach import Reach, begin, describe_error
from ..config.service import EventHubSettings
from ..edge.canonical import read as read_json
from .lag import PROBE_EVERY, End, Watch, end_of

log = logging.getLogger("se_forwarder.coordinator.hub")

# The SDK hands events on once it has read PREFETCH frames or its socket was idle SOCKET_TIMEOUT s.
# Under a steady trickle (a fleet's heartbeats: gaps shorter than the SDK's default 0.2 s) only the
# frame count ends a read, so these two bound the time an event waits in the SDK before the fold.
MAX_BATCH = 300  # events handed on at most per read
PREFETCH = 50
SOCKET_TIMEOUT = 0.05
RECLAIM = 1.0  # s between the SDK's attempts to reopen a partition that failed
PROBE_LOST = 0.5  # s between questions while it does not answer
PROBE_DEADLINE = 5.0
PROBE_RETRY: dict[str, Any] = {"retry_total": 1, "retry_backoff_factor": 0.2, "retry_backoff_max": 0.5}


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
    """Events of one partition, in order, as received (``arrived``: monotonic time of receipt).

    ``texts``: each event's JSON body as read (None: not read from one), for the verifier's
    workers (input/verifier.py); ``checked``: what they found for each event (edge/offload.py)."""

    partition: str
    events: list[tuple[dict[str, Any] | None, Position]]
    arrived: float
    texts: list[bytes | None] | None = None
    checked: list[Any] | None = None

    def part(self, start: int, stop: int | None = None) -> Batch:
        """Events ``start`` to ``stop`` of this batch, with their texts and checks."""
        return Batch(self.partition, self.events[start:stop], self.arrived,
                     self.texts[start:stop] if self.texts is not None else None,
                     self.checked[start:stop] if self.checked is not None else None)


@dataclass
class ReaderHealth:
    last_batch: float | None = None  # monotonic
    errors: list[str] = field(default_factory=list)
    last_error_at: float | None = None
    lost_at: float | None = None  # monotonic, from the first error until the hub answers again
    catching_up: dict[str, int] = field(default_factory=dict)  # partition -> end to read up to
    back_at: float | None = None  # monotonic: when the hub answered again
    arrivals: list[tuple[str, int, float]] | None = None  # (partition, sequence, monotonic) since then


def decode(event_data: Any) -> dict[str, Any] | None:
    """The structured CloudEvent in ``event_data`` (a JSON object, or an array of one as Event Grid
    delivers); the fast path parses the JSON body directly."""
    return decode_text(event_data)[0]


def decode_text(event_data: Any) -> tuple[dict[str, Any] | None, bytes | None]:
    """``decode``, and the JSON text of a structured CloudEvent object (None otherwise)."""
    props = event_data.properties or {}
    if not any((k.decode() if isinstance(k, bytes) else k) == "cloudEvents_id" for k in props):
        try:
            body = event_data.body
            text = body if isinstance(body, bytes | bytearray) else b"".join(body)
            if text[:1] in (b"{", b"["):
                parsed = read_json(text)[0]  # json.loads' value, by orjson where the same
                whole = not isinstance(parsed, list)
                if isinstance(parsed, list) and len(parsed) == 1:  # Event Grid's delivery: [CloudEvent]
                    parsed = parsed[0]
                if isinstance(parsed, dict) and "specversion" in parsed:
                    return parsed, bytes(text) if whole else None
        except (ValueError, TypeError):
            return None, None
    return cloud_event_of(event_data), None


class HubReader:
    """Reads every partition from ``start`` (partition -> Position; others from the beginning).

    One ``EventHubConsumerClient`` per partition, each receiving on its own thread: the SDK's own
    all-partitions loop visits the partitions in turn and waits up to its socket timeout on each
    idle one, which would add up to ``timeout x partitions`` to every decision's latency.

    A watcher thread runs those clients. When a partition's connection fails, the SDK's consumer
    opens it again in a tight loop and tells nobody (azure-eventhub 5.15: ``on_error`` is not
    called; thousands of attempts a second per partition, more than a core between them), so the
    watcher is what notices an outage: it asks
    the hub about itself every ``PROBE_EVERY`` seconds (management requests: the hub, and where each
    partition ends and begins, kept in ``watch`` for the lag guard, lag.py). When the hub
    does not answer (or not within ``PROBE_DEADLINE``), it closes the partitions' clients (no
    busy loop during an outage), and asks every ``PROBE_LOST`` seconds; when the hub answers
    again, it reads where each partition ends, says how far behind the fold is, and opens the
    partitions again from where each was read up to. Once the reader has read that far it says
    so, with the time the catch-up took. ``label`` names the hub in those lines.
    """

    def __init__(self, settings: EventHubSettings, start: dict[str, Position],
                 deliver: Callable[[Batch], None], reach: Reach | None = None,
                 label: str = "the Event Hub", connect: Callable[..., Any] = consumer,
                 watch: Watch | None = None) -> None:
        self.settings, self.label = settings, label
        self.watch = watch or Watch(label)  # where its partitions end, at each question (lag.py)
        self.connect = connect  # makes the consumer clients (access.Clients)
        self.deliver = deliver
        self.reach = reach or Reach("hub-read")
        self.health = ReaderHealth()
        self.read_to = {pid: pos.sequence for pid, pos in start.items()}  # last sequence delivered
        self._clients: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []
        self._mgmt: Any = None  # the watcher's client for its questions
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="coordinator-hub-watch", daemon=True)

    def start(self) -> None:
        self._watcher.start()

    # -- the watcher -------------------------------------------------------------------------------

    def _watch(self) -> None:
        reading = False
        while not self._closing.is_set():
            ids = self._ask(lambda mgmt: list(mgmt.get_eventhub_properties()["partition_ids"]),
                            f"asking {self.label} about itself")
            if self._closing.is_set():
                break
            if ids is not None and not reading:
                was = dict(self.read_to)
                self.reach.succeeded()
                survey = self._survey(ids)  # before reading on: a gap retention left is found first
                if survey is not None:
                    self.watch.check_start(survey, was)
                self._back(ids)
                reading = True
                self._measure(survey, was)
            elif ids is None and reading:
                self._lose()
                reading = False
            elif ids is not None:
                if self.health.lost_at is None:
                    self.reach.succeeded()
                self._survey(ids)
            self._wake.wait(PROBE_EVERY if reading else PROBE_LOST)
            self._wake.clear()

    def _ask(self, question: Callable[[Any], Any], what: str) -> Any:
        """``question(client)`` with a deadline; None when the hub does not answer (recorded)."""
        def asked() -> Any:
            if self._mgmt is None:
                self._mgmt = self.connect(self.settings, **PROBE_RETRY)
            return question(self._mgmt)

        future = begin(asked, "coordinator-hub-probe")
        try:
            return future.result(PROBE_DEADLINE)
        except FutureTimeout:
            self.reach.failed(f"{what}: no answer within {PROBE_DEADLINE:.0f} s", overdue=True)
        except Exception as exc:  # noqa: BLE001 - recorded; asked again
            self.reach.failed(f"{what}: {describe_error(exc)}")
        mgmt, self._mgmt = self._mgmt, None
        if mgmt is not None:
            threading.Thread(target=_close_quietly, args=(mgmt,), daemon=True).start()
        return None

    def _survey(self, ids: list[str]) -> dict[str, End] | None:
        """Where every partition ends and begins now, recorded in ``watch`` (None: no answer)."""
        found = self._ask(lambda mgmt: {pid: end_of(mgmt.get_partition_properties(pid)) for pid in ids},
                          f"asking {self.label} where it ends")
        if found is not None:
            self.watch.observe(found, time.time())
        return found

    def _measure(self, survey: dict[str, End] | None, was: dict[str, int]) -> None:
        """The hub answers (again): say how far behind the fold was then (``was``: read up to)."""
        health = self.health
        ends = {pid: end.sequence for pid, end in survey.items()} if survey is not None else None
        behind = {pid: end - was.get(pid, -1) for pid, end in sorted((ends or {}).items())
                  if end > was.get(pid, -1)}
        health.catching_up = {pid: ends[pid] for pid in behind} if ends else {}
        detail = ("how far behind is not known" if ends is None else
                  f"{sum(behind.values())} event(s) to read up to where it ends ("
                  + ", ".join(f"partition {p}: {n}" for p, n in behind.items()) + ")"
                  if behind else "nothing to catch up")
        if not health.catching_up:
            health.arrivals = None
        again = " again" if health.lost_at is not None else ""
        log.info("reading %s%s from where the fold was: %s", self.label, again, detail)
        health.lost_at = None
        self._caught_up()

    def _back(self, ids: list[str]) -> None:
        """Open every partition's client, from where it was read up to."""
        self.health.back_at, self.health.arrivals = time.monotonic(), []
        for pid in sorted(ids):
            with self._lock:
                if self._closing.is_set():
                    return
                client = self.connect(self.settings, load_balancing_interval=RECLAIM,
                                      socket_timeout=SOCKET_TIMEOUT)
                self._clients[pid] = client
            start = self.read_to.get(pid)
            thread = threading.Thread(
                target=client.receive_batch, name=f"coordinator-hub-{pid}", daemon=True,
                kwargs={"on_event_batch": self._on_batch, "on_error": self._error, "partition_id": pid,
                        "max_batch_size": MAX_BATCH, "max_wait_time": None,
                        "starting_position": start if start is not None else "-1",
                        "starting_position_inclusive": False, "prefetch": PREFETCH})
            self._threads.append(thread)
            thread.start()

    def _lose(self) -> None:
        """The hub does not answer: stop the partitions' clients until it does (class docstring)."""
        self.health.lost_at, self.health.catching_up = time.monotonic(), {}
        self._close_partitions()

    def _close_partitions(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
            threads, self._threads = self._threads, []
        closers = [threading.Thread(target=_close_quietly, args=(c,), daemon=True) for c in clients]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join(10)
        for thread in threads:
            thread.join(10)

    # -- the partitions' threads -------------------------------------------------------------------

    def _on_batch(self, context: Any, events: list[Any]) -> None:
        if not events:
            return
        arrived = time.monotonic()
        decoded = [decode_text(e) for e in events]
        positions = _positions(events)
        batch = Batch(context.partition_id, [(d[0], p) for d, p in zip(decoded, positions, strict=True)],
                      arrived, [d[1] for d in decoded])
        self.health.last_batch = arrived
        while True:
            try:
                self.deliver(batch)  # may raise queue.Full: the fold is behind (input/inbox.py)
                break
            except queue.Full:
                if self._closing.is_set():  # the next reader starts from what was folded
                    return
        self.read_to[batch.partition] = batch.events[-1][1].sequence
        arrivals = self.health.arrivals
        if arrivals is not None and len(arrivals) < 100_000:
            arrivals.append((batch.partition, batch.events[-1][1].sequence, arrived))
        if self.health.catching_up:
            self._caught_up()
        try:
            context.update_checkpoint(events[-1])  # in memory: where a failed partition resumes
        except Exception as exc:  # noqa: BLE001 - only the resume point of a retry is at stake
            log.debug("in-memory checkpoint failed: %s", exc)

    def _error(self, context: Any, error: Exception) -> None:
        where = f"partition {context.partition_id}" if context is not None else self.label
        text = f"reading {where}: {type(error).__name__}: {scrub(one_line(str(error)))}"
        health = self.health
        health.errors = (health.errors + [text])[-20:]
        health.last_error_at = time.monotonic()
        if not self._closing.is_set():
            self.reach.failed(text)
            self._wake.set()  # ask the hub now

    def _caught_up(self) -> None:
        """Once every partition behind is read up to its end: say when that was (from the arrivals)."""
        health = self.health
        targets, arrivals = dict(health.catching_up), list(health.arrivals or ())
        if not targets or any(self.read_to.get(pid, -1) < end for pid, end in targets.items()):
            return
        health.catching_up, health.arrivals = {}, None
        reached = [min((t for p, seq, t in arrivals if p == pid and seq >= end), default=time.monotonic())
                   for pid, end in targets.items()]
        took = max(reached) - (health.back_at or max(reached))
        log.info("caught up with %s: read up to where it ended %.1f s after it answered "
                 "(%d partition(s) behind)", self.label, took, len(targets))

    def close(self) -> None:
        with self._lock:
            self._closing.set()
        self._wake.set()
        self._close_partitions()
        if self._mgmt is not None:
            _close_quietly(self._mgmt)
        self._watcher.join(PROBE_DEADLINE + 1)


def _positions(events: list[Any]) -> list[Position]:
    """Each event's position, read from its AMQP annotations as ``EventData``'s properties read them
    (the same values: sequence number, offset text, enqueued time in epoch seconds), without the
    ``datetime`` its ``enqueued_time`` makes only to be turned back into seconds (0.4 against 1.9 us
    an event). Events without annotations (the fleet demo's in-memory hub) give their own."""
    try:
        annotations = [e.raw_amqp_message.annotations for e in events]
    except AttributeError:
        return [Position(e.sequence_number, str(e.offset), _enqueued(e)) for e in events]
    out = []
    for notes in annotations:
        offset, when = notes.get(_OFFSET), notes.get(_ENQUEUED)
        out.append(Position(notes.get(_SEQUENCE), offset.decode() if isinstance(offset, bytes) else "None",
                            float(when) / 1000 if when else None))
    return out


_SEQUENCE, _OFFSET, _ENQUEUED = b"x-opt-sequence-number", b"x-opt-offset", b"x-opt-enqueued-time"


def _enqueued(event_data: Any) -> float | None:
    when = getattr(event_data, "enqueued_time", None)
    return when.timestamp() if when is not None else None


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception as exc:  # noqa: BLE001 - closing a broken client must not stop the others
        log.debug("closing an Event Hubs client failed: %s", exc)


def partition_ends(settings: EventHubSettings, connect: Callable[..., Any] = consumer) -> dict[str, int]:
    """The last enqueued sequence number of every partition now (-1: empty). Raises on failure."""
    client = connect(settings)
    try:
        return {pid: int(client.get_partition_properties(pid)["last_enqueued_sequence_number"])
                for pid in client.get_partition_ids()}
    finally:
        client.close()
