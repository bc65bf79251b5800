"""Previous document + current document -> transitions, per EventId."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from .model import (
    INFERRED_APPROVED,
    INFERRED_NOT_BEFORE,
    INFERRED_NOT_BEFORE_UNKNOWN,
    SCHEDULED,
    STARTED,
    T_CANCELED,
    T_COMPLETED,
    T_SCHEDULED,
    T_STARTED,
    Document,
    ScheduledEvent,
    Transition,
)


def diff(
    previous: Document | None,
    current: Document,
    *,
    approved: Collection[str] = frozenset(),
    now: datetime | None = None,
) -> list[Transition]:
    """The transitions that lead from ``previous`` to ``current``.

    Rules, per EventId:

    - new and Scheduled -> ``scheduled``; new and Started (hardware failure) -> ``started``;
      Scheduled -> Started -> ``started``;
    - gone after Started -> ``completed``;
    - gone while last seen Scheduled -> ``started`` then ``completed``, both with
      ``inferred_from``, when at the moment it is found gone either this agent's StartRequests
      for it was accepted (``approved`` holds its EventId: ``approved``), or its NotBefore could
      not be read (``not-before-unknown``: it may have passed, and an impact reported that did
      not happen costs less than one that did and was never reported), or its NotBefore is not
      after ``now`` (``not-before-passed``); otherwise ``canceled``. A Started phase shorter than
      the polls could see, or one that passed while the agent was down, is the common cause;
      Azure cancelling an event it was allowed to start is rare. With ``now`` None only the
      approval and an unreadable NotBefore count.

    An event's ``status`` is already what the agent takes it to be (an EventStatus it does not
    know counts as Started: see ``event_fields.py``), so a field it could not read never costs
    a transition.

    The same incarnation carries the same information, so it yields nothing. Order: events of the
    current document in document order, then the ones that are gone. Pure: the facts about
    approvals and the clock are given by the caller.
    """
    if previous is not None and previous.incarnation == current.incarnation:
        return []
    before = previous.by_id() if previous is not None else {}
    now_ids = current.by_id()
    out: list[Transition] = []
    for event in current.events:
        old = before.get(event.event_id)
        if event.status == SCHEDULED and old is None:
            out.append(Transition(T_SCHEDULED, event, current.incarnation))
        elif event.status == STARTED and (old is None or old.status != STARTED):
            out.append(Transition(T_STARTED, event, current.incarnation))
    for event_id, old in before.items():
        if event_id in now_ids:
            continue
        if old.status == STARTED:
            out.append(Transition(T_COMPLETED, old, current.incarnation))
            continue
        reason = vanished_reason(old, approved, now)
        if reason is None:
            out.append(Transition(T_CANCELED, old, current.incarnation))
        else:
            out.append(Transition(T_STARTED, old, current.incarnation, reason))
            out.append(Transition(T_COMPLETED, old, current.incarnation, reason))
    return out


def vanished_reason(
    event: ScheduledEvent, approved: Collection[str], now: datetime | None
) -> str | None:
    """Why a Scheduled event that vanished must (or may) have run (``approved``,
    ``not-before-unknown``, ``not-before-passed``); None when it was canceled."""
    if event.event_id in approved:
        return INFERRED_APPROVED
    if event.unreadable("NotBefore"):
        return INFERRED_NOT_BEFORE_UNKNOWN
    if now is not None and event.not_before is not None and event.not_before <= now:
        return INFERRED_NOT_BEFORE
    return None
