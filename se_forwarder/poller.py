"""The poll loop: IMDS -> differ -> outbox, at a steady pace, never waiting for enrichment.

IMDS is a link-local, per-VM endpoint and the only source of truth, so a failing IMDS is retried
at the poll interval rather than backed off: a Started phase of a few seconds must not fall
between two polls. Polls start every ``poll_interval`` seconds (counted from the start of the
previous one), whatever happened:

- after a success, a 5xx, a timeout, a refused connection or a malformed reply: at the next tick;
- after a 429: after its ``Retry-After`` (at most 5 s), or about a second (1-1.25 s) without one.

All IMDS requests of the process share one rate limiter (``imds.MAX_REQUESTS_PER_SECOND``); a poll
interval shorter than its spacing (0.25 s) polls at that spacing instead. The longest gap between
the starts of two polls is the largest of the poll interval, the 429 wait, and ``imds.timeout``
for a request IMDS accepts and never answers (5 s by default), plus at most a second of rate
limiting when other threads took the slots. Only the very first poll may wait longer, up to
``imds.first_call_timeout``, and only when the state directory shows no successful poll within
24 h (``agent.py``; IMDS switches the service off after a day without requests).

Fields of an event the agent cannot read (``event_fields.py``) are logged and counted once per
event; the event itself goes through the differ like any other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from . import cloudevents as ce
from . import metrics, tracing
from .config import Settings
from .differ import diff
from .errors import StateError
from .imds import ImdsClient, ImdsError, throttled_delay
from .model import SCHEDULED, Document, Kind, Transition, VmIdentity
from .outbox import Outbox
from .telemetry import countdown, fields

log = logging.getLogger("se_forwarder.agent")

POLL_STATUS_EVERY = 10.0  # seconds between poll marks (``Outbox.mark_poll``) when nothing changes
LOUD_EVERY = 60  # a failing poll is logged once per change of reason, then every this many


class Poller:
    """Polls IMDS and records what changed; ``offer`` hands each document to the approver.

    It keeps the last document it handed on (``last``): the approver and the heartbeats read it
    from here, and the next poll compares with it.
    """

    def __init__(
        self,
        settings: Settings,
        imds: ImdsClient,
        outbox: Outbox,
        identity: Callable[[], VmIdentity],
        *,
        offer: Callable[[Document, list[Transition]], None],
        on_recorded: Callable[[], None],
        on_document: Callable[[Document], None] | None = None,
        stop: threading.Event,
    ) -> None:
        self.settings = settings
        self.imds = imds
        self.outbox = outbox
        self.identity = identity
        self.offer = offer
        self.on_recorded = on_recorded
        self.on_document = on_document
        self.stop = stop
        self._last_status_write = 0.0
        self._last_status: tuple[bool, str] | None = None
        self._last: Document | None = None
        self._last_lock = threading.Lock()
        self._unreadable_noted: set[str] = set()  # EventIds whose unreadable fields were logged

    def last(self) -> Document | None:
        """The last document handed on (None before the first one); from any thread."""
        with self._last_lock:
            return self._last

    def _hand_on(self, document: Document, transitions: list[Transition]) -> None:
        with self._last_lock:
            self._last = document
        self.offer(document, transitions)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        # No faster than the shared IMDS limiter admits requests (4/s): asked for more, polls
        # would bunch behind it (0.2 s, 0.2 s, 0.6 s...) and the longest gap, which bounds how
        # late a change is seen, would grow instead of shrink. Evenly spaced at the limit, it is
        # 0.25 s.
        interval = max(self.settings.imds.poll_interval, 1.0 / self.imds.limiter.limit)
        if interval > self.settings.imds.poll_interval:
            log.info("polling every %.2f s: IMDS allows 5 requests per second and the agent keeps "
                     "one of them for approvals (imds.poll_interval is %g s)", interval,
                     self.settings.imds.poll_interval)
        failures = 0
        last_reason: str | None = None
        next_start = time.monotonic()
        while not self.stop.is_set():
            wait = next_start - time.monotonic()
            if wait > 0 and self.stop.wait(wait):
                break
            started = time.monotonic()
            next_start = started + interval
            self._notice_other_writers()
            try:
                try:
                    self._first_or_poll()
                finally:
                    # From when the limiter let the request go: a poll it held back must not pull
                    # the next one up behind it.
                    next_start = max(next_start, self.imds.last_request_at + interval)
                if failures:
                    log.info("IMDS answers again after %d failed poll(s)", failures)
                failures, last_reason = 0, None
                continue
            except StateError as exc:
                # Disk full, database locked...: nothing was recorded, so the next poll diffs the
                # same change again. Keep polling rather than crash-looping.
                reason, text = "state", f"cannot record the document: {exc}"
                metrics.poll_failed("state")
            except ImdsError as exc:
                reason, text = exc.reason, str(exc)
                if exc.reason == "throttled":
                    next_start = max(next_start, time.monotonic() + throttled_delay(exc.retry_after))
                metrics.poll_failed(exc.reason, time.monotonic() - started)
                self.note_poll(False, f"{exc.reason}: {exc}")
            failures += 1
            # One line per change of reason, then one every LOUD_EVERY failures: never a flood.
            loud = reason != last_reason or failures % LOUD_EVERY == 0
            last_reason = reason
            level = (logging.ERROR if reason == "state" else logging.WARNING) if loud else logging.DEBUG
            log.log(level, "poll failed (%s), next poll in %.1f s: %s", reason,
                    max(0.0, next_start - time.monotonic()), text, extra=fields(reason=reason))

    def _notice_other_writers(self) -> None:
        """Wake the sinks when another process changed the outbox since the last poll (`approve`
        recorded an approval, `sink resume` unparked a sink): the delivery workers have no timer
        of their own. Threads of this process wake them themselves; a change of theirs seen here
        only wakes an idle worker once more."""
        try:
            changed = self.outbox.changed_elsewhere()
        except Exception as exc:  # noqa: BLE001 - a hint: whatever it raises, polling goes on
            log.debug("cannot read the outbox's change counter: %s", exc)
            return
        if changed:
            self.on_recorded()

    def _first_or_poll(self) -> None:
        if not self.imds.first_call_pending:
            self.poll_or_raise()
            return
        log.info("waiting for IMDS at %s (the first answer may take up to %.0f s)",
                 self.imds.base_url, self.imds.first_call_timeout)
        with countdown(log, "still waiting for the first IMDS answer", self.imds.first_call_timeout):
            self.poll_or_raise()

    def poll(self) -> bool:
        """One poll; False (logged) when IMDS failed or answered garbage."""
        try:
            self.poll_or_raise()
            return True
        except ImdsError as exc:
            log.warning("poll failed (%s): %s", exc.reason, exc, extra=fields(reason=exc.reason))
            metrics.poll_failed(exc.reason)
            self.note_poll(False, f"{exc.reason}: {exc}")
            return False

    # -- one poll ---------------------------------------------------------------------------
    def poll_or_raise(self) -> None:
        """One poll. An unchanged document (the same object from the IMDS client, which does not
        even parse a reply byte-identical to the last) costs a comparison and no write; a changed
        one is diffed and recorded with its CloudEvents in one transaction."""
        started = time.monotonic()
        document = self.imds.get_document()
        metrics.poll_succeeded(document.incarnation, time.monotonic() - started)
        self._note_unreadable(document)
        offered = self.last()
        previous = offered or self.outbox.previous_document()
        if previous is not None and previous.incarnation == document.incarnation:
            if document is previous or document.events == previous.events:
                if offered is None:
                    self._hand_on(document, [])
                self.note_poll(True, "ok", document.incarnation)
                return
            # Only after an incarnation reset (or while the agent was down across one) can the
            # same number carry other events; diff them rather than miss a transition.
            log.warning("DocumentIncarnation %d reused with different events; diffing",
                        document.incarnation, extra=fields(incarnation=document.incarnation))
            previous = Document(previous.incarnation - 1, previous.events)
        observed = datetime.now(UTC)
        if previous is not None and document.incarnation < previous.incarnation:
            log.warning(
                "DocumentIncarnation went back from %d to %d; diffing normally",
                previous.incarnation, document.incarnation,
                extra=fields(incarnation=document.incarnation),
            )
        transitions = diff(previous, document, approved=self._approved_among_gone(previous, document),
                           now=observed)
        stored = self.outbox.record(document, ce.transition_rows(transitions, self.identity(), observed))
        metrics.transitions(stored)
        tracing.recorded(stored)
        inferred: dict[tuple[str, str], str | None] = {
            (t.event_id, t.state): t.inferred_from for t in transitions if t.inferred_from}
        for event in stored:
            why = inferred.get((event.event_id, event.state))
            log.info("transition %s%s", event.state, f" (inferred: {why})" if why else "",
                     extra=fields(event_id=event.event_id, state=event.state,
                                  incarnation=document.incarnation))
        self.on_recorded()
        self._hand_on(document, transitions)
        if self.on_document is not None:
            self.on_document(document)
        self.note_poll(True, "ok", document.incarnation, force=True)

    def _note_unreadable(self, document: Document) -> None:
        """Log and count the fields the agent could not read, once per event (while it lasts)."""
        if self._unreadable_noted:
            self._unreadable_noted &= {e.event_id for e in document.events}
        for event in document.events:
            if not event.problems or event.event_id in self._unreadable_noted:
                continue
            self._unreadable_noted.add(event.event_id)
            for name, _ in event.problems:
                metrics.unreadable_field(name)
            log.warning("event %s: %s; the event is kept, these fields as IMDS served them",
                        event.event_id, "; ".join(p for _, p in event.problems),
                        extra=fields(event_id=event.event_id, incarnation=document.incarnation))

    def _approved_among_gone(self, previous: Document | None, document: Document) -> set[str]:
        """EventIds last seen Scheduled, now gone, whose approval (this agent's, or `approve` on
        this VM) IMDS accepted: the outbox holds their ``approved`` CloudEvent."""
        if previous is None:
            return set()
        present = document.by_id()
        return {
            e.event_id for e in previous.events
            if e.status == SCHEDULED and e.event_id not in present
            and self.outbox.has_event(ce.ce_id(e.event_id, Kind.APPROVED))
        }

    def note_poll(self, ok: bool, result: str, incarnation: int | None = None,
                  force: bool = False) -> None:
        """Record the poll's outcome for `status` when it changed; otherwise only touch the poll
        mark, at most every few seconds (no database write for an unchanged document)."""
        now = time.time()
        if not force and self._last_status == (ok, result):
            if now - self._last_status_write >= POLL_STATUS_EVERY:
                self.outbox.mark_poll()
                self._last_status_write = now
            return
        items: dict[str, object] = {"last_poll_at": str(now), "last_poll_ok": str(int(ok)),
                                    "last_poll_result": result}
        if ok:
            items["last_ok_poll_at"] = str(now)
        if incarnation is not None:
            items["incarnation"] = str(incarnation)
        self.outbox.set_meta(items)
        self._last_status_write = now
        self._last_status = (ok, result)
