"""How the agent reads each field of a Scheduled Events entry: lenient fields.

IMDS and the servers that imitate it do not all write a field alike (Microsoft's mock server
writes NotBefore in ISO 8601, IMDS in RFC 1123). A field that cannot be read never costs its
event (``model.py`` refuses only what is not a document): it is carried as served, its problem is
added to ``problems`` (field, one line naming the value), and the agent reads it as follows.

==================  ==========================================================================
NotBefore           RFC 1123 (IMDS), or ISO 8601 / RFC 3339 with a zone (Microsoft's mock server);
                    "" or null: none (a Started event). Anything else: unknown (``not_before``
                    None, ``NotBeforeUtc`` null): notice rules never match, prepare runs at once,
                    and a Scheduled event that vanishes counts as run (``differ.py``)
EventStatus         Scheduled or Started, in any case. Other text counts as Started: never
                    approved, prepared at once, reported ``started`` then ``completed`` (missing
                    or not text: not an event, ``model.py``)
EventType           the five known types, in any case; other text is kept and matches no
                    ``type`` rule; missing or not text: ""
EventSource         Platform or User, in any case; other text is kept and matches no ``source``
                    rule; not text: none (Platform to the rules, as on old api-versions)
Resources           a list of names. Missing or anything else: unknown, so possibly this VM
                    (AffectsThisVm true, prepare runs); no ``resources`` or ``affects_this_vm``
                    rule matches it and ``leader_only`` never approves it
DurationInSeconds   an integer >= -1 (also written 5.0 or "5"); absent on old api-versions;
                    anything else: unknown, -1 to the rules
ResourceType,       text; anything else: none
Description
==================  ==========================================================================

Pure: no I/O, nothing of the agent; ``model.py`` calls these readers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

FIELDS = ("NotBefore", "EventStatus", "EventType", "EventSource", "Resources", "DurationInSeconds",
          "ResourceType", "Description")  # the fields in the table above
KNOWN_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
KNOWN_SOURCES = ("Platform", "User")

Problems = list[tuple[str, str]]  # (field as IMDS spells it, what is wrong with it)


def not_before(value: Any) -> datetime | None:
    """NotBefore as an aware UTC datetime ("" or None: None); ValueError naming the value else."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"NotBefore is not a string: {value!r:.60}")
    text = value.strip()
    iso = text[:4].isdigit()
    try:
        parsed = datetime.fromisoformat(text) if iso else parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        parsed = None
    if parsed is None:
        raise ValueError(f"NotBefore is neither an RFC 1123 nor an ISO 8601 date: {value!r:.60}")
    if parsed.tzinfo is None:
        if iso:
            raise ValueError(f"NotBefore has no time zone: {value!r:.60}")
        parsed = parsed.replace(tzinfo=UTC)  # RFC 1123 with "-0000": UTC, source unknown
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # "Fri, 31 Dec 9999 23:59:59 -2359" lies past year 9999 in UTC
        raise ValueError(f"NotBefore is out of range: {value!r:.60}") from None


def not_before_of(raw: Mapping[str, Any], problems: Problems) -> datetime | None:
    """The event's NotBefore; None when it has none or it cannot be read (a problem then)."""
    try:
        return not_before(raw.get("NotBefore"))
    except ValueError as exc:
        problems.append(("NotBefore", str(exc)))
        return None


def text(raw: Mapping[str, Any], key: str, problems: Problems, known: Sequence[str] = ()) -> str | None:
    """A text field: one of ``known`` in its own spelling whatever the case, other text as it is
    (a problem when ``known`` is given); None when absent, or not text (a problem)."""
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append((key, f"{key} is not text: {value!r:.60}"))
        return None
    if known and value not in known:  # as IMDS writes it, the common case, needs no more
        match = [k for k in known if k.casefold() == value.strip().casefold()]
        if match:
            return match[0]
        problems.append((key, f"{key} {value!r:.60} is not one of {', '.join(known)}"))
    return value


def event_type(raw: Mapping[str, Any], problems: Problems) -> str:
    """EventType, "" when missing or not text."""
    if "EventType" not in raw:
        problems.append(("EventType", "EventType is missing"))
    return text(raw, "EventType", problems, KNOWN_TYPES) or ""


def resources(raw: Mapping[str, Any], problems: Problems) -> tuple[str, ...]:
    """Resources; the names it has (a problem) when it is missing or not a list of names."""
    value = raw.get("Resources")
    if isinstance(value, list) and all(isinstance(r, str) for r in value):
        return tuple(value)
    what = "is missing" if value is None else f"is not a list of VM names: {value!r:.60}"
    problems.append(("Resources", f"Resources {what}"))
    return tuple(r for r in value if isinstance(r, str)) if isinstance(value, list) else ()


def duration(raw: Mapping[str, Any], problems: Problems) -> int | None:
    """DurationInSeconds; None when absent, or not an integer >= -1 (a problem)."""
    value = raw.get("DurationInSeconds")
    if value is None:
        return None
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif (isinstance(value, float) and value.is_integer()) or (
            isinstance(value, str) and value.strip().removeprefix("-").isdecimal()):
        number = int(value)
    if number is None or number < -1:
        problems.append(("DurationInSeconds",
                         f"DurationInSeconds is not an integer >= -1: {value!r:.60}"))
        return None
    return number
