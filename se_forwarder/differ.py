"""Previous document + current document -> transitions, per EventId."""

from __future__ import annotations

from .model import (
    SCHEDULED,
    STARTED,
    T_CANCELED,
    T_COMPLETED,
    T_SCHEDULED,
    T_STARTED,
    Document,
    Transition,
)


def diff(previous: Document | None, current: Document) -> list[Transition]:
    """The transitions that lead from ``previous`` to ``current``.

    The same incarnation carries the same information, so it yields nothing. Order: events of the
    current document in document order, then the ones that are gone.
    """
    if previous is not None and previous.incarnation == current.incarnation:
        return []
    before = previous.by_id() if previous is not None else {}
    now = current.by_id()
    out: list[Transition] = []
    for event in current.events:
        old = before.get(event.event_id)
        if event.status == SCHEDULED and old is None:
            out.append(Transition(T_SCHEDULED, event, current.incarnation))
        elif event.status == STARTED and (old is None or old.status != STARTED):
            out.append(Transition(T_STARTED, event, current.incarnation))
    for event_id, old in before.items():
        if event_id in now:
            continue
        state = T_COMPLETED if old.status == STARTED else T_CANCELED
        out.append(Transition(state, old, current.incarnation))
    return out
