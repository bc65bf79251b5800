"""The policy part of ``coordinator.toml``: typed, validated once, every bad key a ConfigError.

The sections this module reads (the service reads the others; ``POLICY_SECTIONS`` lists these)::

    [policy]
    manage = ["Reboot", "Redeploy"]   # event types it may approve early; others are left alone
    approve_within = "1h"             # approve only events whose NotBefore is at most this far ahead
    require_prepared = false          # every affected VM must have reported `prepared` first
    min_healthy = "5m"                # a VM stays unavailable this long after its event completed
    free_slot = "min_healthy"         # when a VM's slot frees: "min_healthy" (the clock above) or
                                      # "recovered" (its agent reported `recovered`, or Azure's
                                      # health says Available for a VM without an agent)
    recover_timeout = "30m"           # with "recovered": no recovery this long after the event
                                      # ended raises a recovery-timeout alert (the VM stays down)
    heartbeat_timeout = "3m"          # a VM is watched while its last heartbeat is younger than this
    forget_after = "24h"              # a VM not heard from this long leaves the fleet (prune)
    echo_timeout = "2m"               # no `approved` echo this long after an approval: send it to
                                      # another affected VM
    max_lag = "5s"                    # no early approval while the fold is further behind a hub
                                      # than this (the lag guard, docs/coordinator.md#trust)
    group_tag = ""                    # a tag (sent by the agents, [vm] tags) naming the group
    shadow = false                    # decide and publish, send nothing

    [[budgets]]                       # any number; at most one per scope kind
    scope = "group"                   # group | scale_set | zone | fault_domain | update_domain |
                                      # resource_group | tag:<name> | fleet
    max_unavailable = 1               # a whole number >= 1, or a percentage "10%"
    free_slot = "recovered"           # optional: [policy] free_slot for this budget's scopes only

    [[blackouts]]                     # UTC windows with no early approval; either weekly ...
    days = ["sat", "sun"]             # the days a window starts on (default: every day)
    from = "22:00"                    # HH:MM UTC; `to` before `from` runs past midnight
    to = "06:00"                      # "24:00" is the end of the day
    name = "weekend nights"           # optional, shown in the defer reason
    [[blackouts]]                     # ... or absolute
    start = "2026-12-24T00:00:00Z"    # RFC 3339 with an offset, or a TOML offset date-time
    end = "2027-01-02T00:00:00Z"

    [[windows]]                       # per scope, in a time zone: maintenance windows and blackouts
                                      # (config/windows.py)

Defaults (the one place they are written down): the ``[policy]`` values shown above, one budget
``group = 1`` when ``[[budgets]]`` is absent, no blackouts. Durations are seconds (a number) or a
string ``"30s"``, ``"10m"``, ``"2h"``, ``"1d"``.

Percentages: the limit of a scope of ``size`` VMs is ``floor(size * percent / 100)``, but at least
1 (so "10%" of 25 VMs is 2, of 5 VMs is 1): rounding down keeps the budget a ceiling, and the
minimum lets a small scope still roll. ``size`` counts every VM of the scope the fold knows, watched
or not. A whole number is the limit whatever the size.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ....errors import ConfigError
from ....validation import as_bool, as_choice, as_str, as_tables, no_unknown
from .durations import DAY, moment, parse_duration
from .windows import Window, load_windows

POLICY_SECTIONS = ("policy", "budgets", "blackouts", "windows")
EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
SCOPE_KINDS = ("group", "scale_set", "zone", "fault_domain", "update_domain", "resource_group", "fleet")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_INDEX = {**{d: i for i, d in enumerate(DAYS)}, **{d: i for i, d in enumerate(_FULL_DAYS)}}
TAG_NAME = re.compile(r"^[^<>%&\\?/=\s][^<>%&\\?/=]{0,511}\Z")
_CLOCK = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)\Z")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*\Z")

_POLICY_KEYS = (
    "manage", "approve_within", "require_prepared", "min_healthy", "heartbeat_timeout",
    "forget_after", "echo_timeout", "group_tag", "shadow", "max_lag", "free_slot", "recover_timeout",
)
FREE_SLOT = ("min_healthy", "recovered")
# key: (default seconds, low, high)
_DURATIONS: dict[str, tuple[float, float, float]] = {
    "approve_within": (3600.0, 1.0, 30 * DAY),
    "min_healthy": (300.0, 0.0, DAY),
    "heartbeat_timeout": (180.0, 5.0, DAY),
    "forget_after": (DAY, 60.0, 90 * DAY),
    "echo_timeout": (120.0, 5.0, DAY),
    "max_lag": (5.0, 1.0, 3600.0),
    "recover_timeout": (1800.0, 1.0, DAY),
}


@dataclass(frozen=True)
class Budget:
    """``max_unavailable`` for every scope of one kind: ``count`` VMs, or ``percent`` of its size."""

    kind: str  # one of SCOPE_KINDS, or "tag:<name>" (name in lower case)
    count: int | None = None
    percent: float | None = None
    free_slot: str | None = None  # one of FREE_SLOT; None: [policy] free_slot (decide/recovery.py)

    def limit(self, size: int) -> int:
        """How many VMs of a scope of ``size`` VMs may be unavailable at once (module docstring)."""
        if self.count is not None:
            return self.count
        assert self.percent is not None
        return max(1, math.floor(size * self.percent / 100 + 1e-9))

    @property
    def text(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent:g}%"


@dataclass(frozen=True)
class Blackout:
    """A UTC window with no early approval: weekly (days + minutes of the day) or absolute."""

    name: str
    days: frozenset[int] = frozenset(range(7))  # 0 = Monday; the day a weekly window starts on
    start_minute: int | None = None  # weekly
    end_minute: int | None = None  # weekly; <= start_minute: ends on the next day
    start: float | None = None  # absolute, epoch seconds
    end: float | None = None

    def active(self, now: float) -> bool:
        if self.start is not None and self.end is not None:
            return self.start <= now < self.end
        assert self.start_minute is not None and self.end_minute is not None
        moment = datetime.fromtimestamp(now, UTC)
        day, minute = moment.weekday(), moment.hour * 60 + moment.minute
        if self.start_minute < self.end_minute:
            return day in self.days and self.start_minute <= minute < self.end_minute
        yesterday = (day - 1) % 7
        return (day in self.days and minute >= self.start_minute) or (
            yesterday in self.days and minute < self.end_minute
        )


@dataclass(frozen=True)
class Policy:
    budgets: tuple[Budget, ...] = (Budget("group", count=1),)
    manage: frozenset[str] = frozenset({"Reboot", "Redeploy"})
    approve_within: float = _DURATIONS["approve_within"][0]
    require_prepared: bool = False
    min_healthy: float = _DURATIONS["min_healthy"][0]
    heartbeat_timeout: float = _DURATIONS["heartbeat_timeout"][0]
    forget_after: float = _DURATIONS["forget_after"][0]
    echo_timeout: float = _DURATIONS["echo_timeout"][0]
    max_lag: float = _DURATIONS["max_lag"][0]
    group_tag: str = ""  # lower case; "" = groups are scale sets and learned availability sets
    shadow: bool = False
    free_slot: str = "min_healthy"  # one of FREE_SLOT (decide/recovery.py)
    recover_timeout: float = _DURATIONS["recover_timeout"][0]
    blackouts: tuple[Blackout, ...] = ()
    windows: tuple[Window, ...] = ()  # [[windows]]: maintenance windows and blackouts per scope (windows.py)
    queue_template: str = "se-approvals-{vm_name}"  # not a [policy] key: [queues] queue (queues.py)
    acknowledge: bool = False  # not a [policy] key: [azure] acknowledge (decide/arm_path.py)
    azure_fresh_for: float = 0.0  # not a [policy] key: from [azure] arg_interval; 0: no Azure input
    subscriptions: frozenset[str] = frozenset()  # not a [policy] key: [shard] subscriptions; empty: all
    by_kind: dict[str, Budget] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_kind", {b.kind: b for b in self.budgets})

    def free_slot_of(self, kind: str) -> str:
        """``free_slot`` of the budget of scope kind ``kind``: its own, else ``[policy]``'s."""
        budget = self.by_kind.get(kind)
        return budget.free_slot if budget is not None and budget.free_slot else self.free_slot

    @property
    def on_clock(self) -> frozenset[str]:
        """The budgeted scope kinds whose slots free on the clock (``free_slot = "min_healthy"``)."""
        return frozenset(b.kind for b in self.budgets if self.free_slot_of(b.kind) == FREE_SLOT[0])

    @property
    def waits_for_recovery(self) -> bool:
        """Some budget frees a slot only on observed recovery (decide/recovery.py)."""
        return len(self.on_clock) < len(self.budgets)

    def blackout_at(self, now: float) -> Blackout | None:
        return next((b for b in self.blackouts if b.active(now)), None)


def load_policy(raw: Mapping[str, Any]) -> Policy:
    """The Policy in a parsed ``coordinator.toml`` (other top-level sections are not looked at)."""
    table = raw.get("policy", {})
    if not isinstance(table, dict):
        raise ConfigError("policy: must be a table ([policy])")
    no_unknown(table, "policy", _POLICY_KEYS)
    values: dict[str, Any] = {}
    for key, (_, low, high) in _DURATIONS.items():
        if key in table:
            values[key] = parse_duration(table[key], f"policy.{key}", low, high)
    if "manage" in table:
        values["manage"] = _manage(table["manage"])
    for key in ("require_prepared", "shadow"):
        if key in table:
            values[key] = as_bool(table[key], f"policy.{key}")
    if "free_slot" in table:
        values["free_slot"] = as_choice(table["free_slot"], "policy.free_slot", FREE_SLOT)
    if "group_tag" in table:
        tag = as_str(table["group_tag"], "policy.group_tag").strip()
        if tag and not TAG_NAME.match(tag):
            raise ConfigError(f"policy.group_tag: {tag!r} is not a tag name")
        values["group_tag"] = tag.lower()
    if "budgets" in raw:
        values["budgets"] = _budgets(raw["budgets"])
    if "blackouts" in raw:
        values["blackouts"] = _blackouts(raw["blackouts"])
    if "windows" in raw:
        values["windows"] = load_windows(raw["windows"])
    policy = Policy(**values)
    if policy.heartbeat_timeout >= policy.forget_after:
        raise ConfigError("policy.forget_after: must be longer than policy.heartbeat_timeout")
    return policy


def _manage(value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        raise ConfigError("policy.manage: must be a list of event types, e.g. [\"Reboot\", \"Redeploy\"]")
    for i, item in enumerate(value):
        if item not in EVENT_TYPES:
            raise ConfigError(
                f"policy.manage[{i}]: {item!r} is not an event type ({', '.join(EVENT_TYPES)})"
            )
    return frozenset(value)


def budget_kind(value: Any, where: str) -> str:
    """A scope kind as written in ``[[budgets]] scope`` (tag names are case-insensitive)."""
    if isinstance(value, str) and value.startswith("tag:"):
        name = value[4:].strip()
        if not TAG_NAME.match(name):
            raise ConfigError(f"{where}: {value!r} does not name a tag (tag:<name>)")
        return "tag:" + name.lower()
    if value not in SCOPE_KINDS:
        raise ConfigError(f"{where}: {value!r} is not a scope ({', '.join(SCOPE_KINDS)}, tag:<name>)")
    return str(value)


def _budgets(items: Any) -> tuple[Budget, ...]:
    tables = as_tables(items, "budgets")
    if not tables:
        raise ConfigError("budgets: give at least one budget (e.g. scope = \"group\", max_unavailable = 1)")
    out: list[Budget] = []
    for _, where, item in tables:
        no_unknown(item, where, ("scope", "max_unavailable", "free_slot"))
        for key in ("scope", "max_unavailable"):
            if key not in item:
                raise ConfigError(f"{where}.{key}: missing")
        kind = budget_kind(item["scope"], f"{where}.scope")
        if any(b.kind == kind for b in out):
            raise ConfigError(f"{where}.scope: {kind!r} has a budget already (one per scope kind)")
        budget = _budget(kind, item["max_unavailable"], f"{where}.max_unavailable")
        if "free_slot" in item:
            budget = replace(budget, free_slot=as_choice(item["free_slot"], f"{where}.free_slot", FREE_SLOT))
        out.append(budget)
    return tuple(out)


def _budget(kind: str, value: Any, where: str) -> Budget:
    if isinstance(value, str) and (match := _PERCENT.match(value)):
        percent = float(match.group(1))
        if not 0 < percent <= 100:
            raise ConfigError(f"{where}: {value!r} must be more than 0% and at most 100%")
        return Budget(kind, percent=percent)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {value!r} is neither a whole number nor a percentage like \"10%\"")
    if value < 1:
        raise ConfigError(f"{where}: must be at least 1 (pause a scope to stop approvals in it)")
    return Budget(kind, count=value)


def _blackouts(items: Any) -> tuple[Blackout, ...]:
    out: list[Blackout] = []
    for i, where, item in as_tables(items, "blackouts"):
        no_unknown(item, where, ("name", "days", "from", "to", "start", "end"))
        name = as_str(item.get("name", ""), f"{where}.name").strip() or f"blackout {i + 1}"
        weekly = {"days", "from", "to"} & item.keys()
        absolute = {"start", "end"} & item.keys()
        if weekly and absolute:
            raise ConfigError(f"{where}: give either days/from/to (weekly) or start/end (absolute), not both")
        if absolute:
            out.append(_absolute(item, where, name))
        elif weekly:
            out.append(_weekly(item, where, name))
        else:
            raise ConfigError(f"{where}: give from/to (weekly, UTC) or start/end (absolute)")
    return tuple(out)


def _weekly(item: dict[str, Any], where: str, name: str) -> Blackout:
    for key in ("from", "to"):
        if key not in item:
            raise ConfigError(f"{where}.{key}: missing (HH:MM, UTC)")
    start, end = _clock(item["from"], f"{where}.from"), _clock(item["to"], f"{where}.to")
    if start == 24 * 60:
        raise ConfigError(f"{where}.from: 24:00 is the end of a day; a window starts at 00:00..23:59")
    if start == end:
        raise ConfigError(f"{where}: from and to are the same time; for a whole day use 00:00 to 24:00")
    days = frozenset(range(7))
    if "days" in item:
        raw = item["days"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"{where}.days: must be a non-empty list like [\"sat\", \"sun\"]")
        picked: set[int] = set()
        for j, day in enumerate(raw):
            index = _DAY_INDEX.get(day.strip().lower()) if isinstance(day, str) else None
            if index is None:
                raise ConfigError(f"{where}.days[{j}]: {day!r} is not a day ({', '.join(DAYS)})")
            picked.add(index)
        days = frozenset(picked)
    return Blackout(name, days=days, start_minute=start, end_minute=end)


def _clock(value: Any, where: str) -> int:
    match = _CLOCK.match(value) if isinstance(value, str) else None
    if not match or (match.group(1) == "24" and match.group(2) != "00"):
        raise ConfigError(f"{where}: {value!r} is not a time of day HH:MM (UTC)")
    return int(match.group(1)) * 60 + int(match.group(2))


def _absolute(item: dict[str, Any], where: str, name: str) -> Blackout:
    for key in ("start", "end"):
        if key not in item:
            raise ConfigError(f"{where}.{key}: missing (RFC 3339, e.g. 2026-12-24T00:00:00Z)")
    start, end = moment(item["start"], f"{where}.start"), moment(item["end"], f"{where}.end")
    if end <= start:
        raise ConfigError(f"{where}.end: must be after start")
    return Blackout(name, start=start, end=end)
