"""The approver: decides on Scheduled events and POSTs StartRequests, off the polling thread.

Every approval, whatever its origin (policy, hook, coordinator, CLI), goes through ``approve``,
which refuses anything not in the current document with status Scheduled, POSTs to IMDS (unless
dry-run) and then records the ``approved`` CloudEvent in the outbox.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .. import cloudevents as ce
from ..config import ApprovalsSettings
from ..imds import ImdsClient, ImdsError
from ..model import SCHEDULED, T_APPROVED, Document, Transition, VmIdentity
from ..outbox import NewEvent, Outbox
from ..telemetry import fields
from .policy import Policy

log = logging.getLogger("se_forwarder.approvals")

RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)


def approved_event(
    doc: Document, event_id: str, vm: VmIdentity, approved_by: str, observed: datetime
) -> NewEvent:
    event = doc.by_id()[event_id]
    cloud = ce.build(
        T_APPROVED, event, doc.incarnation, vm, observed, extra_data={"ApprovedBy": approved_by}
    )
    return NewEvent(
        ce_id=ce.ce_id(event_id, T_APPROVED),
        event_id=event_id,
        state=T_APPROVED,
        ce_type=ce.ce_type(T_APPROVED),
        payload=ce.to_json(cloud),
        observed_at=observed.timestamp(),
    )


class Approver:
    def __init__(
        self,
        imds: ImdsClient,
        state_dir: Path,
        vm: VmIdentity,
        settings: ApprovalsSettings,
        *,
        dry_run: bool = False,
        on_recorded: Callable[[], None] = lambda: None,
    ) -> None:
        self.imds = imds
        self.state_dir = state_dir
        self.vm = vm
        self.settings = settings
        self.policy = Policy(settings.rules)
        self.dry_run = dry_run or settings.dry_run
        self.leader_only = settings.leader_only
        self.on_recorded = on_recorded
        self._doc: Document | None = None
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._decided: dict[str, str] = {}  # event_id -> what was decided and logged
        self._failures: dict[str, tuple[int, float]] = {}  # event_id -> (attempts, next time)
        self._thread: threading.Thread | None = None
        self._outbox: Outbox | None = None

    # -- wiring ---------------------------------------------------------------------------
    def offer(self, doc: Document, transitions: Sequence[Transition] = ()) -> None:
        """Called by the poller with every new document and the transitions that led to it."""
        with self._lock:
            self._doc = doc
        self._changed.set()

    def current(self) -> Document | None:
        with self._lock:
            return self._doc

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._run, args=(stop,), name="approver", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, stop: threading.Event) -> None:
        try:
            self._outbox = Outbox(self.state_dir)
            while not stop.is_set():
                self._changed.wait(1.0)
                self._changed.clear()
                if not stop.is_set():
                    self.consider(self._outbox)
        except Exception:
            log.exception("approver stopped")
        finally:
            if self._outbox is not None:
                self._outbox.close()

    # -- policy ---------------------------------------------------------------------------
    def consider(self, outbox: Outbox) -> None:
        """Apply the policy to every Scheduled event of the current document."""
        doc = self.current()
        if doc is None:
            return
        now = datetime.now(UTC)
        for event in doc.events:
            if event.status != SCHEDULED or outbox.has_event(ce.ce_id(event.event_id, T_APPROVED)):
                continue
            decision = self.policy.decide(event, self.vm.name, now)
            if decision.action != "approve":
                self._note(event.event_id, f"{decision.action}:{decision.rule}",
                           "policy: %s (rule %s)", decision.action, decision.rule or "none")
                continue
            if self.leader_only and (not event.resources or event.resources[0] != self.vm.name):
                self._note(event.event_id, "not-leader",
                           "not approving: this VM is not the first in Resources (leader_only)")
                continue
            self.approve(outbox, event.event_id, f"policy:{decision.rule}")

    def approve(self, outbox: Outbox, event_id: str, approved_by: str) -> bool:
        """Approve ``event_id`` if it is Scheduled in the current document; True once recorded."""
        doc = self.current()
        event = doc.by_id().get(event_id) if doc else None
        if doc is None or event is None or event.status != SCHEDULED:
            log.warning("not approving: event is not Scheduled in the current document",
                        extra=fields(event_id=event_id, origin=approved_by))
            return False
        attempts, not_before = self._failures.get(event_id, (0, 0.0))
        if time.monotonic() < not_before:
            return False
        if self.dry_run:
            self._note(event_id, "dry-run", "dry run: would approve (%s)", approved_by)
            return False
        try:
            self.imds.start_events([event_id])
        except ImdsError as exc:
            wait = RETRY_SECONDS[min(attempts, len(RETRY_SECONDS) - 1)]
            self._failures[event_id] = (attempts + 1, time.monotonic() + wait)
            log.warning("approval POST failed (retry in %.0f s): %s", wait, exc,
                        extra=fields(event_id=event_id, origin=approved_by))
            return False
        self._failures.pop(event_id, None)
        outbox.record(None, [approved_event(doc, event_id, self.vm, approved_by, datetime.now(UTC))])
        log.info("approved", extra=fields(event_id=event_id, origin=approved_by,
                                          incarnation=doc.incarnation))
        self.on_recorded()
        return True

    def _note(self, event_id: str, key: str, msg: str, *args: object) -> None:
        if self._decided.get(event_id) != key:
            self._decided[event_id] = key
            log.info(msg, *args, extra=fields(event_id=event_id))
