"""One maintenance event of the fleet, however many VMs report it, as one chat message.

Pure: the coordinator (fleet/coordinator/output/chat.py) gives what it folded about one EventId (its
type, source, NotBefore, Resources and the VMs it affects with their group, zone and fault
domain); ``message`` returns the structured CloudEvent that ``describe`` words like an agent's, so
the title reads the same as for one VM:

- one VM: ``web-3 (group web, FD 1, zone 2): Reboot scheduled for 14:30 UTC, in 15 min (Platform)``;
- a few: ``web-0, web-1, web-2 (group web, FDs 0, 1, 2, zone 2): Reboot started``;
- many: ``12 VMs: web-0, web-1, web-2 and 9 more (group web, FDs 0, 1, 2, zone 2): Reboot completed
  after 4 min``.

Values of a place (group, FD, zone) are shown when known; several are listed, more than
``LISTED_PLACES`` are cut with ``and N more``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .describe import LISTED_VMS, PREFIX, vm_list

STAGES = ("scheduled", "started", "completed", "canceled")
LISTED_PLACES = 4
_PLACES = (("group", "group", "groups"), ("fault_domain", "FD", "FDs"), ("zone", "zone", "zones"))


def vms_label(vms: Sequence[Mapping[str, str]]) -> str:
    """The affected VMs in a few words: names (a count when more than ``LISTED_VMS``), then where."""
    names = [vm.get("name", "") for vm in vms if vm.get("name")]
    if not names:
        return "unknown VMs"
    listed = vm_list(names, LISTED_VMS)
    who = f"{len(names)} VMs: {listed}" if len(names) > LISTED_VMS else listed
    where = [part for key, one, many in _PLACES if (part := _place(vms, key, one, many))]
    return f"{who} ({', '.join(where)})" if where else who


def _place(vms: Iterable[Mapping[str, str]], key: str, one: str, many: str) -> str:
    values = sorted({vm.get(key, "") for vm in vms if vm.get(key)}, key=_natural)
    if not values:
        return ""
    if len(values) == 1:
        return f"{one} {values[0]}"
    shown = ", ".join(values[:LISTED_PLACES])
    rest = len(values) - LISTED_PLACES
    return f"{many} {shown}" + (f" and {rest} more" if rest > 0 else "")


def _natural(value: str) -> tuple[int, int | str]:
    return (0, int(value)) if value.isdigit() else (1, value)


def message(stage: str, *, event_id: str, time: str, vms: Sequence[Mapping[str, str]],
            event_type: str = "", event_source: str = "", not_before: str = "", description: str = "",
            duration: int | None = None, resources: Sequence[str] = ()) -> dict[str, Any]:
    """The CloudEvent ``describe`` turns into the message of ``stage`` (one of ``STAGES``) of one
    EventId; ``time`` (RFC 3339) is when the fleet reached that stage, ``vms`` the affected VMs as
    ``{"name", "group", "fault_domain", "zone"}``. ``data.Vm.name`` carries the summary of the VMs."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (known: {', '.join(STAGES)})")
    data: dict[str, Any] = {"EventId": event_id, "EventType": event_type, "EventStatus": stage.capitalize(),
                            "EventSource": event_source, "Description": description,
                            "Resources": list(resources) or [vm["name"] for vm in vms if vm.get("name")],
                            "Vm": {"name": vms_label(vms)}}
    if not_before:
        data["NotBeforeUtc"] = not_before
    if duration is not None:
        data["DurationInSeconds"] = duration
    return {"specversion": "1.0", "type": PREFIX + stage, "source": "se-forwarder/coordinator",
            "id": f"{event_id}/{stage}", "subject": event_id, "time": time,
            "datacontenttype": "application/json", "data": {k: v for k, v in data.items() if v != ""}}
