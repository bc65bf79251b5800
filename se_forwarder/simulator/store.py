"""The simulated event list: events and their bookkeeping, the StartRequests received.

No lock and no clock of its own: ``engine.Simulator`` calls it under its lock with the time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from se_forwarder.simulator.wire import (
    DEFAULT_DESCRIPTIONS,
    DEFAULT_STARTED_SECONDS,
    MIN_NOTICE_SECONDS,
    check_event_fields,
    format_not_before,
    format_rfc1123,
    parse_rfc1123,
    render_event,
)
from se_forwarder.timestamps import rfc3339

PATCHABLE = {
    "EventType": "event_type",
    "ResourceType": "resource_type",
    "Resources": "resources",
    "Description": "description",
    "EventSource": "source",
    "DurationInSeconds": "duration",
    "StartedSeconds": "started_seconds",
}


@dataclass
class SimEvent:
    """One event and the simulator's bookkeeping about it."""

    event_id: str
    event_type: str
    resource_type: str
    resources: list[str]
    status: str
    description: str
    source: str
    duration: int
    not_before: float | None  # wall time it starts by itself, while Scheduled
    started_seconds: float  # simulated seconds it stays Started
    started_at: float | None = None
    approved_by: set[str] = field(default_factory=set)
    origin: str = "control"
    new_id_per_state: bool = False  # a new EventId when it starts, as Microsoft's mock server does
    wire_id: str | None = None  # the EventId IMDS shows, when not ``event_id`` (see above)

    def wire(self, not_before_format: str = "rfc1123") -> dict[str, Any]:
        """All fields, as the newest api-version shows them."""
        return {
            "EventId": self.wire_id or self.event_id,
            "EventType": self.event_type,
            "ResourceType": self.resource_type,
            "Resources": list(self.resources),
            "EventStatus": self.status,
            "NotBefore": "" if self.not_before is None else format_not_before(self.not_before,
                                                                               not_before_format),
            "Description": self.description,
            "EventSource": self.source,
            "DurationInSeconds": self.duration,
        }

    def label(self) -> str:
        return f"{self.event_type} {self.wire_id or self.event_id}"

    def start(self, when: float) -> None:
        self.status = "Started"
        self.not_before = None
        self.started_at = when
        if self.new_id_per_state:
            self.wire_id = str(uuid.uuid4()).upper()

    def added_line(self) -> str:
        when = "" if self.not_before is None else f", NotBefore {format_rfc1123(self.not_before)}"
        return (f"{self.label()} added ({self.status}{when}, {self.source}, "
                f"Resources {','.join(self.resources)})")


class EventStore:
    """The shared event list of every simulated VM, and every StartRequests EventId received."""

    def __init__(self, vm_names: Sequence[str], real_seconds: Callable[[float], float]) -> None:
        self.vm_names = tuple(vm_names)
        self.real_seconds = real_seconds
        self.events: dict[str, SimEvent] = {}
        self.approvals: list[dict[str, Any]] = []

    def new(self, fields: Mapping[str, Any], *, base: float, resources: Sequence[str] | None = None,
            origin: str = "control", new_id_per_state: bool = False) -> SimEvent:
        """An event from (checked) control-API fields; ValueError naming a bad one."""
        f = check_event_fields(fields)
        event_id = f.get("EventId") or str(uuid.uuid4()).upper()
        if event_id in self.events:
            raise ValueError(f"EventId {event_id} already exists")
        event_type = f.get("EventType", "Freeze")
        status = f.get("EventStatus", "Scheduled")
        event = SimEvent(
            event_id=event_id,
            event_type=event_type,
            resource_type=f.get("ResourceType", "VirtualMachine"),
            resources=list(f.get("Resources") or resources or self.vm_names),
            status=status,
            description=f.get("Description", DEFAULT_DESCRIPTIONS[event_type]),
            source=f.get("EventSource", "Platform"),
            duration=f.get("DurationInSeconds", -1),
            not_before=None,
            started_seconds=f.get("StartedSeconds", DEFAULT_STARTED_SECONDS),
            origin=origin,
            new_id_per_state=new_id_per_state,
        )
        if status == "Started":
            if f.get("NotBefore") or "NotBeforeInSeconds" in f:
                raise ValueError('a Started event has no NotBefore (it is "" once Started)')
            event.started_at = base
        else:
            event.not_before = self._not_before(f, event_type, base)
        return event

    def _not_before(self, f: Mapping[str, Any], event_type: str, base: float) -> float:
        if "NotBefore" in f:
            if not f["NotBefore"]:
                raise ValueError('a Scheduled event needs a NotBefore; "" is for Started events')
            return parse_rfc1123(f["NotBefore"])
        notice = f.get("NotBeforeInSeconds", MIN_NOTICE_SECONDS[event_type])
        return base + self.real_seconds(notice)

    def get(self, event_id: str) -> SimEvent:
        """The event by its first EventId or by the one IMDS shows now; KeyError naming it."""
        event = self.events.get(event_id) or self.shown().get(event_id)
        if event is None:
            raise KeyError(f"no event {event_id} in the document")
        return event

    def shown(self) -> dict[str, SimEvent]:
        """The events by the EventId IMDS shows now."""
        return {e.wire_id or e.event_id: e for e in self.events.values()}

    def patch(self, event: SimEvent, f: Mapping[str, Any], now: float) -> None:
        for key, attr in PATCHABLE.items():
            if key in f:
                setattr(event, attr, f[key])
        status = f.get("EventStatus", event.status)
        reschedule = "NotBefore" in f or "NotBeforeInSeconds" in f
        if status == "Started" and event.status == "Scheduled":
            event.start(now)
        elif status == "Scheduled" and (event.status == "Started" or reschedule):
            event.status = "Scheduled"
            event.started_at = None
            event.not_before = self._not_before(f, event.event_type, now)
        elif reschedule:
            raise ValueError("NotBefore only applies to a Scheduled event")

    def due(self, now: float) -> list[str]:
        """Start the events whose NotBefore passed, remove those whose Started phase ended."""
        changes = []
        for event in list(self.events.values()):
            if event.not_before is not None and event.not_before <= now:
                event.start(event.not_before)
                changes.append(f"{event.label()} Started (NotBefore passed)")
            if event.started_at is not None and \
                    event.started_at + self.real_seconds(event.started_seconds) <= now:
                del self.events[event.event_id]
                changes.append(f"{event.label()} removed (completed)")
        return changes

    def approve(self, event_ids: Sequence[str], *, voter: str, client: str, now: float,
                multi_tenant: bool, api_version: str,
                sees: Callable[[str, Sequence[str]], bool] | None = None, via: str = "imds",
                ) -> tuple[list[dict[str, Any]], list[str]]:
        """Record StartRequests from ``voter`` and start what they allow: (records, changes).

        All-or-nothing: with an EventId unknown to ``api_version`` nothing starts (the caller
        raises ApprovalError); every EventId is recorded either way. ``sees(voter, resources)``:
        whether the voter's document shows an event (a topology's groups), else every one does.
        ``via`` says how the approval came: ``imds`` (StartRequests) or ``arm`` (acknowledge).
        """
        visible = {shown: e for shown, e in self.shown().items()
                   if render_event(e.wire(), api_version) is not None
                   and (sees is None or sees(voter, e.resources))}
        unknown = [i for i in event_ids if i not in visible]
        records: list[dict[str, Any]] = []
        changes: list[str] = []
        for event_id in event_ids:
            record: dict[str, Any] = {
                "EventId": event_id,
                "time": rfc3339(now, milliseconds=True),
                "accepted": not unknown,
                "vm": voter,
                "client": client,
                "started": False,
                "reason": None,
                "via": via,
            }
            if unknown:
                record["reason"] = ("unknown EventId" if event_id in unknown
                                    else f"request also named unknown EventId {unknown[0]}")
            else:
                event = visible[event_id]
                event.approved_by.add(voter)
                waiting = set(event.resources) - event.approved_by
                if event.status == "Scheduled" and not (multi_tenant and waiting):
                    event.start(now)
                    record["started"] = True
                    how = "" if via == "imds" else f" through {via}"
                    changes.append(f"{event.label()} Started (approved by {voter}{how})")
                elif event.status == "Scheduled":
                    record["reason"] = f"waiting for approval by {', '.join(sorted(waiting))}"
                else:
                    record["reason"] = "already Started"
            records.append(record)
        self.approvals.extend(records)
        return records, changes

    # -- what scenario steps do (player.py) --------------------------------------------------

    def add_from_scenario(self, fields: Mapping[str, Any], due: float, origin: str,
                          new_id_per_state: bool = False) -> SimEvent:
        event = self.new(fields, base=due, origin=origin, new_id_per_state=new_id_per_state)
        self.events[event.event_id] = event
        return event

    def patch_from_scenario(self, event_id: str, fields: Mapping[str, Any], due: float,
                            only_if_scheduled: bool) -> str | None:
        """A scenario's ``patch`` (or ``start``: only while Scheduled); what changed, if anything."""
        event = self.events[event_id]
        before = event.wire()
        if not only_if_scheduled or event.status == "Scheduled":
            self.patch(event, fields, due)
        if event.wire() == before:
            return None
        return f"{event.label()} changed by scenario ({'start' if only_if_scheduled else 'patch'})"

    def remove_from_scenario(self, event_id: str, only_if_scheduled: bool) -> str | None:
        """A scenario's ``delete`` (or ``cancel``: only while Scheduled); what changed, if anything."""
        event = self.events[event_id]
        if only_if_scheduled and event.status != "Scheduled":
            return None
        del self.events[event_id]
        how = "canceled" if event.status == "Scheduled" else "completed"
        return f"{event.label()} removed ({how})"
