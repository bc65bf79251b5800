"""The fleet table of ``fleet tail`` (no Azure in here): CloudEvents deduplicated by (subject, type).

Every VM's agent publishes its CloudEvents to one hub (partition key = vmId). The same platform event
seen by several VMs arrives once per VM with the same ``subject`` (EventId) and ``type`` and a
different ``source``; the table shows it once, with how many VMs saw it. Any VM can send anything
to the hub, so every text a row keeps has its control characters stripped (printable.py): no
escape sequence reaches the terminal through the table, its lines or its JSON.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ...model import Kind
from ...printable import strip_controls

STATE_ORDER: dict[str, int] = {Kind.SCHEDULED: 0, Kind.APPROVED: 1, Kind.STARTED: 2, Kind.COMPLETED: 3,
                               Kind.CANCELED: 4, Kind.RECOVERED: 5}


@dataclass
class Row:
    """One event of the fleet: a (subject, type) pair, however many VMs reported it."""

    subject: str
    ce_type: str
    eventtype: str = ""
    first_seen: str = ""
    not_before: str | None = None
    sources: set[str] = field(default_factory=set)

    @property
    def state(self) -> str:
        return self.ce_type.rsplit(".", 1)[-1]

    def as_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "type": self.ce_type,
            "state": self.state,
            "eventtype": self.eventtype,
            "first_seen": self.first_seen,
            "not_before": self.not_before,
            "vms": len(self.sources),
            "sources": sorted(self.sources),
        }


class FleetTable:
    """CloudEvents deduplicated by (subject, type), counting the distinct sources (VMs)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = {}
        self.events = 0
        self.skipped = 0
        self.lock = threading.Lock()

    def add(self, event: dict[str, Any]) -> Row | None:
        """Record one CloudEvent; the row when it is new or gained a VM, else None."""
        subject, ce_type, source = event.get("subject"), event.get("type"), event.get("source")
        with self.lock:
            self.events += 1
            if not subject or not ce_type or not source:
                self.skipped += 1
                return None
            if ce_type in (Kind.HEARTBEAT.type, Kind.IDENTITY.type):
                return None  # an agent's sign of life or registration, not an event of the fleet
            key = (_shown(subject), _shown(ce_type))
            row = self.rows.get(key)
            if row is None:
                data: dict[str, Any] = event["data"] if isinstance(event.get("data"), dict) else {}
                not_before = data.get("NotBeforeUtc")
                row = Row(
                    subject=key[0],
                    ce_type=key[1],
                    eventtype=_shown(event.get("eventtype") or data.get("EventType") or ""),
                    first_seen=_shown(event.get("time") or ""),
                    not_before=_shown(not_before) if not_before else None,
                )
                self.rows[key] = row
            elif event.get("time") and _shown(event["time"]) < row.first_seen:
                row.first_seen = _shown(event["time"])
            if _shown(source) in row.sources:
                return None
            row.sources.add(_shown(source))
            return row

    def sorted_rows(self) -> list[Row]:
        with self.lock:
            rows = list(self.rows.values())
        return sorted(rows, key=lambda r: (r.first_seen, r.subject, STATE_ORDER.get(r.state, 9)))

    def render(self) -> str:
        """The whole table as text."""
        lines = [_row_text("FIRST SEEN", "STATE", "TYPE", "EVENT ID", "VMS", "NOT BEFORE")]
        for row in self.sorted_rows():
            lines.append(
                _row_text(
                    row.first_seen[:19].replace("T", " "),
                    row.state,
                    row.eventtype,
                    row.subject,
                    str(len(row.sources)),
                    row.not_before or "-",
                )
            )
        count, messages = len(self.rows), self.events
        lines.append(
            f"{count} event{'' if count == 1 else 's'} from {messages} message{'' if messages == 1 else 's'}"
            + self._skipped_text()
        )
        return "\n".join(lines)

    def _skipped_text(self) -> str:
        return f" ({self.skipped} were not CloudEvents)" if self.skipped else ""


def _row_text(first: str, state: str, kind: str, subject: str, vms: str, not_before: str) -> str:
    return f"{first:<19}  {state:<16}  {kind:<10}  {subject:<38}  {vms:>3}  {not_before}"


def _shown(value: Any) -> str:
    """A value from the hub as one printable line."""
    return strip_controls(str(value))
