"""What the fold keeps of one VM's word: texts, tags, Resources and new VMs within ``Limits``. Pure.

The fold (fold/dispatch.py) reads every field a VM sends through these helpers, and counts what it folded,
skipped and dropped in ``FoldStats`` (the fold's outcomes are named here). Each drop is counted in
``capped`` (``FoldStats.capped``) by its reason in limits.py's table; a drop of a whole report
raises ``Dropped``. An identifier (a name, an id, a tag) is kept exactly as sent or not at all:
cutting it short or removing characters could make it equal to another VM's. Free text (a
description, a reason) is cut and has its control characters turned into spaces. ``fingerprint``
tells a data.Vm read before (fold/reports.py), ``union`` merges an event's Resources.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ....model import MalformedDocument, parse_not_before
from ....printable import has_controls, strip_controls
from ....timestamps import seconds as moment
from ..config.limits import Limits
from .state import NO_TAGS, FleetState, Vm

NEW_VM_MINUTES = 60  # minutes of hub time the new-VM counts are kept for (reports arrive out of order)
FOLDED, SKIPPED, MALFORMED, LATE, CAPPED = "folded", "skipped", "malformed", "late", "capped"
SKIPPED_TYPES = 100  # CloudEvent types counted by name in FoldStats.skipped
OTHER_TYPES = "(other types)"
_DIGITS = re.compile(r"(\d+)")
SMALL = 8  # events a VM's count keeps in a tuple (may_report)


@dataclass
class FoldStats:
    """Counters for ``/metrics`` (not part of the state: a restart starts them at zero). Bounded:
    ``folded`` by the known types, ``skipped`` by SKIPPED_TYPES names, ``capped`` by CAPS."""

    folded: Counter[str] = field(default_factory=Counter)  # by type suffix
    skipped: Counter[str] = field(default_factory=Counter)  # by CloudEvent type
    malformed: int = 0
    late: int = 0
    dropped: int = 0  # whole reports dropped by a limit
    capped: Counter[str] = field(default_factory=Counter)  # by reason (limits.CAPS): whole and parts

    def count(self, outcome: str, kind: str) -> None:
        if outcome == FOLDED:
            self.folded[kind] += 1
        elif outcome == SKIPPED:
            name = kind[:200]
            if name not in self.skipped and len(self.skipped) >= SKIPPED_TYPES:
                name = OTHER_TYPES
            self.skipped[name] += 1
        elif outcome == MALFORMED:
            self.malformed += 1
        elif outcome == LATE:
            self.late += 1
        elif outcome == CAPPED:
            self.dropped += 1


class Dropped(Exception):
    """The whole report is dropped by a limit (``reason``: one of CAPS)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def event_id_ok(value: Any) -> TypeGuard[str]:
    """An EventId the fold keeps: a non-empty string of at most 200 characters, no control ones."""
    return isinstance(value, str) and 0 < len(value) <= 200 and not has_controls(value)


def identifier(value: Any, limit: int, capped: Counter[str]) -> str:
    """An identifier as sent, or "" (counted) when it is too long or holds control characters."""
    if not isinstance(value, str):
        return ""
    if len(value) > limit:
        capped["text"] += 1
        return ""
    if has_controls(value):
        capped["control"] += 1
        return ""
    return sys.intern(value)


def lowered(value: str) -> str:
    """``value`` in lower case, one string shared by every VM that says it (a subscription, a
    resource group, a region is said by thousands)."""
    return sys.intern(value.lower())


def lower(text: str) -> str:
    """``text`` in lower case, the same string when it is already (a vmId usually is)."""
    return text if (low := text.lower()) == text else low


def free_text(value: Any, limit: int, capped: Counter[str]) -> str:
    """Free text (a description, a reason): control characters as spaces (counted), cut at ``limit``."""
    if not isinstance(value, str):
        return ""
    shown = value[:limit * 2]
    if has_controls(shown):
        capped["control"] += 1
        shown = strip_controls(shown)
    return shown[:limit]


def scalar(value: Any) -> str:
    """A zone or domain as text ("" for anything but a string or a number)."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) and value else ""


def tags(value: Any, limits: Limits, capped: Counter[str]) -> dict[str, str]:
    """A VM's tags (names in lower case): none when there are more than ``tags_per_vm`` (Azure
    allows 50 on a resource), else each whose name and value are kept texts."""
    if not isinstance(value, dict) or not value:
        return NO_TAGS
    if len(value) > limits.tags_per_vm:
        capped["tags"] += len(value)
        return NO_TAGS
    out: dict[str, str] = {}
    chars = limits.text_chars
    for raw_name, raw_value in value.items():
        shown = str(raw_value).lower() if isinstance(raw_value, bool) else scalar(raw_value)
        ok = (isinstance(raw_name, str) and 0 < len(raw_name) <= chars and len(shown) <= chars
              and not has_controls(raw_name) and not has_controls(shown))
        if not ok:
            capped["tags"] += 1
            continue
        out[sys.intern(raw_name.lower())] = sys.intern(shown)
    return out or NO_TAGS


def admit(state: FleetState, limits: Limits, clock: float) -> None:
    """Count one new VM key in the minute of ``clock``; Dropped when that minute is full."""
    minute = int(clock // 60)
    counts = state.new_vms
    taken = counts.get(minute, 0)
    if taken >= limits.new_vms_per_minute:
        raise Dropped("new-vm")
    counts[minute] = taken + 1
    if len(counts) > 2 * NEW_VM_MINUTES:
        newest = max(counts)
        state.new_vms = {m: n for m, n in counts.items() if m > newest - NEW_VM_MINUTES}


def may_report(state: FleetState, vm_key: str, event_key: str, limits: Limits) -> bool:
    """Whether the VM may report this event: one it reported already, or one more while it reported
    fewer than ``events_per_vm`` (events pruned since no longer count)."""
    counts = state.vm_events
    if counts is None:  # after a restore or a prune: rebuilt from the events
        counts = state.vm_events = {}
        for key, record in state.events.items():
            for reporter in record.reports:
                _add(counts, reporter, counts.get(reporter, ()), key)
    held = counts.get(vm_key, ())
    if event_key in held:
        return True
    if len(held) >= limits.events_per_vm:
        held = tuple(k for k in held if k in state.events)
        counts[vm_key] = held
        if len(held) >= limits.events_per_vm:
            return False
    _add(counts, vm_key, held, event_key)
    return True


def _add(counts: dict[str, tuple[str, ...] | set[str]], vm_key: str, held: tuple[str, ...] | set[str],
         event_key: str) -> None:
    """One more event of the VM: a tuple while it reported a few (a quarter of a set's size), a set
    beyond ``SMALL``."""
    if isinstance(held, set):
        held.add(event_key)
    elif len(held) < SMALL:
        counts[vm_key] = (*held, event_key)
    else:
        counts[vm_key] = {*held, event_key}


def resources(value: list[Any], limits: Limits, capped: Counter[str]) -> tuple[str, ...] | None:
    """The names in Resources, or None (counted) when there are too many or one cannot be a name."""
    if len(value) > limits.resources_per_event:
        capped["resources"] += 1
        return None
    names = [r for r in value if isinstance(r, str) and r]
    if any(len(r) > limits.text_chars or has_controls(r) for r in names):
        capped["resources"] += 1
        return None
    return tuple(sys.intern(r) for r in names)


def topology(vm: Vm, info: dict[str, Any], limits: Limits, capped: Counter[str]) -> None:
    """The VM's topology from ``data.Vm`` (a newer report than the one it has)."""
    chars = limits.text_chars
    vm.resource_id = identifier(info.get("resourceId"), chars, capped)
    vm.subscription = lowered(identifier(info.get("subscriptionId"), chars, capped))
    vm.resource_group = lowered(identifier(info.get("resourceGroupName"), chars, capped))
    vm.location = lowered(identifier(info.get("location"), chars, capped))
    vm.zone = identifier(scalar(info.get("zone")), chars, capped)
    vm.scale_set = lowered(identifier(info.get("vmScaleSetName"), chars, capped))
    vm.fault_domain = identifier(scalar(info.get("platformFaultDomain")), chars, capped)
    vm.update_domain = identifier(scalar(info.get("platformUpdateDomain")), chars, capped)
    vm.placement_group = identifier(info.get("placementGroupId"), chars, capped)
    vm.tags = tags(info.get("tags"), limits, capped)


def not_before(data: dict[str, Any]) -> float | None:
    """An event's NotBefore: ``NotBeforeUtc``, else the RFC 1123 ``NotBefore`` IMDS gives."""
    found = moment(data.get("NotBeforeUtc"))
    if found is None and data.get("NotBefore"):
        try:
            parsed = parse_not_before(data.get("NotBefore"))
            found = parsed.timestamp() if parsed else None
        except MalformedDocument:
            found = None
    return found


def fingerprint(info: dict[str, Any]) -> int | None:
    """A hash of ``data.Vm`` as sent (None when it holds lists or objects within objects): an agent
    repeats its data.Vm in every report, and keeping a hash rather than the dict is 2 KB less per VM.
    Values other than text carry their type, so ``1``, ``1.0`` and ``true`` differ, and are hashed
    as their text: numbers' own hashes collide by design (-1 and -2, 1 and 2**61), text's do not."""
    try:
        return hash(tuple((k, v) if type(v) is str else
                          (k, "dict", tuple((n, _part(x)) for n, x in v.items())) if type(v) is dict
                          else (k, _part(v)) for k, v in info.items()))
    except TypeError:
        return None


def _part(value: Any) -> Any:
    if type(value) is str:
        return value
    if type(value) in (int, float, bool) or value is None:
        return type(value).__name__, repr(value)
    raise TypeError(type(value).__name__)  # a list or an object: not fingerprinted


def union(kept: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...]:
    """Both lists' names, each once (case-insensitively: the smallest spelling), in natural order
    (web-2 before web-10), whatever order the reports came in."""
    if names == kept:
        return kept
    by_lower: dict[str, str] = {}
    for name in (*kept, *names):
        low = name.lower()
        if low not in by_lower or name < by_lower[low]:
            by_lower[low] = name
    return tuple(sorted(by_lower.values(), key=_natural))


def _natural(name: str) -> tuple[tuple[tuple[int, str], ...], str]:
    return tuple((1, part) if not part.isdigit() else (0, part.zfill(20))
                 for part in _DIGITS.split(name.lower())), name
