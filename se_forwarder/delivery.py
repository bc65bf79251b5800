"""One delivery worker per sink: outbox backlog -> sink, in order, with retry and parking.

A worker never blocks polling or another sink: it has its own thread and its own database
connection, and only advances its own cursor.

An idle worker sleeps until ``wakeup`` is set, with no timer (an agent's idle poll must cost
little, see docs/performance.md): the agent sets it whenever a thread of its own records an event,
and when its poller finds that another process changed the outbox since the last poll (`approve`
recording an approval, `sink resume` unparking a sink: ``Outbox.changed_elsewhere``). A parked
worker sleeps the same way. Only a heartbeat that falls due wakes it by itself. Whoever sets
``stop`` also sets ``wakeup``.

With a ``heartbeat_interval`` the worker also hands its sink a heartbeat CloudEvent (see
``heartbeat.py``) at start and then at that interval, through the same ``deliver`` call, but only
while the sink is idle and well: nothing pending in its backlog, not parked, not backing off. A
heartbeat is never retried, never touches the cursor or the sink's error state, and a due one is
skipped (not queued) when the sink cannot take it, so it never delays or reorders the backlog.

With an ``announcement`` (the agent's identity event, ``identity/registration.py``) the worker
hands it to the sink before its next batch whenever it is new: at start, and after every
re-registration. Unlike a heartbeat it is retried (with the sink's backoff, the backlog waiting
behind it) until the sink takes it, because a consumer verifying the sink's events needs it first;
it never touches the cursor. A sink that refuses it for good (dead letter) gets the backlog anyway.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import metrics, tracing
from .backoff import Backoff
from .errors import StateError
from .outbox import Outbox
from .sinks.base import DeadLetter, Delivered, DeliveryReport, Park, Retry, Sink, StoredEvent
from .telemetry import fields

log = logging.getLogger("se_forwarder.delivery")

HeartbeatFactory = Callable[[Outbox, float], StoredEvent]
Announcement = Callable[[], StoredEvent | None]


class DeliveryWorker:
    def __init__(self, sink: Sink, state_dir: Path, stop: threading.Event, *,
                 heartbeat_interval: float = 0.0, heartbeat: HeartbeatFactory | None = None,
                 announcement: Announcement | None = None) -> None:
        self.sink = sink
        self._announcement = announcement
        self._announced: str | None = None  # the id of the last announcement the sink took
        self.heartbeat_interval = heartbeat_interval if heartbeat is not None else 0.0
        self._heartbeat = heartbeat
        self._next_heartbeat = time.monotonic()  # the first one at start
        self._heartbeat_failed = False
        self.state_dir = state_dir
        self.stop = stop
        self.wakeup = threading.Event()
        self.backoff = Backoff(base=0.5, cap=30.0)  # a sink that is back is retried within 30 s
        self._thread: threading.Thread | None = None
        self._outbox: Outbox | None = None
        self._retry_logged = False

    # -- threads --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"deliver-{self.sink.name}", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._outbox = Outbox(self.state_dir)
            while not self.stop.is_set():
                try:
                    self.wakeup.clear()  # before looking: a row recorded from now on wakes it
                    if self._outbox.parked(self.sink.name):
                        self.wakeup.wait()  # `sink resume`, from another process: see the docstring
                        continue
                    delay = self.deliver_once()
                    if delay is None:
                        self.heartbeat_if_due()
                except (sqlite3.Error, StateError) as exc:
                    # Database locked past the busy timeout, disk full...: the cursor did not move,
                    # so the batch is simply offered again later (at-least-once), never dropped.
                    delay = self.backoff.next_delay()
                    log.error("cannot read or advance the delivery cursor, retry in %.1f s: %s",
                              delay, exc, extra=fields(sink=self.sink.name))
                if delay is None:
                    self.wakeup.wait(self._until_heartbeat())
                elif delay > 0:
                    self.stop.wait(delay)
        except Exception:  # never let a worker die silently; the agent goes on with the others
            log.exception("delivery worker stopped", extra=fields(sink=self.sink.name))
        finally:
            if self._outbox is not None:
                self._outbox.close()
            try:
                self.sink.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.warning("closing sink failed", extra=fields(sink=self.sink.name))

    def _until_heartbeat(self) -> float | None:
        """Seconds until the next heartbeat is due; None (no timeout) without heartbeats."""
        if not self.heartbeat_interval:
            return None
        return max(0.0, self._next_heartbeat - time.monotonic())

    # -- one pass -------------------------------------------------------------------------
    def deliver_once(self, outbox: Outbox | None = None) -> float | None:
        """Hand one batch to the sink; the delay before the next pass, None when idle."""
        box = outbox or self._outbox
        assert box is not None
        if box.parked(self.sink.name):
            return None
        delay = self.announce()
        if delay is not None:
            return delay
        batch = box.pending(self.sink.name, self.sink.max_batch)
        if not batch:
            return None
        try:
            report = self.sink.deliver(batch)
        except Exception as exc:  # a sink bug must not lose events: treat as transient
            log.exception("sink raised", extra=fields(sink=self.sink.name))
            report = DeliveryReport([Retry(f"sink error: {type(exc).__name__}: {exc}")])
        return self._apply(box, batch, report)

    def announce(self) -> float | None:
        """Hand the sink a new announcement; the delay before retrying it, None when done."""
        event = self._announcement() if self._announcement is not None else None
        if event is None or event.ce_id == self._announced:
            return None
        outcome = self._deliver_one(event)
        if isinstance(outcome, Delivered | DeadLetter):
            self._announced = event.ce_id
            if isinstance(outcome, DeadLetter):
                log.error("identity event refused for good: %s", outcome.reason,
                          extra=fields(sink=self.sink.name))
            else:
                log.debug("identity event delivered: %s", event.ce_id, extra=fields(sink=self.sink.name))
            self.backoff.reset()
            self._retry_logged = False
            return None
        delay = self.backoff.next_delay(getattr(outcome, "after", None))
        log.log(logging.DEBUG if self._retry_logged else logging.WARNING,
                "identity event not delivered, retrying in %.1f s: %s", delay,
                getattr(outcome, "reason", type(outcome).__name__), extra=fields(sink=self.sink.name))
        self._retry_logged = True
        return delay

    def _deliver_one(self, event: StoredEvent) -> Delivered | DeadLetter | Retry | Park:
        """The sink's outcome for one event that is not in the outbox; never raises."""
        try:
            report = self.sink.deliver([event])
            return report.outcomes[0] if report.outcomes else Retry("sink handled nothing")
        except Exception as exc:  # noqa: BLE001 - such an event must never stop the worker
            return Retry(f"sink error: {type(exc).__name__}: {exc}")

    def heartbeat_soon(self) -> None:
        """Make the next heartbeat due now (something it reports changed: the health verdict)."""
        self._next_heartbeat = time.monotonic()
        self.wakeup.set()

    def heartbeat_if_due(self, outbox: Outbox | None = None) -> None:
        """Send a heartbeat if one is due and the sink is idle and well (see the docstring)."""
        if not self.heartbeat_interval or self._heartbeat is None:
            return
        now = time.monotonic()
        if now < self._next_heartbeat:
            return
        self._next_heartbeat = now + self.heartbeat_interval
        box = outbox or self._outbox
        assert box is not None
        if self.backoff.attempt or box.parked(self.sink.name) or box.pending(self.sink.name, 1):
            log.debug("heartbeat skipped: the sink is backing off, parked or busy",
                      extra=fields(sink=self.sink.name))
            return
        outcome = self._deliver_one(self._heartbeat(box, self.heartbeat_interval))
        if isinstance(outcome, Delivered):
            if self._heartbeat_failed:
                log.info("heartbeats delivered again", extra=fields(sink=self.sink.name))
            self._heartbeat_failed = False
            return
        reason = getattr(outcome, "reason", type(outcome).__name__)
        log.log(logging.DEBUG if self._heartbeat_failed else logging.WARNING,
                "heartbeat not delivered (skipped; the next one in %.0f s): %s",
                self.heartbeat_interval, reason, extra=fields(sink=self.sink.name))
        self._heartbeat_failed = True

    def _apply(self, box: Outbox, batch: list, report: DeliveryReport) -> float | None:
        done: list[tuple[int, str | None]] = []
        stopped = None
        for event, outcome in zip(batch, report.outcomes, strict=False):
            if isinstance(outcome, Delivered):
                done.append((event.seq, None))
            elif isinstance(outcome, DeadLetter):
                done.append((event.seq, outcome.reason))
                log.error(
                    "event dead-lettered: %s", outcome.reason,
                    extra=fields(sink=self.sink.name, event_id=event.event_id, state=event.state),
                )
            else:
                stopped = (event, outcome)
                break
        box.ack(self.sink.name, done)
        metrics.acknowledged(self.sink.name, batch, done)
        tracing.acknowledged(self.sink.name, batch, done)
        if done and stopped is None:
            if self.backoff.attempt:
                log.info("sink recovered", extra=fields(sink=self.sink.name))
                box.note_error(self.sink.name, None)
            self.backoff.reset()
            self._retry_logged = False
            return 0.0
        if stopped is None:  # nothing handled and no reason given
            stopped = (batch[0], Retry("sink handled nothing"))
        event, outcome = stopped
        if isinstance(outcome, Park):
            box.park(self.sink.name, outcome.reason)
            metrics.delivery_failed(self.sink.name, "parked")
            log.critical(
                "SINK PARKED: %s; its backlog is kept; run `se-forwarder sink resume %s` or "
                "restart the agent once the endpoint is back",
                outcome.reason, self.sink.name, extra=fields(sink=self.sink.name),
            )
            return None
        assert isinstance(outcome, Retry)
        box.note_error(self.sink.name, outcome.reason)
        metrics.delivery_failed(self.sink.name, "retry")
        delay = self.backoff.next_delay(outcome.after)
        level = logging.WARNING if not self._retry_logged else logging.DEBUG
        log.log(
            level, "delivery failed, retrying in %.1f s: %s", delay, outcome.reason,
            extra=fields(sink=self.sink.name, event_id=event.event_id),
        )
        self._retry_logged = True
        return delay
