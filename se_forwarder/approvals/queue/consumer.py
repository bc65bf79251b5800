"""Remote approvals: consume signed approval messages from an Azure Storage queue.

The consumer runs on its own thread (started by the approver) and never touches the polling loop.
For each message it asks ``messages.validate`` for a verdict, against a document fetched from IMDS
for the batch (the CURRENT document, not the last one polled):

- approve: POST StartRequests (through the approver, which records the ``approved`` CloudEvent
  with ``ApprovedBy: coordinator:<source>``), remember the message id, delete the message;
- wait (the EventId is not in the document yet): keep the message invisible for ``RETRY_SECONDS``
  and look again, until it expires;
- reject: record an ``approvalrejected`` audit CloudEvent, remember the id (signed messages only,
  so forged messages cannot block future ids), copy the message with its reason to
  ``<queue>-poison`` and delete it. Nothing is retried forever; nothing unreadable stops the loop.

What was done with each signed message is kept in the outbox's approval-message ledger (replays
are refused); the settings and clients come from ``client.py``, the names from ``names.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ...backoff import Backoff
from ...errors import one_line
from ...imds import ImdsClient, ImdsError
from ...model import Document, VmIdentity
from ...outbox import Outbox
from ...telemetry import fields
from ...timestamps import rfc3339
from ..audit import rejection_event
from ..messages import APPROVE, REJECT, WAIT, Verdict, validate
from .client import QueueSettings, create_if_missing
from .names import names_the_vm, queue_name, sharing_peers

log = logging.getLogger("se_forwarder.approvals.queue")

RETRY_SECONDS = 1  # how long a waiting message stays invisible before it is looked at again
POST_RETRY_SECONDS = 2  # after a failed approval POST
MAX_POISON_ATTEMPTS = 5  # a refused message is dropped if the poison queue fails this often
POISON_ORIGINAL_CHARS = 4096  # keeps the poison message well under the 64 KiB queue limit
BACKOFF = Backoff(steps=(1.0, 2.0, 5.0, 10.0, 30.0))
IDLE = -1.0  # what _cycle returns for an empty queue (see _idle_interval)


class Approving(Protocol):
    """What the consumer needs of the approver (``approver.Approver``)."""

    dry_run: bool
    state_dir: Path

    @property
    def vm(self) -> VmIdentity: ...

    @property
    def imds(self) -> ImdsClient: ...

    def current(self) -> Document | None: ...

    def wait_for_event(self, seconds: float) -> None: ...

    def try_approve(self, outbox: Outbox, event_id: str, approved_by: str, *,
                    document: Document | None = None) -> str: ...

    def on_recorded(self) -> None: ...

    def count_rejection(self, code: str) -> None: ...


def consume(approver: Approving, template: str, settings: QueueSettings,
            identity_known: threading.Event | None, stop: threading.Event) -> None:
    """Run the consumer until ``stop``, once the VM's identity is known from the instance
    metadata (``identity_known`` set, or None when it is already): the queue's name may be made
    from it, and messages name the VM they are for."""
    if identity_known is not None and not identity_known.is_set():
        why = (f"its name {template!r} is made from the VM's name"
               if "{vm_" in template else "messages are checked against the VM's name")
        log.warning("approval queue: waiting for the instance metadata before taking approvals "
                    "(%s); events are forwarded meanwhile", why)
        while not identity_known.wait(1.0):
            if stop.is_set():
                return
    name = queue_name(template, approver.vm.name, approver.vm.vm_id)
    QueueConsumer(approver, dataclasses.replace(settings, name=name)).run(stop)


class QueueConsumer:
    """Receives approval messages and acts on them (see the module docstring)."""

    def __init__(self, approver: Approving, settings: QueueSettings) -> None:
        self.approver = approver
        self.settings = settings
        self._client: Any = None
        self._poison: Any = None
        # IMDS has answered the poller long before: no 130 s first-call allowance here.
        self._imds = ImdsClient(approver.imds.base_url, approver.imds.api_version,
                                timeout=approver.imds.timeout,
                                first_call_timeout=approver.imds.timeout)
        self._waiting_logged: set[str] = set()
        self._sharing_logged: set[str] = set()
        self._last_problem: str | None = None
        self._failures = 0
        self._no_update_logged = False

    @property
    def vm(self) -> VmIdentity:
        return self.approver.vm

    # -- loop -----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        outbox = Outbox(self.approver.state_dir)
        try:
            outbox.approval_messages.forget_expired()
            keys = self.settings.keys.keys().ids if self.settings.keys else []
            log.info("listening for approval messages on queue %s (verify keys: %s)",
                     self.settings.name, ", ".join(keys) or "none")
            if self.settings.template and not names_the_vm(self.settings.template):
                log.warning("approval queue template %r names no VM: every VM using it shares queue %s, "
                            "and the coordinator sends none of them an approval (put {vm_name} or {vm_id} "
                            "in it)", self.settings.template, self.settings.name)
            while not stop.is_set():
                delay = self._cycle(outbox, stop)
                if delay == IDLE:
                    self.approver.wait_for_event(self._idle_interval())
                elif delay > 0:
                    stop.wait(delay)
        finally:
            outbox.close()
            self._imds.close()

    def _idle_interval(self) -> float:
        """How long an empty queue is left alone: ``poll_interval`` while the VM has an event
        (or no document yet), else ``idle_poll_interval``, cut short when an event appears."""
        settings, document = self.settings, self.approver.current()
        if document is None or document.events:
            return settings.poll_interval
        return settings.idle_poll_interval

    def _cycle(self, outbox: Outbox, stop: threading.Event) -> float:
        """One receive and the handling of its messages; the seconds to wait before the next
        (``IDLE`` when the queue was empty)."""
        try:
            if self._client is None:
                self._connect()
            batch = list(self._client.receive_messages(
                messages_per_page=32, max_messages=32,
                visibility_timeout=self.settings.visibility_timeout,
            ))
            if self._failures:
                log.info("approval queue %s reachable again", self.settings.name)
            self._failures, self._last_problem = 0, None
        except Exception as exc:  # noqa: BLE001 - any SDK/network error: back off, keep going
            return self._problem(f"cannot receive from approval queue {self.settings.name}: "
                                 f"{one_line(exc)}")
        if not batch:
            return IDLE
        document = self._document()
        self._note_sharing(document)
        for message in batch:
            if stop.is_set():
                break  # the rest become visible again after the visibility timeout
            try:
                self._handle(outbox, message, document)
            except Exception as exc:  # noqa: BLE001 - storage/database trouble with one message
                log.warning("approval message %s not handled (retried later): %s",
                            getattr(message, "id", "?"), one_line(exc))
        return 0.0

    def _problem(self, text: str) -> float:
        self._failures += 1
        delay = BACKOFF.delay(self._failures)
        level = logging.WARNING if text != self._last_problem else logging.DEBUG
        log.log(level, "%s (retry in %.0f s)", text, delay)
        self._last_problem = text
        self._client = None if self._failures >= 3 else self._client
        return delay

    def _connect(self) -> None:
        credential = self.settings.credential()
        client = self.settings.client(self.settings.name, credential)
        poison = self.settings.client(self.settings.poison_name, credential)
        for c, name in ((client, self.settings.name), (poison, self.settings.poison_name)):
            try:
                if not create_if_missing(c):
                    log.info("no right to create queue %s; it must exist already", name)
            except Exception as exc:  # noqa: BLE001 - receive() reports the real problem
                log.debug("could not create queue %s: %s", name, one_line(exc))
        self._client, self._poison = client, poison

    def _document(self) -> Document | None:
        """The current document from IMDS (the last polled one if IMDS does not answer)."""
        try:
            return self._imds.get_document()
        except ImdsError as exc:
            log.warning("IMDS unavailable for approval messages, using the last polled document: %s",
                        exc)
            return self.approver.current()

    def _note_sharing(self, document: Document | None) -> None:
        """Say once per peer when an event names a VM whose approval queue is this VM's too."""
        if document is None or not self.settings.template:
            return
        peers = {p for e in document.events for p in sharing_peers(self.settings.template, self.vm.name,
                                                                  e.resources)}
        for peer in sorted(peers - self._sharing_logged):
            self._sharing_logged.add(peer)
            log.warning("VM %s's approval queue is this VM's too (%s): the coordinator sends neither "
                        "of them an approval; rename a VM or put {vm_id} in the queue template",
                        peer, self.settings.name)

    # -- one message ----------------------------------------------------------------------
    def _handle(self, outbox: Outbox, message: Any, document: Document | None) -> None:
        ledger = outbox.approval_messages
        body = message.content if message.content is not None else ""
        try:
            verdict = validate(
                body,
                keys=self.settings.keys.keys() if self.settings.keys else [],
                now=datetime.now(UTC),
                document=document,
                vm_name=self.vm.name,
                seen_before=lambda mid: ledger.seen_before(mid, message.id),
                event_was_seen=lambda eid: _event_was_seen(outbox, eid),
            )
        except Exception as exc:  # noqa: BLE001 - validate never raises; if it did, do not loop
            verdict = Verdict(REJECT, "malformed", f"message could not be validated: {one_line(exc)}")
        if verdict.outcome == APPROVE and self.approver.dry_run:
            verdict = dataclasses.replace(
                verdict, outcome=REJECT, code="dry-run",
                detail=f"dry run: would approve {verdict.event_id} "
                       f"(coordinator:{verdict.source}); nothing was POSTed")
        if verdict.outcome == WAIT:
            self._wait(message, verdict)
        elif verdict.outcome == APPROVE:
            self._approve(outbox, message, verdict, document)
        else:
            self._reject(outbox, message, verdict, document)

    def _wait(self, message: Any, verdict: Verdict) -> None:
        if message.id not in self._waiting_logged:
            self._waiting_logged.add(message.id)
            log.info("approval message waits: %s (until %s)", verdict.detail,
                     rfc3339(verdict.expires_at, milliseconds=True) if verdict.expires_at else "?",
                     extra=fields(event_id=verdict.event_id))
        self._hide(message, self._retry_in(verdict, RETRY_SECONDS))

    def _hide(self, message: Any, seconds: int) -> None:
        """Keep ``message`` invisible ``seconds`` more (it was received for ``visibility_timeout``)."""
        from azure.core.exceptions import HttpResponseError

        try:
            self._client.update_message(message, visibility_timeout=seconds)
        except HttpResponseError as exc:
            if exc.status_code != 403:
                raise
            if not self._no_update_logged:
                self._no_update_logged = True
                log.warning("not allowed to update messages on queue %s (Storage Queue Data "
                            "Contributor grants it): waiting messages are looked at again only "
                            "every %d s", self.settings.name, self.settings.visibility_timeout)

    def _retry_in(self, verdict: Verdict, seconds: int) -> int:
        if verdict.expires_at is None:
            return seconds
        left = (verdict.expires_at - datetime.now(UTC)).total_seconds()
        return max(0, min(seconds, int(left) + 1))

    def _approve(self, outbox: Outbox, message: Any, verdict: Verdict,
                 document: Document | None) -> None:
        assert verdict.event_id and verdict.message_id and verdict.expires_at
        approved_by = f"coordinator:{verdict.source}"
        result = self.approver.try_approve(outbox, verdict.event_id, approved_by, document=document)
        if result == "retry":
            self._hide(message, self._retry_in(verdict, POST_RETRY_SECONDS))
            return
        if result != "approved":
            self._reject(outbox, message, dataclasses.replace(
                verdict, outcome=REJECT, code="not-scheduled",
                detail=f"EventId {verdict.event_id} is not Scheduled in the current document"),
                document)
            return
        _remember(outbox, verdict, message.id, "approved")
        self._client.delete_message(message)
        self._waiting_logged.discard(message.id)
        log.info("approval message %s acted on", verdict.message_id,
                 extra=fields(event_id=verdict.event_id, origin=approved_by))

    def _reject(self, outbox: Outbox, message: Any, verdict: Verdict,
                document: Document | None) -> None:
        now = datetime.now(UTC)
        outbox.record(None, [rejection_event(verdict, document=document, vm=self.vm,
                                             queue_message_id=message.id, queue=self.settings.name,
                                             observed=now)])
        self.approver.on_recorded()
        if verdict.authentic and verdict.message_id and verdict.code != "replayed":
            _remember(outbox, verdict, message.id, f"rejected:{verdict.code}")
        try:
            self._send_poison(message, verdict, now)
        except Exception as exc:  # noqa: BLE001
            forbidden = getattr(exc, "status_code", None) == 403  # least privilege: no send right
            if not forbidden and (getattr(message, "dequeue_count", 0) or 0) < MAX_POISON_ATTEMPTS:
                raise  # handled again after the visibility timeout
            log.error("poison queue %s unavailable (%s); dropping the refused message %s after %d "
                      "attempts (its approvalrejected event is recorded)", self.settings.poison_name,
                      one_line(exc), message.id, message.dequeue_count)
        self._client.delete_message(message)
        self._waiting_logged.discard(message.id)
        self.approver.count_rejection(verdict.code or "unknown")
        log.warning("approval message rejected (%s): %s", verdict.code, verdict.detail,
                    extra=fields(event_id=verdict.event_id, reason=verdict.code))

    def _send_poison(self, message: Any, verdict: Verdict, now: datetime) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        original = message.content if isinstance(message.content, str) else ""
        raw = original.encode("utf-8", "surrogatepass")
        body = json.dumps({
            "reason": verdict.code,
            "detail": verdict.detail,
            "rejectedAt": rfc3339(now, milliseconds=True),
            "vm": self.vm.name,
            "queue": self.settings.name,
            "queueMessageId": message.id,
            "dequeueCount": getattr(message, "dequeue_count", None),
            "messageId": verdict.message_id,
            "eventId": verdict.event_id,
            "authentic": verdict.authentic,
            "original": original[:POISON_ORIGINAL_CHARS],
            "originalTruncated": len(original) > POISON_ORIGINAL_CHARS,
            "originalBytes": len(raw),
            "originalSha256": hashlib.sha256(raw).hexdigest(),
        }, ensure_ascii=True)
        try:
            self._poison.send_message(body)
        except ResourceNotFoundError:
            create_if_missing(self._poison)
            self._poison.send_message(body)


def _event_was_seen(outbox: Outbox, event_id: str) -> bool:
    """The EventId was in an earlier document (as given, or in IMDS's upper-case spelling)."""
    return outbox.seen_in_states((event_id, event_id.upper(), event_id.lower()),
                                 ("scheduled", "started"))


def _remember(outbox: Outbox, verdict: Verdict, queue_message_id: str, outcome: str) -> None:
    assert verdict.message_id is not None
    expires = verdict.expires_at.timestamp() if verdict.expires_at else time.time()
    outbox.approval_messages.remember(verdict.message_id, queue_message_id, verdict.event_id or "",
                                      outcome, expires)
