"""Approval messages sent until they are sent, each once.

Every decision pass the service says which approvals want their message now (``want``: the ids
decide/evaluate.py lists in ``Evaluation.sends``, which are approvals without a ``sent`` record, not
echoed, held, paused or past NotBefore) and under which leadership term. One thread sends them:

- only once the approval's decision is on the hub (``published``), so an instance taking over
  always knows of an approval before any agent does;
- one attempt at a time per approval (``messages.ApprovalMessages.send``, on a thread of its own, at most
  ``MAX_ATTEMPTS`` at once), always under the approval's own id;
- an attempt that failed is tried again after a backoff (``BACKOFF``, per approval);
- an attempt that got no answer within ``DEADLINE`` counts as a failure (logged and counted by
  reach.py) but is not repeated while its request may still reach the queue: the next attempt
  starts only when that one has ended (the SDK's read timeout bounds it). A queue service that
  was only slow or paused thus receives the message once;
- when an attempt succeeds, ``on_sent(approval, queue, when, term)``: the service publishes the
  ``sent`` record, from which every instance counts the echo timeout;
- an approval no longer wanted (its ``sent`` record folded, echoed, held, ...) or whose term has
  ended is dropped; an attempt under way ends as it ends, and a success is still reported.

An approval sent in an earlier term whose ``sent`` record may not have made it to the hub (the
term ended first) is reported again, not sent again, in the next term, wanted or not: its event may
have been echoed or started meanwhile, and the record is still what says the message went out. So
is one whose record the service could not publish because the instance had stopped acting for a
moment within its term (``unreported``): at the next ``want``, once it acts again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ....backoff import Backoff
from ....telemetry import fields
from ..azure.reach import Reach, begin, describe_error
from ..signer import Approval
from .messages import ApprovalMessages, Sent

log = logging.getLogger("se_forwarder.coordinator.sending")

BACKOFF = Backoff(steps=(0.5, 1.0, 2.0, 5.0, 10.0))
DEADLINE = 5.0  # s an attempt may take before it counts as failed
MAX_ATTEMPTS = 16  # attempts under way at once
MAX_LATENCIES = 10_000
UNREPORTED = -1  # _Done.term of a sent record the service could not publish: no term has it


@dataclass
class SendStats:
    sent: int = 0
    failures: int = 0  # failed attempts (overdue ones included)
    overdue: int = 0
    latencies: list[float] = field(default_factory=list)  # recent: hub input -> message in the queue


@dataclass
class _Pending:
    approval: Approval
    term: int
    wanted: bool = True
    attempts: int = 0
    next_at: float = 0.0  # monotonic
    future: Future[Sent] | None = None
    started: float = 0.0
    overdue: bool = False


@dataclass
class _Done:
    approval: Approval
    queue: str
    when: float  # epoch s the message went out
    term: int  # reported in (UNREPORTED: in none yet)


OnSent = Callable[[Approval, str, float, int], None]


class QueueSender:
    def __init__(self, messages: ApprovalMessages, reach: Reach, may_act: Callable[[int], bool],
                 on_sent: OnSent, published: Callable[[str], bool]) -> None:
        self.messages, self.reach, self.may_act = messages, reach, may_act
        self.on_sent, self.published = on_sent, published
        self.stats = SendStats()
        self.triggers: dict[str, float] = {}  # approve id -> monotonic arrival of the input behind it
        self._pending: dict[str, _Pending] = {}
        self._done: dict[str, _Done] = {}  # sent: id -> what was reported, and in which term
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="coordinator-sending", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._closing.set()
        self._wake.set()
        self._thread.join(timeout)

    def wake(self) -> None:
        self._wake.set()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def want(self, approvals: list[Approval], term: int) -> None:
        """The approvals whose message is wanted now (all of them: others are dropped)."""
        again: list[tuple[Approval, str, float]] = []
        with self._lock:
            ids = {a.id for a in approvals}
            for item in self._pending.values():
                item.wanted = item.approval.id in ids
                if item.wanted:
                    item.term = term
            for approval in approvals:
                if approval.id not in self._done and approval.id not in self._pending:
                    self._pending[approval.id] = _Pending(approval, term)
            for done in self._done.values():
                if done.term != term:  # its report may have missed the hub as that term ended
                    done.term = term
                    again.append((done.approval, done.queue, done.when))
            # One reported again now is kept until a later ``want`` finds it was published
            # (``unreported`` not called), wanted or not: its record is what says it went out.
            reported = {a.id for a, _, _ in again}
            self._done = {i: d for i, d in self._done.items() if i in ids or i in reported}
        for approval, queue, when in again:
            self.on_sent(approval, queue, when, term)
        self._wake.set()

    def unreported(self, approval_id: str) -> None:
        """The ``sent`` record of ``approval_id`` was not published: the next ``want`` reports it."""
        with self._lock:
            done = self._done.get(approval_id)
            if done is not None:
                done.term = UNREPORTED

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing.is_set():
            self._wake.wait(0.2)
            self._wake.clear()
            try:
                self._step(time.monotonic())
            except Exception:  # noqa: BLE001 - the way out must survive anything
                log.exception("sending approval messages failed; trying again")

    def _step(self, now: float) -> None:
        with self._lock:
            items = list(self._pending.values())
        under_way = sum(1 for i in items if i.future is not None)
        for item in items:
            if item.future is not None:
                if item.future.done():
                    self._finish(item, now)
                elif not item.overdue and now - item.started >= DEADLINE:
                    self._overdue(item)
                continue
            if not item.wanted or not self.may_act(item.term):
                self._forget(item)
            elif now >= item.next_at and under_way < MAX_ATTEMPTS and self.published(item.approval.id):
                approval = item.approval
                item.future = begin(lambda a=approval: self.messages.send(a, time.time()),  # type: ignore[misc]
                                    "coordinator-send")
                item.future.add_done_callback(lambda _f: self._wake.set())
                item.started, item.overdue = now, False
                item.attempts += 1
                under_way += 1

    def _overdue(self, item: _Pending) -> None:
        item.overdue = True
        self.stats.failures += 1
        self.stats.overdue += 1
        self.reach.failed(f"sending approval {item.approval.id}: no answer within {DEADLINE:.0f} s "
                          "(not sent again while that request may still arrive)", overdue=True)

    def _finish(self, item: _Pending, now: float) -> None:
        future, item.future = item.future, None
        assert future is not None
        try:
            sent = future.result()
        except Exception as exc:  # noqa: BLE001 - the SDK raised instead of answering
            sent = Sent("", False, describe_error(exc), reached=False)
        approval = item.approval
        if sent.ok:
            self.reach.succeeded()
            self._sent(item, sent.queue, now)
            return
        if not item.overdue:
            self.stats.failures += 1
        if sent.reached:
            self.reach.succeeded()
            (log.warning if item.attempts == 1 else log.debug)(
                "approval %s not sent: %s; trying again", approval.id, sent.problem,
                extra=fields(event_id=approval.event_id))
        elif not item.overdue:
            self.reach.failed(f"sending approval {approval.id}: {sent.problem}")
        item.next_at = now + BACKOFF.delay(item.attempts)

    def _sent(self, item: _Pending, queue: str, now: float) -> None:
        approval, when = item.approval, time.time()
        with self._lock:
            self._pending.pop(approval.id, None)
            self._done[approval.id] = _Done(approval, queue, when, item.term)
        self.stats.sent += 1
        trigger = self.triggers.pop(approval.id, None)
        latency = now - trigger if trigger is not None else None
        if latency is not None:
            self.stats.latencies = (self.stats.latencies + [latency])[-MAX_LATENCIES:]
        took = f" ({latency:.3f} s after the event arrived)" if latency is not None else ""
        tries = f" at attempt {item.attempts}" if item.attempts > 1 else ""
        log.info("sent approval %s to queue %s for %s%s%s", approval.id, queue, approval.target.name or "?",
                 took, tries, extra=fields(event_id=approval.event_id))
        self.on_sent(approval, queue, when, item.term)

    def _forget(self, item: _Pending) -> None:
        with self._lock:
            self._pending.pop(item.approval.id, None)
        self.triggers.pop(item.approval.id, None)
        if item.attempts:
            log.info("approval %s no longer sent from here (%s)", item.approval.id,
                     "not wanted any more" if not item.wanted else "this instance stopped acting",
                     extra=fields(event_id=item.approval.event_id))
