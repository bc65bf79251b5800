"""``[limits]`` in ``coordinator.toml``: how much of the fold one VM's reports may take. Pure.

Every VM may send to the hub as much as its send right allows, so the fold keeps only so much of
what each VM says, whatever it sends (fold/dispatch.py, through fold/caps.py), and counts each drop in
``FoldStats.capped`` by reason (``CAPS``)::

    [limits]
    events_per_heartbeat = 50   # EventIds read from one heartbeat's data.Events; the rest are dropped
    tags_per_vm = 50            # tags kept per VM (Azure allows 50 on a resource); more: none kept
    text_chars = 512            # longest text kept (a name, an id, a tag, a description); longer
                                # texts are dropped (an identifier is never cut short)
    resources_per_event = 200   # names in one event's Resources (an availability set holds at most
                                # 200 VMs); a longer list is not kept, so the event stays unresolved
    events_per_vm = 50          # events one VM may have reported (in any state, until pruned); its
                                # reports of more events are dropped
    new_vms_per_minute = 1000   # new VM keys per minute of the hub's own time (when Event Hubs
                                # enqueued the report) that no verified registration backs;
                                # reports from further such VMs are dropped
    registrations_per_minute = 120000   # attested documents verified per minute of hub time; more
                                        # are refused (identity-rate), documents known are not counted
    registrations_per_vm = 10   # ... of them for one claimed vmId in a minute of hub time
    held_event_bytes = 8192     # reports held until their VM registers: only ones this small, with a
    held_bytes_per_vm = 65536   # GUID-shaped vmid, at most this much per vmId
    held_bytes = 16777216       # ... and this much in all (16 MiB); more are dropped (unregistered)

Defaults are the field defaults of ``Limits`` (the values above). They are far above what a
healthy fleet sends: a VM lists a few events at a time, carries its own tags, and a fleet of
10,000 VMs read from the start of the hub's retention is all known within 10 minutes of hub time.

The rate of new VM keys is measured in minutes of enqueued time, which Event Hubs sets and no
sender can choose: a report's own ``time`` is the sender's word (a flood could spread its times
over the past to find a fresh minute for each report). Reports of VMs already known are never
dropped by that limit. Under a flood which new VMs are admitted depends on the order reports
arrive in, so two instances may disagree until the flood's VMs are forgotten (``forget_after``).

=====================  =========================================================================
``heartbeat-events``   EventIds a heartbeat lists beyond ``events_per_heartbeat`` (not read)
``unreported-event``   a heartbeat's listing, or an ``approvalrejected``, of an EventId that no VM
                       reported in full: a heartbeat alone never makes an event known
``new-vm``             a report from a VM key not yet known and not registered, beyond
                       ``new_vms_per_minute`` new keys in that minute of hub time (the whole report
                       is dropped). A VM whose registration verified (Azure attested its vmId and
                       subscription) is admitted at once and never counted here
``vm-events``          a VM's report of one more event than the ``events_per_vm`` it reported
                       already (the report is dropped; its topology and heartbeat are kept)
``tags``               a VM's tags: all of them when more than ``tags_per_vm``, else each tag too
                       long or with control characters
``text``               a name, id or other identifier longer than ``text_chars``: kept as empty
``control``            text with control characters (printable.py): an identifier is kept as
                       empty, free text (a description, a reason) with them as spaces
``resources``          Resources longer than ``resources_per_event``, or with a name too long or
                       with control characters: not kept (the event stays unresolved)
``rejections``         rejections of one event beyond ``MAX_REJECTIONS`` (those of the
                       coordinator's own approval messages are always kept)
=====================  =========================================================================

These drops depend on the order in which reports arrive only once a limit is reached; and a
heartbeat that names an event before any full report of it is dropped (the next one after a
report counts).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ....errors import ConfigError
from ....validation import as_int, no_unknown

CAPS = ("heartbeat-events", "unreported-event", "new-vm", "vm-events", "tags", "text", "control",
        "resources", "rejections")
MAX_REJECTIONS = 100  # rejections kept per event (those of the coordinator's own messages: always)

_RANGES: dict[str, tuple[int, int]] = {
    "events_per_heartbeat": (1, 10_000),
    "tags_per_vm": (0, 1_000),
    "text_chars": (64, 4_096),
    "resources_per_event": (1, 100_000),
    "events_per_vm": (1, 10_000),
    "new_vms_per_minute": (1, 1_000_000),
    "registrations_per_minute": (1, 10_000_000),
    "registrations_per_vm": (1, 1_000),
    "held_event_bytes": (512, 1 << 20),
    "held_bytes_per_vm": (512, 1 << 24),
    "held_bytes": (0, 1 << 30),
}


@dataclass(frozen=True)
class Limits:
    events_per_heartbeat: int = 50
    tags_per_vm: int = 50
    text_chars: int = 512
    resources_per_event: int = 200
    events_per_vm: int = 50
    new_vms_per_minute: int = 1000
    registrations_per_minute: int = 120_000
    registrations_per_vm: int = 10
    held_event_bytes: int = 8192
    held_bytes_per_vm: int = 65536
    held_bytes: int = 16 << 20


DEFAULT_LIMITS = Limits()


def load_limits(raw: Any) -> Limits:
    """``[limits]`` (absent: the defaults); ConfigError naming the key otherwise."""
    if raw is None:
        return DEFAULT_LIMITS
    if not isinstance(raw, dict):
        raise ConfigError("limits: must be a table ([limits])")
    no_unknown(raw, "limits", tuple(f.name for f in fields(Limits)))
    return Limits(**{key: as_int(value, f"limits.{key}", *_RANGES[key]) for key, value in raw.items()})
