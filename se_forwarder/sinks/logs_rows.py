"""CloudEvent -> one row of the Log Analytics table ``SeForwarderEvents_CL`` (pure).

``COLUMNS`` is the table's schema and the Data Collection Rule's stream declaration: the Bicep
(``bicep/modules/logs-table.bicep``, ``logs-ingestion.bicep``) declares the same columns, and a test
holds the three together. Every row has every column; what an event does not carry is null.

- ``TimeGenerated``: when the agent observed the transition (the CloudEvent's ``time``);
  ``CloudEventTime`` keeps it too, because Log Analytics replaces a ``TimeGenerated`` more than two
  days old (a backlog after a long outage) with the ingestion time.
- ``EventId``: null for heartbeats.
- ``State``: the last part of the type (``scheduled`` ... ``heartbeat``, ``coordinator.approve``).
- ``EventStatus``: the ``eventstatus`` extension (``Completed``/``Canceled`` included), else IMDS's.
- VM columns come from ``data.Vm`` (fault and update domains as integers, null when unknown).
- ``Data``: the whole ``data`` object, for anything the columns do not name.
"""

from __future__ import annotations

import math
from typing import Any

from ..model import TYPE_PREFIX, Kind

TABLE = "SeForwarderEvents_CL"
STREAM = "Custom-SeForwarderEvents"

# (name, Log Analytics type), in table order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("TimeGenerated", "datetime"),
    ("EventId", "string"),
    ("EventType", "string"),
    ("State", "string"),
    ("EventStatus", "string"),
    ("NotBefore", "datetime"),
    ("DurationInSeconds", "int"),
    ("EventSource", "string"),
    ("Description", "string"),
    ("Resources", "dynamic"),
    ("AffectsThisVm", "boolean"),
    ("Inferred", "boolean"),
    ("ApprovedBy", "string"),
    ("Reason", "string"),
    ("VmName", "string"),
    ("VmId", "string"),
    ("ResourceId", "string"),
    ("SubscriptionId", "string"),
    ("ResourceGroup", "string"),
    ("Location", "string"),
    ("Zone", "string"),
    ("FaultDomain", "int"),
    ("UpdateDomain", "int"),
    ("ScaleSet", "string"),
    ("Incarnation", "long"),
    ("CloudEventId", "string"),
    ("CloudEventType", "string"),
    ("CloudEventSource", "string"),
    ("CloudEventTime", "datetime"),
    ("Data", "dynamic"),
)


def to_row(event: dict[str, Any]) -> dict[str, Any]:
    """The row for one structured-mode CloudEvent; ValueError when it is not a CloudEvent at all."""
    if not isinstance(event, dict) or not isinstance(event.get("type"), str) or not event.get("id"):
        raise ValueError("not a CloudEvent (no type or id)")
    data: dict[str, Any] = event["data"] if isinstance(event.get("data"), dict) else {}
    vm: dict[str, Any] = data["Vm"] if isinstance(data.get("Vm"), dict) else {}
    kind = event["type"]
    resources = data.get("Resources")
    heartbeat = Kind.of(kind) is Kind.HEARTBEAT  # its subject is the VM, not an event
    row = {
        "TimeGenerated": _text(event.get("time")),
        "EventId": _text(data.get("EventId")) or (None if heartbeat else _text(event.get("subject"))),
        "EventType": _text(data.get("EventType")) or _text(event.get("eventtype")),
        "State": kind.removeprefix(TYPE_PREFIX),
        "EventStatus": _text(event.get("eventstatus")) or _text(data.get("EventStatus")),
        "NotBefore": _text(data.get("NotBeforeUtc")),
        "DurationInSeconds": _integer(data.get("DurationInSeconds")),
        "EventSource": _text(data.get("EventSource")),
        "Description": _text(data.get("Description")),
        "Resources": [str(r) for r in resources] if isinstance(resources, list) else None,
        "AffectsThisVm": data.get("AffectsThisVm") if isinstance(data.get("AffectsThisVm"), bool) else None,
        "Inferred": data.get("Inferred") is True,
        "ApprovedBy": _text(data.get("ApprovedBy")),
        "Reason": _text(data.get("Reason")),
        "VmName": _text(vm.get("name")),
        "VmId": _text(vm.get("vmId")) or _text(event.get("vmid")),
        "ResourceId": _text(vm.get("resourceId")),
        "SubscriptionId": _text(vm.get("subscriptionId")),
        "ResourceGroup": _text(vm.get("resourceGroupName")),
        "Location": _text(vm.get("location")),
        "Zone": _text(vm.get("zone")),
        "FaultDomain": _integer(vm.get("platformFaultDomain")),
        "UpdateDomain": _integer(vm.get("platformUpdateDomain")),
        "ScaleSet": _text(vm.get("vmScaleSetName")),
        "Incarnation": _integer(event.get("incarnation"), data.get("DocumentIncarnation")),
        "CloudEventId": _text(event.get("id")),
        "CloudEventType": kind,
        "CloudEventSource": _text(event.get("source")),
        "CloudEventTime": _text(event.get("time")),
        "Data": data,
    }
    return {name: row[name] for name, _ in COLUMNS}


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value)
    return text if text else None


def _integer(*values: Any) -> int | None:
    """The first value that is a whole number (or a string of one), else None."""
    for value in values:
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        text = value.strip() if isinstance(value, str) else ""
        if 0 < len(text) <= 18 and text.lstrip("-").isascii() and text.lstrip("-").isdigit():
            return int(text)
    return None
