"""``recovered``: this VM is back after an event that affected it, by its own probes and hook.

After an event whose ``data.AffectsThisVm`` was true is recorded ``completed`` (Azure ended it; a
canceled event never took the VM down), the agent reports ``recovered`` (id
``<EventId>/recovered``) once both hold:

- **its recover hook succeeded**, when one ran for the event (``approvals/hooks.py``: a hook runs
  for events it tracked from their first sight; ``RecoverHook`` says ``succeeded``, ``none`` when
  the section has no ``recover`` command, ``not-run`` when no hook tracked the event, e.g. one a
  rule ignores). A recover hook that failed, timed out or was interrupted means no ``recovered``
  for that event: its ``recoverfailed`` said so, and a person looks at the VM;
- **its probes pass**, with ``[health]``: the verdict is healthy and the last round, started after
  the completion was recorded, passed every probe. Without ``[health]`` the hook alone decides
  (and with no hook either, ``recovered`` follows ``completed`` at once).

``step`` runs on the approver's thread after the hooks were synchronised with the same document,
so a recover hook that is going to run has its row before this step looks for it. Pending
recoveries are kept in the outbox (``outbox/recoveries.py``): a restart, even after SIGKILL,
neither loses one nor sends one twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from .. import cloudevents as ce
from .. import metrics, tracing
from ..model import HEALTHY, HealthVerdict, VmIdentity, parse_event
from ..outbox import Outbox
from ..outbox.hook_runs import FAILED, INTERRUPTED, NONE, PREPARE, RECOVER, SUCCEEDED, TIMED_OUT
from ..outbox.recoveries import Pending
from ..telemetry import fields

log = logging.getLogger("se_forwarder.approvals.recovery")

WAIT, REPORT, ABANDON = "wait", "report", "abandon"


def decide(pending: Pending, prepare: str | None, recover: str | None,
           health: HealthVerdict | None) -> tuple[str, str]:
    """(``wait`` | ``report`` | ``abandon``, why or the ``RecoverHook`` value) for one pending
    recovery, from its hook runs' states (None: no row) and the verdict (None: no ``[health]``).
    Pure."""
    if prepare is None:
        hook = "not-run"
    elif recover is None:
        return WAIT, "its recover hook has not started yet"
    elif recover in (FAILED, TIMED_OUT, INTERRUPTED):
        return ABANDON, f"its recover hook {recover}; no recovered is reported for it"
    elif recover == SUCCEEDED:
        hook = "succeeded"
    elif recover == NONE:
        hook = "none"
    else:
        return WAIT, "its recover hook is running"
    if health is None:
        return REPORT, hook
    if health.verdict != HEALTHY:
        what = f"probe {health.probe}: {health.reason}" if health.probe else health.reason
        return WAIT, f"the application is {health.verdict} ({what})"
    if health.checked_at is None or health.checked_at < pending.completed_at or not health.last_round_ok:
        return WAIT, "waiting for a round of probes that passes after the event ended"
    return REPORT, hook


class Recovery:
    """Reports ``recovered`` for the pending recoveries that are due (module docstring)."""

    def __init__(self, vm: Callable[[], VmIdentity], health: Callable[[], HealthVerdict] | None = None,
                 *, on_recorded: Callable[[], None] = lambda: None) -> None:
        self._vm = vm
        self._health = health
        self.on_recorded = on_recorded
        self._noted: dict[str, str] = {}  # EventId -> the last reason logged for waiting
        self.waiting = False  # a recovery waits for something time may bring (a round of probes)

    def begin(self, outbox: Outbox) -> None:
        """At start, before the first poll: where the scan of completions starts."""
        outbox.recoveries.begin()

    def step(self, outbox: Outbox) -> None:
        """Take in new completions, then report what is due."""
        self._collect(outbox)
        health = self._health() if self._health is not None else None
        pending = outbox.recoveries.pending()
        self._noted = {k: v for k, v in self._noted.items() if any(p.event_id == k for p in pending)}
        self.waiting = False
        for item in pending:
            runs = outbox.hook_runs
            action, why = decide(item, runs.state(item.event_id, PREPARE),
                                 runs.state(item.event_id, RECOVER), health)
            self.waiting = self.waiting or action == WAIT
            if action == REPORT:
                self._report(outbox, item, health, why)
            elif action == ABANDON:
                log.warning("not reporting recovered: %s", why, extra=fields(event_id=item.event_id))
                outbox.recoveries.done(item.event_id)
            elif self._noted.get(item.event_id) != why:
                self._noted[item.event_id] = why
                log.info("recovered not yet: %s", why, extra=fields(event_id=item.event_id))

    def _collect(self, outbox: Outbox) -> None:
        seen = outbox.recoveries.completed_since_cursor()
        pending = []
        for completed in seen:
            if completed.data.get("AffectsThisVm") is not True:
                continue  # a peer's event: Azure shows every VM of a set the others' events
            incarnation = completed.data.get("DocumentIncarnation")
            pending.append(Pending(completed.event_id, {
                "event": ce.imds_fields(completed.data),
                "incarnation": incarnation if isinstance(incarnation, int) else 0,
            }, completed.observed_at))
        outbox.recoveries.add(seen, pending)

    def _report(self, outbox: Outbox, item: Pending, health: HealthVerdict | None, hook: str) -> None:
        try:
            event = parse_event(item.event["event"])
        except ValueError as exc:  # cannot happen for an event the outbox recorded; never loop on it
            log.error("cannot report recovered: the stored event is unreadable: %s", exc,
                      extra=fields(event_id=item.event_id))
            outbox.recoveries.done(item.event_id)
            return
        cloud = ce.recovered(event, int(item.event.get("incarnation", 0)), self._vm(),
                             datetime.now(UTC), completed_at=item.completed_at, health=health,
                             recover_hook=hook)
        stored = outbox.record(None, [ce.for_outbox(cloud)])
        outbox.recoveries.done(item.event_id)
        self._noted.pop(item.event_id, None)
        if stored:
            log.info("recovered (recover hook: %s; health: %s)", hook,
                     health.verdict if health else "no [health]", extra=fields(event_id=item.event_id))
            metrics.transitions(stored)
            tracing.recorded(stored)
            self.on_recorded()
