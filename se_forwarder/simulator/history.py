"""The simulator's record of every event's life: when it came, started and went, and why.

IMDS shows an event only while it is Scheduled or Started; ``approvals()`` records the StartRequests
received. ``EventHistory`` keeps the rest, from the engine's own changes (it is a change listener:
``Simulator.subscribe``), so a test or the fleet demo can say what Azure did without watching IMDS:

- ``added``: when the event appeared, and whether as ``Scheduled`` (with its NotBefore) or directly
  as ``Started`` (no notice: a hardware failure, a user's reboot);
- ``started``: when it started, and ``how``: ``approved`` (a StartRequests from ``approved_by``,
  at the time the simulator recorded it), ``not-before`` (its NotBefore passed), ``no-notice``
  (added Started) or ``changed`` (its status was set through the control API);
- ``ended``: when it left the document, ``completed`` (after it started) or ``canceled``.

Times are the engine's clock (epoch seconds; within one tick, 50 ms, of the change for a NotBefore
or an end of Started). An event shown under a new EventId once Started (``new_id_per_state``)
appears as two lives. ``GET /control/history`` lists them (``as_data``), oldest first; the last
``limit`` are kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from se_forwarder.simulator.wire import parse_rfc1123
from se_forwarder.timestamps import rfc3339

if TYPE_CHECKING:
    from se_forwarder.simulator.engine import Simulator

APPROVED, NOT_BEFORE, NO_NOTICE, CHANGED = "approved", "not-before", "no-notice", "changed"
COMPLETED, CANCELED = "completed", "canceled"


@dataclass
class EventLife:
    event_id: str
    event_type: str
    source: str
    resources: tuple[str, ...]
    added: float
    added_as: str  # Scheduled | Started
    not_before: float | None = None
    started: float | None = None
    how: str | None = None  # approved | not-before | no-notice | changed
    approved_by: str | None = None
    ended: float | None = None
    end: str | None = None  # completed | canceled
    duration: int = -1

    def as_data(self) -> dict[str, Any]:
        def stamp(t: float | None) -> str | None:
            return rfc3339(t, milliseconds=True) if t is not None else None

        return {"EventId": self.event_id, "EventType": self.event_type, "EventSource": self.source,
                "Resources": list(self.resources), "DurationInSeconds": self.duration,
                "added": stamp(self.added), "addedAs": self.added_as, "notBefore": stamp(self.not_before),
                "started": stamp(self.started), "how": self.how, "approvedBy": self.approved_by,
                "ended": stamp(self.ended), "end": self.end}


class EventHistory:
    """Subscribes to ``engine`` at once; ``lives()`` is the record (module docstring)."""

    def __init__(self, engine: Simulator, limit: int = 10_000) -> None:
        self.engine, self.limit = engine, limit
        self._lives: OrderedDict[str, EventLife] = OrderedDict()
        self._open: set[str] = set()
        self._lock = threading.Lock()
        self._changed(0, [])
        engine.subscribe(self._changed)

    def lives(self) -> list[EventLife]:
        with self._lock:
            return [EventLife(**vars(life)) for life in self._lives.values()]

    def as_data(self) -> list[dict[str, Any]]:
        return [life.as_data() for life in self.lives()]

    def _changed(self, _incarnation: int, _changes: list[str]) -> None:
        """After every change of the event list (under the engine's lock: quick, re-entrant calls)."""
        now = self.engine.now()
        events = {str(e["EventId"]): e for e in self.engine.snapshot()}
        with self._lock:
            for event_id, wire in events.items():
                life = self._lives.get(event_id)
                if life is None:
                    life = self._add(event_id, wire, now)
                if wire["EventStatus"] == "Started" and life.started is None:
                    self._start(life, now)
            for event_id in self._open - set(events):
                life = self._lives[event_id]
                life.ended, life.end = now, COMPLETED if life.started is not None else CANCELED
            self._open = set(events)

    def _add(self, event_id: str, wire: dict[str, Any], now: float) -> EventLife:
        not_before = parse_rfc1123(wire["NotBefore"]) if wire.get("NotBefore") else None
        life = EventLife(event_id, str(wire["EventType"]), str(wire["EventSource"]),
                         tuple(wire.get("Resources") or ()), now, str(wire["EventStatus"]), not_before,
                         duration=int(wire.get("DurationInSeconds", -1)))
        if life.added_as == "Started":
            life.started, life.how = now, NO_NOTICE
        self._lives[event_id] = life
        while len(self._lives) > self.limit:
            self._lives.popitem(last=False)
        return life

    def _start(self, life: EventLife, now: float) -> None:
        approval = next((a for a in reversed(self.engine.approvals())
                         if a["EventId"] == life.event_id and a["started"]), None)
        if approval is not None:
            life.started, life.how, life.approved_by = now, APPROVED, str(approval["vm"])
        elif life.not_before is not None and now >= life.not_before - 1.0:
            life.started, life.how = now, NOT_BEFORE
        else:
            life.started, life.how = now, CHANGED
