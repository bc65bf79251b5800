"""What Azure's side knows of each scheduled event: its status through Completed and Canceled.

IMDS shows an event only while it is Scheduled or Started. Azure's server-side channels (the
Event Grid feed and Resource Graph's ``maintenanceresources``) also say how it ended:

- an event that leaves the document after it Started is ``Completed``;
- one that leaves while still Scheduled is ``Canceled``.

``AzureLedger.observe`` is given the engine's events after every change of the document and
returns what changed for Azure, one ``AzureEvent`` per change of an event (its status or any
other field): the feed publishes each one, Resource Graph shows the latest of each (finished
events stay, as they do in Azure, up to ``history`` of them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from se_forwarder.simulator.azure_fleet import AzureFleet

ACTIVE = ("Scheduled", "Started")
FINISHED = ("Completed", "Canceled")
EVENT_TYPE = "microsoft.maintenance/scheduledevents"
#: The scheduled-event fields Azure shows, in the order of the documentation's example.
PROPERTY_ORDER = (
    "DurationInSeconds",
    "Description",
    "EventId",
    "EventSource",
    "EventStatus",
    "EventType",
    "NotBefore",
    "Resources",
    "ResourceType",
)


@dataclass(frozen=True)
class AzureEvent:
    """One scheduled event as Azure shows it after one change."""

    event_id: str
    resource_id: str  # <owner>/providers/Microsoft.Maintenance/scheduledevents/<EventId>
    properties: dict[str, Any]
    zones: tuple[str, ...]
    updated: float  # when this change happened
    sequence: int  # 1 for the first state Azure saw, +1 per change

    @property
    def status(self) -> str:
        return str(self.properties["EventStatus"])

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class AzureLedger:
    """Azure's record of every event the simulator played (module docstring)."""

    def __init__(self, fleet: AzureFleet, history: int = 10_000) -> None:
        self.fleet = fleet
        self.history = history
        self._records: OrderedDict[str, AzureEvent] = OrderedDict()
        self._seen: dict[str, dict[str, Any]] = {}  # EventId -> last wire fields while active
        self._lock = threading.Lock()

    def observe(self, events: Sequence[Mapping[str, Any]], now: float) -> list[AzureEvent]:
        """Compare the engine's events with the last ones seen; what changed for Azure, in order."""
        current = {str(e["EventId"]): dict(e) for e in events}
        changed: list[AzureEvent] = []
        with self._lock:
            for event_id, fields in current.items():
                if self._seen.get(event_id) != fields:
                    changed.append(self._record(event_id, fields, fields["EventStatus"], now))
            for event_id in [i for i in self._seen if i not in current]:
                last = self._seen[event_id]
                status = "Completed" if last["EventStatus"] == "Started" else "Canceled"
                fields = {**last, "NotBefore": "" if status == "Completed" else last["NotBefore"]}
                changed.append(self._record(event_id, fields, status, now))
            self._seen = current
            self._trim()
        return changed

    def _record(self, event_id: str, fields: Mapping[str, Any], status: str, now: float) -> AzureEvent:
        resources = [str(r) for r in fields.get("Resources") or []]
        props = {k: fields.get(k) for k in PROPERTY_ORDER}
        props.update(EventStatus=status, Resources=resources)
        before = self._records.pop(event_id, None)
        record = AzureEvent(
            event_id=event_id,
            resource_id=self.fleet.event_id(event_id, resources),
            properties=props,
            zones=tuple(self.fleet.zones(resources)),
            updated=now,
            sequence=(before.sequence + 1) if before else 1,
        )
        self._records[event_id] = record
        return record

    def _trim(self) -> None:
        finished = [i for i, r in self._records.items() if r.finished]
        for event_id in finished[: max(0, len(finished) - self.history)]:
            del self._records[event_id]

    def clear(self) -> None:
        """Forget everything (the simulator was reset)."""
        with self._lock:
            self._records.clear()
            self._seen = {}

    def records(self) -> list[AzureEvent]:
        """The latest state of every event, oldest change first."""
        with self._lock:
            return list(self._records.values())

    def get(self, event_id: str) -> AzureEvent | None:
        with self._lock:
            record = self._records.get(event_id) or next(
                (r for i, r in self._records.items() if i.lower() == event_id.lower()), None
            )
            return None if record is None else replace(record)

    # -- how Azure shows a record -------------------------------------------------------------------

    def resource_info(self, record: AzureEvent) -> dict[str, Any]:
        """``data.resourceInfo`` of the feed's CloudEvent."""
        return {
            "id": record.resource_id,
            "name": record.event_id,
            "type": EVENT_TYPE,
            "location": self.fleet.location,
            "properties": dict(record.properties),
        }

    def row(self, record: AzureEvent) -> dict[str, Any]:
        """The ``maintenanceresources`` row of Resource Graph."""
        row = self.fleet.row(record.resource_id, record.event_id, EVENT_TYPE)
        row.update(properties=dict(record.properties), zones=list(record.zones) or None)
        return row
