"""The way out: decisions published to the hub in order, then their approval messages sent.

The service folds each decision as it makes it and hands it here (``put``). One thread signs
(``Signer.decision``: this is the one place decisions are signed) and publishes what is queued,
in order, and only after a publish succeeded sends the approval messages among
those decisions (``approve``, not shadow): the hub always knows of an approval before any agent
does, so an instance taking over never misses one. Before every publish and every send it asks
``may_act(term)``: the decision must come from the current leadership term, and the lease must
still be comfortably held (blobs.py). When that fails with decisions still unpublished, they are
dropped and ``on_lost`` is called: the service's fold holds decisions nobody else will ever see,
so it rebuilds the fold from the snapshot and the hub. A publish that fails is retried (backoff
up to 5 s) while the term lasts, and so is one whose signing key cannot be read: nothing goes out
unsigned. A send that fails is logged and counted, and the core sends the approval elsewhere when
no echo comes (``echo_timeout``).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError
from ...telemetry import fields
from .events import Decision
from .hub import HubPublisher, PublishError
from .sender import Sender

log = logging.getLogger("se_forwarder.coordinator.output")

BACKOFF = (0.5, 1.0, 2.0, 5.0)
MAX_PUBLISH = 500  # decisions per publish call


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
    sent: int = 0
    send_failures: int = 0
    dropped: int = 0
    last_publish_error: str = ""
    failing_since: float | None = None  # monotonic, while publishing fails
    latencies: list[float] = field(default_factory=list)  # recent approval latencies (s)


class Output:
    def __init__(self, publisher: HubPublisher, sender: Sender, source: str,
                 may_act: Callable[[int], bool], on_lost: Callable[[int], None],
                 observe: Callable[[Decision, str, float | None], None] | None = None) -> None:
        self.publisher, self.sender, self.source = publisher, sender, source
        self.may_act, self.on_lost = may_act, on_lost
        self.observe = observe or (lambda _d, _outcome, _latency: None)
        self.stats = OutputStats()
        self._queue: queue.Queue[Outgoing | None] = queue.Queue()
        self._busy = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="coordinator-output", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, item: Outgoing) -> None:
        with self._lock:
            self._busy += 1
        self._queue.put(item)

    def idle(self) -> bool:
        """Nothing waiting to be published or sent (a snapshot now is of published decisions only)."""
        with self._lock:
            return self._busy == 0

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

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
        now = time.time()
        for item, event in zip(same, published, strict=True):
            d = item.decision
            if item.done is not None and not item.done.done():
                item.done.set_result(event)
            if d.kind != "approve" or d.shadow or d.via is not None:  # via ARM: the service acknowledges
                self.observe(d, "published", None)
                continue
            if not self.may_act(item.term):
                log.warning("approval %s not sent: this instance no longer leads", d.id,
                            extra=fields(event_id=d.event_id))
                self.observe(d, "not-sent", None)
                continue
            sent = self.sender.send(d, now)
            latency = time.monotonic() - item.trigger if item.trigger is not None else None
            if sent.ok:
                self.stats.sent += 1
                if latency is not None:
                    self.stats.latencies = (self.stats.latencies + [latency])[-10_000:]
                took = f" ({latency:.3f} s after the event arrived)" if latency is not None else ""
                log.info("sent approval %s to queue %s for %s%s", d.id, sent.queue,
                         d.target.name if d.target else "?", took, extra=fields(event_id=d.event_id))
                self.observe(d, "sent", latency)
            else:
                self.stats.send_failures += 1
                log.error("approval %s not delivered: %s (it goes to another affected VM when no echo "
                          "comes)", d.id, sent.problem, extra=fields(event_id=d.event_id))
                self.observe(d, "send-failed", None)
        if rest:
            self._handle(rest)

    def _publish(self, items: list[Outgoing]) -> list[dict[str, Any]] | None:
        """The signed CloudEvents, once published; None when this instance stopped leading."""
        events: list[dict[str, Any]] = []
        term = items[0].term
        for attempt in range(1_000_000):
            if not self.may_act(term):
                return None
            began = time.monotonic()
            try:
                events = events or [self.sender.signer.decision(i.decision) for i in items]
                self.publisher.publish([json.dumps(e, separators=(",", ":")) for e in events])
            except (PublishError, ConfigError) as exc:
                self.stats.publish_failures += 1
                self.stats.last_publish_error = str(exc)
                if self.stats.failing_since is None:
                    self.stats.failing_since = time.monotonic()
                log.error("%s; retrying", exc)
                time.sleep(BACKOFF[min(attempt, len(BACKOFF) - 1)])
                continue
            self.stats.published += len(events)
            self.stats.failing_since = None
            log.debug("published %d decision(s) in %.3f s", len(events), time.monotonic() - began)
            return events
        return None

    def _drop(self, items: list[Outgoing]) -> None:
        self.stats.dropped += len(items)
        for item in items:
            if item.done is not None and not item.done.done():
                item.done.set_exception(RuntimeError("this instance stopped leading before the decision "
                                                     "was published; nothing was done"))
        log.warning("dropped %d unpublished decision(s): this instance no longer leads; rebuilding the "
                    "fold from the snapshot and the hub", len(items))
        self.on_lost(items[0].term)
