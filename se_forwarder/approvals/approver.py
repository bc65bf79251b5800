"""The approver: decides on Scheduled events and POSTs StartRequests, off the polling thread.

Every approval, whatever its origin (policy, hook, coordinator, CLI), goes through ``try_approve``,
which refuses anything not in the current document with status Scheduled (the document is read
from IMDS again right before the POST), POSTs to IMDS (unless dry-run) and then records the
``approved`` CloudEvent in the outbox.

Threads (all started by ``start``; none of them ever blocks polling):

- ``approver``: applies the policy to the current document, starts prepare/recover hooks when due
  and collects their results (a successful prepare may approve; a failed one emits an audit event),
  then reports ``recovered`` when due (``recovery.py``);
- ``approval-queue`` (only with ``[approvals.queue]``): the remote inbox, see ``queue/consumer.py``,
  once the VM's identity is known from the instance metadata (its name may be in the queue's, and
  messages name the VM they are for); forwarding never waits for that, approvals may;
- one short-lived thread per running hook command.

What decides an approval, for each Scheduled event not yet approved: the first matching rule's
action (none matched: ``wait``, which becomes ``prepare-then-approve`` when a prepare hook is
configured and ``approve_after_prepare`` is true); ``approve``: now (``ApprovedBy: policy:<rule>``);
``prepare-then-approve``: once this VM's prepare hook succeeded (``ApprovedBy: hook``); ``wait`` /
``ignore``: never by itself; ``leader_only``: only when this VM is the first entry of Resources
(policy and hook approvals; a coordinator's message or the CLI names its event explicitly and is
not subject to it); ``dry_run``: logged as "would approve", never POSTed.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import cloudevents as ce
from .. import metrics, tracing
from ..imds import ImdsClient, ImdsError
from ..model import SCHEDULED, Document, Kind, ScheduledEvent, Transition, VmIdentity
from ..outbox import Outbox
from ..telemetry import fields
from ..timestamps import rfc3339
from . import hooks as hooks_mod
from .policy import Policy
from .queue.names import STAND_IN_VM_ID
from .recovery import Recovery
from .settings import ApprovalsSettings, check_consistency

log = logging.getLogger("se_forwarder.approvals")

RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
IDLE_WAIT = 1.0
ERROR_PAUSE = 2.0  # after an unexpected error in one step of the approver thread

APPROVED, DRY_RUN, NOT_SCHEDULED, RETRY = "approved", "dry-run", "not-scheduled", "retry"


class Approver:
    def __init__(
        self, imds: ImdsClient | Callable[[], ImdsClient], state_dir: Path,
        vm: VmIdentity | Callable[[], VmIdentity], settings: ApprovalsSettings, *,
        dry_run: bool = False, on_recorded: Callable[[], None] = lambda: None,
        secret_env: Iterable[str] = (), identity_known: threading.Event | None = None,
        document: Callable[[], Document | None] | None = None,  # the poller's (else: as offered)
        queue_clients: Callable[[str], Any] | None = None,  # stand-in queues (queue.client.resolve)
        recovery: Recovery | None = None,  # reports ``recovered`` after the hooks' step
    ) -> None:
        check_consistency(settings)
        # A factory makes the client on first use: an agent that never approves keeps no session.
        self._imds: ImdsClient | None = imds if isinstance(imds, ImdsClient) else None
        self._make_imds = imds if not isinstance(imds, ImdsClient) else None
        self.state_dir, self.recovery = state_dir, recovery
        self._vm = vm if callable(vm) else (lambda: vm)
        # Set once the identity comes from the instance metadata (None: it does already).
        self.identity_known = identity_known
        self.settings = settings
        self.policy = Policy(settings.rules)
        self.dry_run, self.leader_only = dry_run or settings.dry_run, settings.leader_only
        self.on_recorded = on_recorded
        self.queue_settings = None
        if settings.queue is not None:
            from .queue.client import resolve  # ConfigError now (at start), not in a thread later

            # The name is made again from the real identity when the consumer starts; until the
            # instance metadata answers, a stand-in vmId lets a {vm_id} template be checked now.
            known = self.vm if self.vm.complete else dataclasses.replace(
                self.vm, vm_id=STAND_IN_VM_ID)
            self.queue_settings = resolve(settings.queue, known, clients=queue_clients)
        # Hooks never see a secret of the agent's: the queue's, and those the caller names (sinks).
        secret_env = {*secret_env, *(self.queue_settings.secret_env if self.queue_settings else ())}
        self.hooks = hooks_mod.HookRunner(settings.hooks, self._vm, secret_env=secret_env, wake=self.wake)
        self._document = document
        self._offered: Document | None = None  # kept only without ``document``
        self._lock = threading.Lock()
        # POSTs are serialised under the approval lock, on a client used only there; the fresh
        # document before each POST is read outside it, one reader at a time.
        self._approve_lock, self._read_lock = threading.Lock(), threading.Lock()
        self._post_imds: ImdsClient | None = None
        self._changed = threading.Event()
        self._event_seen = threading.Event()  # a polled document has an event (wait_for_event)
        self._decided: dict[str, str] = {}  # event_id -> what was decided and logged
        self._failures: dict[str, tuple[int, float]] = {}  # event_id -> (attempts, next time)
        self._threads: list[threading.Thread] = []

    @property
    def vm(self) -> VmIdentity:
        """The identity in use now (the host name until the instance metadata answered)."""
        return self._vm()

    @property
    def imds(self) -> ImdsClient:
        with self._lock:  # the approver and the queue consumer may both ask first
            if self._imds is None:
                assert self._make_imds is not None
                self._imds = self._make_imds()
            return self._imds

    @property
    def _poster(self) -> ImdsClient:
        """The client for StartRequests (its own, when the approver makes its clients)."""
        with self._lock:
            if self._post_imds is None:
                # A client handed in (not a factory) is shared: the read lock is not held here,
                # and a given client is one the caller uses from one thread.
                self._post_imds = self._make_imds() if self._make_imds is not None else self._imds
            assert self._post_imds is not None
            return self._post_imds

    def close(self) -> None:
        """Close the IMDS clients that were made."""
        for client in {id(c): c for c in (self._imds, self._post_imds) if c is not None}.values():
            client.close()

    # -- wiring ---------------------------------------------------------------------------
    def offer(self, doc: Document, transitions: Sequence[Transition] = ()) -> None:
        """Called by the poller with every new document and the transitions that led to it."""
        if self._document is None:
            self._offered = doc
        self._changed.set()
        if doc.events:
            self._event_seen.set()

    def current(self) -> Document | None:
        """The last polled document: from ``document``, else the last one offered."""
        return self._document() if self._document is not None else self._offered

    def start(self, stop: threading.Event) -> None:
        """Start the approver thread and, when configured, the approval-queue consumer."""
        self._threads.append(threading.Thread(target=self._run, args=(stop,), name="approver",
                                              daemon=True))
        if self.queue_settings is not None:
            self._threads.append(threading.Thread(target=self._guard, args=(self._consume, stop),
                                                  name="approval-queue", daemon=True))
        for thread in self._threads:
            thread.start()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._changed.set()
        self._event_seen.set()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def wake(self) -> None:
        self._changed.set()

    def wait_for_event(self, seconds: float) -> None:
        """Wait up to ``seconds``, less when a polled document brings an event or the agent stops:
        how the queue consumer idles while this VM has no Scheduled event."""
        self._event_seen.wait(seconds)
        self._event_seen.clear()

    def _consume(self, stop: threading.Event) -> None:
        """The queue consumer, once this VM's identity is known (see the module docstring)."""
        from .queue.consumer import consume

        assert self.queue_settings is not None and self.settings.queue is not None
        consume(self, self.settings.queue.queue, self.queue_settings, self.identity_known, stop)

    def _guard(self, target: Callable[[threading.Event], None], stop: threading.Event) -> None:
        """Run ``target`` until ``stop``; an unexpected exception restarts it after a pause."""
        while not stop.is_set():
            try:
                target(stop)
                return
            except Exception:
                log.exception("%s stopped; restarting it in %.0f s", threading.current_thread().name,
                              ERROR_PAUSE)
                stop.wait(ERROR_PAUSE)

    def _run(self, stop: threading.Event) -> None:
        outbox: Outbox | None = None
        try:
            outbox = Outbox(self.state_dir)
            for result in self.hooks.interrupted(outbox.hook_runs):
                self._hook_finished(outbox, result)
            while not stop.is_set():
                self._changed.wait(IDLE_WAIT if self._timed() else None)
                self._changed.clear()
                if stop.is_set():
                    break
                try:
                    self._step(outbox)
                except Exception:  # e.g. the database locked or full for a while: not fatal
                    log.exception("approver step failed; trying again in %.0f s", ERROR_PAUSE)
                    stop.wait(ERROR_PAUSE)
        except Exception:
            log.exception("approver stopped")
        finally:
            if outbox is not None:
                outbox.close()

    def _timed(self) -> bool:
        """Whether to look each second: time alone may change a decision (a retry, an unknown
        identity, a recovery waiting for a round of probes, a rule's notice, a prepare lead)."""
        doc, known, recovery = self.current(), self.identity_known, self.recovery
        if self._failures or (known is not None and not known.is_set()) or (recovery and recovery.waiting):
            return True
        return doc is not None and any(e.status == SCHEDULED for e in doc.events) and (
            self.policy.timed or self.hooks.timed)

    def _step(self, outbox: Outbox) -> None:
        doc = self.current()
        for result in self.hooks.collect(outbox.hook_runs):
            self._hook_finished(outbox, result)
        if doc is not None and self.hooks.configured:
            # The poller recorded how each gone event ended before offering this document.
            self.hooks.sync(outbox.hook_runs, doc.events, doc.incarnation, self._hook_eligible,
                            ran=lambda e: outbox.has_event(ce.ce_id(e.event_id, Kind.COMPLETED)))
        if self.recovery is not None:  # after the hooks: a recover hook due now has its row
            self.recovery.step(outbox)
        self.consider(outbox)

    # -- hooks ----------------------------------------------------------------------------
    def _hook_eligible(self, event: ScheduledEvent) -> bool:
        """Hooks run for events that affect this VM and that no rule ignores."""
        if not event.affects(self.vm.name):
            return False
        return self.policy.decide(event, self.vm.name).action != "ignore"

    def _hook_finished(self, outbox: Outbox, result: hooks_mod.HookResult) -> None:
        metrics.hook_run(result.hook, result.state)
        if result.ok:
            if result.state == hooks_mod.NONE:
                return
            log.info("%s hook succeeded (%.1f s)", result.hook, result.seconds or 0.0,
                     extra=fields(event_id=result.event_id, origin=result.hook))
            if result.hook == hooks_mod.PREPARE and outbox.record(None, [ce.for_outbox(ce.prepared(
                    result.event, result.incarnation, self.vm, seconds=result.seconds,
                    observed=datetime.now(UTC)))]):
                self.on_recorded()
            return
        log.warning("%s hook %s: %s", result.hook, result.state, result.detail,
                    extra=fields(event_id=result.event_id, origin=result.hook, reason=result.state))
        event = ce.hook_failed(
            result.hook, result.event, result.incarnation, self.vm,
            reason=f"{result.state}: {result.detail}", exit_code=result.exit_code,
            seconds=result.seconds, observed=datetime.now(UTC),
        )
        if outbox.record(None, [ce.for_outbox(event)]):
            self.on_recorded()

    # -- policy ---------------------------------------------------------------------------
    def consider(self, outbox: Outbox) -> None:
        """Apply the policy (and finished prepare hooks) to every Scheduled event of the document."""
        doc = self.current()
        if doc is None:
            return
        present = {e.event_id for e in doc.events}
        self._decided = {k: v for k, v in self._decided.items() if k in present}
        with self._approve_lock:
            self._failures = {k: v for k, v in self._failures.items() if k in present}
        now = datetime.now(UTC)
        for event in doc.events:
            if event.status != SCHEDULED or outbox.has_event(ce.ce_id(event.event_id, Kind.APPROVED)):
                continue
            origin = self._origin(outbox, event, now)
            if origin is None:
                continue
            if self.leader_only and (not event.resources or event.unreadable("Resources")
                                     or event.resources[0].casefold() != self.vm.name.casefold()):
                self._note(event.event_id, "not-leader",
                           "not approving: this VM is not the first in Resources (leader_only)")
                continue
            self.try_approve(outbox, event.event_id, origin, document=doc)

    def _origin(self, outbox: Outbox, event: ScheduledEvent, now: datetime) -> str | None:
        """``ApprovedBy`` if the event is to be approved now, else None (and the reason logged)."""
        decision = self.policy.decide(event, self.vm.name, now)
        action, rule = decision.action, decision.rule
        if action == "wait" and rule is None and self.hooks.prepares and self.hooks.approve_after_prepare:
            action = "prepare-then-approve"
        if action == "approve":
            return f"policy:{rule}"
        if action == "prepare-then-approve":
            state = self.hooks.prepare_state(outbox.hook_runs, event.event_id)
            if state == hooks_mod.SUCCEEDED:
                return "hook"
            why = state or ("not run: the event does not affect this VM"
                            if not event.affects(self.vm.name)
                            else "not started" if self.hooks.prepare_due(event, now)
                            else f"due when NotBefore is {self.hooks.prepare_lead:g} s away")
            matched = f"rule {rule} matched (prepare-then-approve)" if rule else "no rule matched"
            self._note(event.event_id, f"prepare:{state}",
                       "policy: %s; the prepare hook comes first (%s), then the agent approves",
                       matched, why)
            return None
        matched = f"rule {rule} matched ({action})" if rule else "no rule matched"
        starts = (f"it starts at its NotBefore {rfc3339(event.not_before)}" if event.not_before
                  else f"it starts at its NotBefore {event.raw.get('NotBefore')!r:.60} (unreadable)"
                  if event.unreadable("NotBefore") else "it starts when Azure starts it")
        then = ("no approval and no hooks; " if action == "ignore" else
                "not approving; ") + starts + (
                "" if action == "ignore" else ", unless approved remotely or with se-forwarder approve")
        self._note(event.event_id, f"{action}:{rule}", "policy: %s; %s", matched, then)
        return None

    # -- approving ------------------------------------------------------------------------
    def approve(self, outbox: Outbox, event_id: str, approved_by: str) -> bool:
        """Approve ``event_id`` if it is Scheduled in the current document; True once recorded."""
        return self.try_approve(outbox, event_id, approved_by) == APPROVED

    def try_approve(self, outbox: Outbox, event_id: str, approved_by: str, *,
                    document: Document | None = None) -> str:
        """POST StartRequests for ``event_id`` and record ``approved``.

        Returns ``approved``, ``dry-run``, ``not-scheduled`` (not Scheduled in ``document``, by
        default the last polled one) or ``retry`` (the POST failed; try again later). Safe to call
        from several threads (POSTs are serialised).
        """
        doc = document or self.current()
        event = doc.by_id().get(event_id) if doc else None
        if doc is None or event is None or event.status != SCHEDULED:
            log.warning("not approving: event is not Scheduled in the current document",
                        extra=fields(event_id=event_id, origin=approved_by))
            return NOT_SCHEDULED
        with self._approve_lock:
            attempts, not_before = self._failures.get(event_id, (0, 0.0))
            if time.monotonic() < not_before:
                return RETRY
            if self.dry_run:
                if self._decided.get(event_id) != "dry-run":
                    metrics.approval(approved_by, "dry_run")
                self._note(event_id, "dry-run", "dry run: would approve (%s)", approved_by)
                return DRY_RUN
        try:
            # ``doc`` may be seconds old (a batch of queue messages, a long prepare hook, a POST
            # queued behind another): read the document again right before the POST. Outside the
            # approval lock, so that the lock is held for one IMDS call at most (the POST).
            with self._read_lock:
                doc = self.imds.get_document()
        except ImdsError as exc:
            with self._approve_lock:
                return self._failed(event_id, approved_by, attempts, exc)
        event = doc.by_id().get(event_id)
        if event is None or event.status != SCHEDULED:
            log.warning("not approving: event is no longer Scheduled in the current document",
                        extra=fields(event_id=event_id, origin=approved_by))
            return NOT_SCHEDULED
        with self._approve_lock:
            if outbox.has_event(ce.ce_id(event_id, Kind.APPROVED)):
                return APPROVED  # another thread approved it meanwhile
            attempts, not_before = self._failures.get(event_id, (0, 0.0))
            if time.monotonic() < not_before:
                return RETRY
            try:
                self._poster.start_events([event_id])  # the only IMDS call under this lock
            except ImdsError as exc:
                return self._failed(event_id, approved_by, attempts, exc)
            self._failures.pop(event_id, None)
            stored = outbox.record(None, [ce.for_outbox(ce.approved(
                event, doc.incarnation, self.vm, approved_by, datetime.now(UTC)))])
        log.info("approved", extra=fields(event_id=event_id, origin=approved_by, incarnation=doc.incarnation))
        metrics.approval(approved_by, "approved")
        metrics.transitions(stored)
        tracing.recorded(stored)
        self.on_recorded()
        return APPROVED

    def _failed(self, event_id: str, approved_by: str, attempts: int, exc: ImdsError) -> str:
        """Back off from ``event_id`` after a failed read or POST (call with the approval lock)."""
        wait = RETRY_SECONDS[min(attempts, len(RETRY_SECONDS) - 1)]
        self._failures[event_id] = (attempts + 1, time.monotonic() + wait)
        log.warning("approval failed (retry in %.0f s): %s", wait, exc,
                    extra=fields(event_id=event_id, origin=approved_by))
        metrics.approval(approved_by, "failed")
        return RETRY

    def count_rejection(self, code: str) -> None:
        """A refused approval message (the reason is in the log and the audit event)."""
        metrics.approval("coordinator", "rejected")

    def _note(self, event_id: str, key: str, msg: str, *args: object) -> None:
        if self._decided.get(event_id) != key:
            self._decided[event_id] = key
            log.info(msg, *args, extra=fields(event_id=event_id))
