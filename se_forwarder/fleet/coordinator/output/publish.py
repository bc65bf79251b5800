"""The way out: decisions published to the hub in order; approval messages sent once published.

The service folds each decision as it makes it and hands it here (``put``). One thread signs
(``Signer.decision``: this is the one place decisions are signed, ``sent`` and ``acknowledge``
records included) and publishes what is queued, in order. Approval messages are sent by
output/queue_sender.py, and only for approvals that are on the hub already (``published``): the hub always
knows of an approval before any agent does, so an instance taking over never misses one. Every
pass the service says which approvals want their message (``want``); that includes the approvals
it just made. An approval through ARM (``Via: "arm"``) has no message: it is acknowledged once
published (its ``Outgoing.done``, input/azure.py).

Before every publish the thread asks ``may_act(term)``: the decision must come from the current
leadership term, and the lease must still be comfortably held (ha/lease.py). When that fails with
decisions still unpublished, they are dropped and ``on_lost`` is called: the service's fold holds
decisions nobody else will ever see, so it rebuilds the fold from the snapshot and the hub.

A publish has a deadline (``PUBLISH_DEADLINE``, reach.py): one that fails or gets no answer in time
is retried with a backoff (up to 2 s, so a hub that is back is used within 2 s) while the term
lasts, and so is one whose signing key cannot be read (logged once until it can): nothing goes out
unsigned. The next attempt waits for an attempt that got no answer to end (the SDK's send timeout
ends it), so that two never use the producer at once. A control request waits for its decision's
publication through ``Outgoing.done`` (resolved with the signed CloudEvent); the API stops waiting
after a second (api/server.py).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from ....backoff import Backoff
from ....errors import ConfigError
from ..azure.reach import Reach, begin, describe_error
from ..decide.events import Decision
from ..fold.state import DecisionRecord
from ..signer import Approval
from .hub_producer import PUBLISH_TIMEOUT, HubProducer
from .messages import ApprovalMessages
from .queue_sender import OnSent, QueueSender

log = logging.getLogger("se_forwarder.coordinator.output")

BACKOFF = Backoff(steps=(0.25, 0.5, 1.0, 2.0))
MAX_PUBLISH = 500  # decisions per publish call
PUBLISH_DEADLINE = PUBLISH_TIMEOUT + 2.0  # s a publish may take before it counts as failed
LINGER = 60.0  # s the next publish waits at most for one that got no answer


@dataclass
class Outgoing:
    decision: Decision
    term: int
    trigger: float | None = None  # monotonic arrival of the hub input that led to it (latency)
    done: Future[Any] | None = None  # resolved with the signed CloudEvent once published


@dataclass
class OutputStats:
    published: int = 0
    publish_failures: int = 0
    dropped: int = 0


@dataclass(frozen=True)
class OutputCounts:
    """What the output did so far (``Output.counts``, for /metrics and status)."""

    published: int
    publish_failures: int
    dropped: int
    sent: int
    send_failures: int
    pending_sends: int
    latencies: tuple[float, ...]  # recent approvals: hub input -> message in the queue


class Output:
    def __init__(self, publisher: HubProducer, messages: ApprovalMessages, source: str,
                 may_act: Callable[[int], bool], on_lost: Callable[[int], None], on_sent: OnSent,
                 hub: Reach, queues: Reach) -> None:
        self.publisher, self.source, self.signer = publisher, source, messages.signer
        self.may_act, self.on_lost, self.hub = may_act, on_lost, hub
        self.stats = OutputStats()
        self.sending = QueueSender(messages, queues, may_act, on_sent, self._published)
        self._queue: queue.Queue[Outgoing | None] = queue.Queue()
        self._busy = 0
        self._unpublished: set[str] = set()  # approve ids put and not yet published
        self._lingering: Future[None] | None = None
        self._stopping = threading.Event()  # a clean stop gave up waiting for the hub
        self.gave_up = False  # decisions were dropped at the stop: the fold is not the hub's
        self.unsigned: tuple[float, str] | None = None  # (monotonic since, why) while nothing can be signed
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="coordinator-output", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self.sending.start()

    def put(self, item: Outgoing) -> None:
        d = item.decision
        with self._lock:
            self._busy += 1
            if d.kind == "approve" and not d.shadow and d.via is None:  # via ARM: no message (input/azure.py)
                self._unpublished.add(d.id)
                if item.trigger is not None:
                    self.sending.triggers[d.id] = item.trigger
        self._queue.put(item)

    def counts(self) -> OutputCounts:
        out, sends = self.stats, self.sending.stats
        return OutputCounts(out.published, out.publish_failures, out.dropped, sends.sent, sends.failures,
                            self.sending.pending(), tuple(sends.latencies))

    def want(self, approvals: list[DecisionRecord], term: int) -> None:
        """The approvals whose message is wanted now (output/queue_sender.py)."""
        self.sending.want([Approval.of(r) for r in approvals], term)

    def idle(self) -> bool:
        """Nothing waiting to be published (a snapshot now is of published decisions only)."""
        with self._lock:
            return self._busy == 0

    def close(self, timeout: float = 10.0) -> None:
        """Publish what is queued, for at most ``timeout`` seconds; then give up (dropped unpublished)."""
        self._queue.put(None)
        self._thread.join(timeout)
        self._stopping.set()
        self._thread.join(PUBLISH_DEADLINE + 1)
        self.sending.close()

    def _published(self, ident: str) -> bool:
        with self._lock:
            return ident not in self._unpublished

    def _take(self) -> list[Outgoing] | None:
        first = self._queue.get()
        if first is None:
            return None
        items = [first]
        while len(items) < MAX_PUBLISH:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self._queue.put(None)
                break
            items.append(more)
        return items

    def _run(self) -> None:
        self.publisher.warm()
        while (items := self._take()) is not None:
            try:
                self._handle(items)
            except Exception:  # noqa: BLE001 - the way out must survive anything
                log.exception("output failed; the decisions are dropped and the fold rebuilt")
                self._drop(items)
            finally:
                with self._lock:
                    self._busy -= len(items)

    def _handle(self, items: list[Outgoing]) -> None:
        term = items[0].term
        same = [i for i in items if i.term == term]
        rest = items[len(same):]
        published = self._publish(same)
        if published is None:
            self._drop(items)
            return
        with self._lock:
            self._unpublished.difference_update(i.decision.id for i in same)
        self.sending.wake()
        for item, event in zip(same, published, strict=True):
            if item.done is not None and not item.done.done():
                item.done.set_result(event)
        if rest:
            self._handle(rest)

    def _publish(self, items: list[Outgoing]) -> list[dict[str, Any]] | None:
        """The signed CloudEvents, once published; None when this instance stopped leading."""
        events: list[dict[str, Any]] = []
        term = items[0].term
        attempt = 0
        while self.may_act(term) and not self._stopping.is_set():
            began = time.monotonic()
            try:
                events = events or self._sign(items)
                self._attempt([json.dumps(e, separators=(",", ":")) for e in events])
            except Exception as exc:  # noqa: BLE001 - PublishError, Overdue: recorded by reach
                self.stats.publish_failures += 1
                log.debug("publishing %d decision(s) failed: %s", len(items), describe_error(exc))
                self._stopping.wait(BACKOFF.delay(attempt + 1))
                attempt += 1
                continue
            self.stats.published += len(events)
            log.debug("published %d decision(s) in %.3f s", len(events), time.monotonic() - began)
            return events
        return None

    def _sign(self, items: list[Outgoing]) -> list[dict[str, Any]]:
        """The decisions' CloudEvents signed (events.signed); a key that cannot be read is said once
        (and in ``/healthz``, through ``unsigned``)."""
        try:
            events = [self.signer.decision(i.decision) for i in items]
        except ConfigError as exc:
            if self.unsigned is None:
                log.error("decisions not published: %s; trying again", exc)
            since = self.unsigned[0] if self.unsigned is not None else time.monotonic()
            self.unsigned = (since, str(exc))
            raise
        if self.unsigned is not None:
            log.info("the signing key can be read again: publishing the decisions that waited")
        self.unsigned = None
        return events

    def _attempt(self, texts: list[str]) -> None:
        lingering = self._lingering
        if lingering is not None:
            try:
                lingering.result(LINGER)
            except FutureTimeout:
                self.publisher.drop()
            except Exception:  # noqa: BLE001, S110 - its failure was recorded when it was overdue
                pass
            self._lingering = None
        future = begin(lambda: self.publisher.publish(texts), "coordinator-publish")
        try:
            self.hub.wait(future, PUBLISH_DEADLINE, f"publishing {len(texts)} decision(s)")
        except TimeoutError:
            self._lingering = future
            raise

    def _drop(self, items: list[Outgoing]) -> None:
        self.stats.dropped += len(items)
        with self._lock:
            self._unpublished.difference_update(i.decision.id for i in items)
        for item in items:
            if item.done is not None and not item.done.done():
                item.done.set_exception(RuntimeError("this instance stopped leading before the decision "
                                                     "was published; nothing was done"))
        if self._stopping.is_set():
            self.gave_up = True
            log.warning("dropped %d unpublished decision(s): the Event Hub did not take them before the "
                        "stop (whoever leads next decides again)", len(items))
            return
        log.warning("dropped %d unpublished decision(s): this instance no longer leads; rebuilding the "
                    "fold from the snapshot and the hub", len(items))
        self.on_lost(items[0].term)
