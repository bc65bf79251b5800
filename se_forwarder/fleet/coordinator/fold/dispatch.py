"""The fold: one CloudEvent (a structured-mode dict) in, the fleet state updated. No I/O, no clock.

What it reads (``type`` = ``com.azure.scheduledevents.<suffix>``), each from the VM trust.py found
it comes from (``sender``; fold/reports.py: a VM speaks only for itself):

=====================  =========================================================================
``scheduled``          the event's type, source, Resources, NotBefore; the VM saw it Scheduled
``started``            the VM saw it Started (also the inferred ``started`` of the contract)
``completed``          the VM saw it gone after Started (or inferred); ``canceled``: gone unstarted.
                       A completed ``Terminate`` deleted its VMs: see scopes.py
``approved``           an echo: the VM approved it (``data.ApprovedBy`` says on whose word)
``approvalrejected``   the VM refused an approval message (``data.Message.Id``, ``ReasonCode``)
``prepared``           the VM's prepare hook succeeded; ``preparefailed``: it failed
``heartbeat``          the VM's agent is alive; its topology; ``data.Events`` it currently sees
``coordinator.<kind>`` the coordinator's own decisions (approve, ..., release), as trust.py let
                       them through; pause/resume/hold/release only in sequence (fold/decisions.py);
                       its ``sent`` records (an approval's message put in its queue), and its
                       ``acknowledge`` records (what Azure answered an approval through ARM)
=====================  =========================================================================

Registrations (``identity`` events) are not folded here: trust.py verifies them and
fold/identities.py binds each vmId to its key. Nor is Azure's own word (its feed, Resource Graph):
input/azure.py reads it from inputs no VM can write to, and fold/azure.py folds it.

Anything else (another type, a missing ``id``/``time``/``type``, a ``data`` that is not an object)
is counted in ``FoldStats`` and skipped; the fold never raises on what it reads. Every report
carries ``data.Vm`` (shared-contracts.md): the VM's identity and topology. Every report of an
EventId by a VM joins that VM to the group of the VMs that reported it before (co-reception:
availability sets and scale-set placement groups receive each other's events); only verified
reports do.

Bounded whatever a VM sends: the fold keeps of each VM's word only what ``Limits`` allow (limits.py:
events a heartbeat lists, tags, text lengths, Resources, events per VM, new VM keys per minute of
``received``, the hub's enqueued time), and never makes an event known from heartbeats alone;
``FoldStats.capped`` counts each drop by reason. ``FoldStats.skipped`` names at most
``SKIPPED_TYPES`` CloudEvent types and counts the rest together.

Merging rules (see state.py): a VM's status for an event is the highest it reported
(scheduled < started < canceled < completed); topology comes from the newest report; Resources
is the union of the reports'. A report of an EventId that ``prune`` removed is counted as
``late`` and skipped. Reports in any order, and any number of times, give the same state.

The fold updates ``state`` in place in O(1) per report (plus O(number of events a heartbeat
lists), at most ``events_per_heartbeat``, and O(reporters) of the event reported); nothing scans
the fleet.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..config.limits import DEFAULT_LIMITS, Limits
from ..config.trust import DEFAULT_SKEW
from ..schema import AGENT_TYPES, DECISION_KINDS, DECISION_PREFIX, PREFIX
from .caps import CAPPED, FOLDED, LATE, MALFORMED, SKIPPED, Dropped, FoldStats, moment
from .decisions import MAX_DECISION_BYTES, fold_decision
from .reports import CLAIMED, OWN, Sender, fold_report
from .state import FleetState

__all__ = ["CAPPED", "FOLDED", "LATE", "MALFORMED", "MAX_DECISION_BYTES", "OWN", "SKIPPED", "FoldStats",
           "Sender", "claimed", "fold_event", "fold_json"]


def fold_json(state: FleetState, text: str | bytes, stats: FoldStats | None = None,
              limits: Limits = DEFAULT_LIMITS, received: float | None = None) -> str:
    """``claimed`` on a structured-mode CloudEvent's JSON text."""
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        event = None
    if not isinstance(event, dict):
        if stats is not None:
            stats.count(MALFORMED, "")
        return MALFORMED
    return claimed(state, event, stats, limits, received)


def claimed(state: FleetState, event: Mapping[str, Any], stats: FoldStats | None = None,
            limits: Limits = DEFAULT_LIMITS, received: float | None = None, sender: Sender = CLAIMED,
            skew: float = DEFAULT_SKEW) -> str:
    """``fold_event`` with no trust layer: a report from the VM it names, as if verified (tests,
    benches, the demo's stand-ins). What is read from a hub is folded through the edge instead
    (gate.py), which says who sent it."""
    return fold_event(state, event, stats, limits, received, sender=sender, skew=skew)


def fold_event(state: FleetState, event: Mapping[str, Any], stats: FoldStats | None = None,
               limits: Limits = DEFAULT_LIMITS, received: float | None = None, *,
               sender: Sender, skew: float = DEFAULT_SKEW) -> str:
    """Fold one CloudEvent; the outcome: ``folded``, ``skipped``, ``malformed``, ``late`` or
    ``capped`` (dropped by a limit). ``received``: when the hub enqueued it (epoch seconds);
    ``sender``: who the edge (trust.py) found sent a report, ``OWN`` for this coordinator's own
    decisions;
    ``skew``: how far a report's time may be ahead of ``received``."""
    kind = event.get("type")
    kind = kind if isinstance(kind, str) else ""
    try:
        outcome = _fold(state, event, kind, limits, stats, received, sender, skew)
    except Dropped as drop:
        if stats is not None:
            stats.capped[drop.reason] += 1
        outcome = CAPPED
    except (TypeError, ValueError, AttributeError, OverflowError, KeyError):
        outcome = MALFORMED  # a report with fields of the wrong shape: counted, never fatal
    if stats is not None:
        stats.count(outcome, kind.removeprefix(PREFIX) if outcome == FOLDED else kind)
    return outcome


def _fold(state: FleetState, event: Mapping[str, Any], kind: str, limits: Limits, stats: FoldStats | None,
          received: float | None, sender: Sender, skew: float) -> str:
    decision = kind.startswith(DECISION_PREFIX)
    if decision:
        if kind[len(DECISION_PREFIX):] not in DECISION_KINDS:
            return SKIPPED
    elif not kind.startswith(PREFIX) or kind[len(PREFIX):] not in AGENT_TYPES:
        return SKIPPED
    ident, when = event.get("id"), moment(event.get("time"))
    data = event.get("data")
    if isinstance(data, str | bytes):
        data = json.loads(data)
    if not isinstance(ident, str) or not ident or when is None or not isinstance(data, dict):
        return MALFORMED
    if decision:
        return fold_decision(state, ident, kind[len(DECISION_PREFIX):], when, data)
    # a report's parts count their drops (caps.py): uncounted when the caller keeps no counts
    counted = stats if stats is not None else FoldStats()
    return fold_report(state, event, kind[len(PREFIX):], ident, when, data, limits, counted, received,
                       sender, skew)
