"""``[[windows]]`` of ``coordinator.toml``: maintenance windows and blackout periods per scope. Pure.

Early approval in a scope happens only inside one of that scope's windows (a scope with none is
always open), and never inside one of its blackouts::

    [[windows]]                          # recurring: an RFC 5545 RRULE in a time zone, plus a duration
    scope = "zone:westeurope/1"          # a scope key as `pause` takes it (default "fleet")
    timezone = "Europe/Berlin"           # an IANA zone (default UTC); the rule runs on its wall clock
    rrule = "FREQ=WEEKLY;BYDAY=TU,TH;BYHOUR=2;BYMINUTE=0"
    duration = "3h"                      # 1m..31d: each occurrence is open this long
    name = "zone 1 nights"               # optional, shown in reasons, `status` and the page

    [[windows]]                          # a blackout: recurring as above, or absolute
    scope = "fleet"
    blackout = true
    start = "2026-12-24T00:00:00+01:00"  # RFC 3339 with an offset
    end = "2027-01-02T00:00:00+01:00"

The rule is read by python-dateutil (``dateutil.rrule``); its ``FREQ`` is ``DAILY``, ``WEEKLY``,
``MONTHLY`` or ``YEARLY`` (a window is not a minute-by-minute affair), ``COUNT`` and ``UNTIL`` work
as RFC 5545 says, and it starts at ``2024-01-01T00:00`` on the zone's wall clock unless the text
gives ``DTSTART`` (``DTSTART:20260105T020000`` on a line before ``RRULE:...``): that anchor is what
``INTERVAL=2`` counts from. A window that starts in an hour the zone skips (spring forward) opens
when the clock reaches the next hour that exists; on the day an hour repeats it opens at the first.

``at(now)`` says whether a window or blackout is open at ``now``; ``following(now)`` gives the
occurrence open now or the next one. Both cache the occurrence they found (the rule is iterated
again only when ``now`` leaves it), so a decision pass a second costs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ....errors import ConfigError
from ....validation import as_bool, as_str, as_tables, no_unknown
from .durations import DAY, human, moment, parse_duration

KEYS = ("scope", "timezone", "rrule", "duration", "name", "blackout", "start", "end")
FREQUENCIES = ("DAILY", "WEEKLY", "MONTHLY", "YEARLY")
ANCHOR = datetime(2024, 1, 1)  # a Monday; the rule's DTSTART on the zone's wall clock by default
SCOPE_KEY = re.compile(r"^(fleet|(group|scale_set|zone|fault_domain|update_domain|resource_group):\S.{0,400}"
                    r"|tag:[^=\s]{1,512}=.{0,256})\Z")
_FREQ = re.compile(r"(?:^|[;:\n])FREQ=([A-Z]+)", re.IGNORECASE)
NEVER = (float("inf"), float("inf"))


def scope_key(value: Any, where: str) -> str:
    """A scope key as ``pause`` takes it (decide/scopes.py), lower case; ConfigError otherwise."""
    text = as_str(value, where).strip().lower()
    if not SCOPE_KEY.match(text) or any(ord(c) < 32 for c in text):
        raise ConfigError(f"{where}: {value!r} is not a scope (fleet, group:<name>, zone:<region>/<zone>, "
                          "fault_domain:..., update_domain:..., scale_set:..., resource_group:..., "
                          "tag:<name>=<value>)")
    return text


def time_zone(value: Any, where: str) -> ZoneInfo:
    """An IANA time zone by name (``Europe/Berlin``, ``UTC``); ConfigError for one that does not exist."""
    text = as_str(value, where).strip()
    try:
        if not text or text.startswith(("/", ".")) or ".." in text:
            raise ValueError(text)
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(f"{where}: {text!r} is not a time zone (an IANA name such as Europe/Berlin "
                          "or UTC)") from None


@dataclass(frozen=True)
class Window:
    """One maintenance window (or, with ``blackout``, one blackout period) of one scope."""

    scope: str
    name: str
    blackout: bool = False
    zone: str = "UTC"
    rule: str = ""  # the RRULE text as given ("" for an absolute period)
    duration: float = 0.0
    start: float | None = None  # absolute periods: epoch seconds
    end: float | None = None
    _memo: dict[str, tuple[float, tuple[float, float]]] = field(
        default_factory=dict, compare=False, repr=False, hash=False)

    def at(self, now: float) -> bool:
        start, end = self.following(now)
        return start <= now < end

    def following(self, now: float) -> tuple[float, float]:
        """(start, end) of the occurrence open at ``now``, else of the next one; ``NEVER`` when none
        is left (an absolute period that ended, a rule whose COUNT or UNTIL ran out)."""
        if self.start is not None and self.end is not None:
            return (self.start, self.end) if now < self.end else NEVER
        since, found = self._memo.get("found", (float("inf"), NEVER))
        if since <= now < found[1]:  # the first occurrence ending after ``since`` is still the first
            return found             # ending after ``now`` (they all last ``duration``)
        found = self._search(now)
        self._memo["found"] = (now, found)
        return found

    def _search(self, now: float) -> tuple[float, float]:
        zone = ZoneInfo(self.zone)
        rule = _rule(self.rule)
        moment = datetime.fromtimestamp(now, zone).replace(tzinfo=None)
        length = timedelta(seconds=self.duration)
        candidate = rule.after(moment - length, inc=False)  # the first that ends after now
        while candidate is not None:
            start = _instant(candidate, zone)
            if start + self.duration > now:
                return start, start + self.duration
            candidate = rule.after(candidate, inc=False)
        return NEVER

    def describe(self) -> str:
        """How the window is written, for `status` and the page."""
        if self.start is not None and self.end is not None:
            return f"{_stamp(self.start)} to {_stamp(self.end)}"
        return f"{self.rule.replace(chr(10), ' ')} for {human(self.duration)} ({self.zone})"


def _rule(text: str) -> Any:
    from dateutil.rrule import rrulestr  # type: ignore[import-untyped]  # no stubs shipped

    if "DTSTART" in text.upper():  # its own anchor, read on the zone's wall clock
        return rrulestr(text, ignoretz=True, unfold=True)
    return rrulestr(text, dtstart=ANCHOR, unfold=True)


def _instant(wall: datetime, zone: ZoneInfo) -> float:
    """A wall-clock time of ``zone`` as epoch seconds: a skipped one at the next hour that exists,
    a repeated one at its first occurrence (module docstring)."""
    local = wall.replace(tzinfo=zone, fold=0)
    round_trip = datetime.fromtimestamp(local.timestamp(), zone).replace(tzinfo=None)
    if round_trip != wall:  # in a gap: move to where the clock resumes
        later = (wall + timedelta(hours=1)).replace(minute=0, second=0, tzinfo=zone, fold=0)
        return later.timestamp()
    return local.timestamp()


def _stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M UTC")


def load_windows(items: Any) -> tuple[Window, ...]:
    """``[[windows]]`` (module docstring); ConfigError naming the entry and key otherwise."""
    if items is None:
        return ()
    out = []
    for i, where, item in as_tables(items, "windows"):
        no_unknown(item, where, KEYS)
        out.append(_window(item, where, i))
    return tuple(out)


def _window(item: dict[str, Any], where: str, i: int) -> Window:
    scope = scope_key(item.get("scope", "fleet"), f"{where}.scope")
    blackout = as_bool(item.get("blackout", False), f"{where}.blackout")
    name = as_str(item.get("name", ""), f"{where}.name").strip()[:100] or \
        f"{'blackout' if blackout else 'window'} {i + 1}"
    zone = time_zone(item.get("timezone", "UTC"), f"{where}.timezone")
    absolute = {"start", "end"} & item.keys()
    if absolute:
        if not blackout:
            raise ConfigError(f"{where}: start/end make an absolute period, which only a blackout may be "
                              "(blackout = true); a window recurs: give rrule and duration")
        if {"rrule", "duration"} & item.keys():
            raise ConfigError(f"{where}: give either rrule and duration (recurring) or start and end "
                              "(absolute), not both")
        start, end = (moment(item.get(k), f"{where}.{k}") for k in ("start", "end"))
        if end <= start:
            raise ConfigError(f"{where}.end: must be after start")
        return Window(scope, name, True, zone.key, start=start, end=end)
    for key in ("rrule", "duration"):
        if key not in item:
            raise ConfigError(f"{where}.{key}: missing (e.g. rrule = \"FREQ=WEEKLY;BYDAY=SA;BYHOUR=2\", "
                              "duration = \"4h\")")
    duration = parse_duration(item["duration"], f"{where}.duration", 60.0, 31 * DAY)
    text = as_str(item["rrule"], f"{where}.rrule").strip()
    return Window(scope, name, blackout, zone.key, _checked_rule(text, f"{where}.rrule"), duration)


def _checked_rule(text: str, where: str) -> str:
    """The rule text if dateutil reads it with a frequency of ``FREQUENCIES``; ConfigError otherwise."""
    freq = _FREQ.search(text)
    if freq is None:
        raise ConfigError(f"{where}: {text!r} cannot be parsed as an RRULE (e.g. "
                          "\"FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0\")")
    if freq.group(1).upper() not in FREQUENCIES:
        raise ConfigError(f"{where}: FREQ={freq.group(1)} is too frequent for a window "
                          f"({', '.join(FREQUENCIES)})")
    try:
        rule = _rule(text)
        rule.after(ANCHOR, inc=True)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        said = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ConfigError(f"{where}: {text!r} cannot be parsed as an RRULE ({said})") from None
    return text

