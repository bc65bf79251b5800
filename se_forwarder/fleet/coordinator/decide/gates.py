"""Gates and maintenance windows in the rule chain: what holds early approval back in a scope. Pure.

An event is held back when a scope of a VM it affects (or ``fleet``) is the scope of

- a closed gate (``[[gates]]``; its last verdict is in the fold, fold/gates.py): ``gate-closed``,
  naming the gate and what it said (the alerts that fire, or that it could not be asked);
- a blackout of ``[[windows]]`` that is open now: ``blackout``;
- a scope with maintenance windows of ``[[windows]]``, none open now: ``outside-window``, naming
  when the next one opens.

A configured scope matches a VM's scope key when they are equal, or when it names a group (and, for
``fault_domain:``/``update_domain:``, its domain) as people say it (``group:web`` for
``group:set/<sub>/<rg>/web``), or a zone by its number alone (``zone:1``). Only early approval is
held back: Azure still starts each event at its NotBefore (docs/coordinator.md).

``holds_now(state, policy, now)`` works out once per decision pass what holds back now (so a
pass with every gate open and every window open costs no more per event than one without them);
``held_back(holds, scopes)`` is the rule for one event. ``next_windows(policy, now)`` is what
`status` and the page show per scope.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from ....notify.describe import group_label
from ..config.policy import Policy
from ..config.windows import NEVER, Window
from ..fold.state import FleetState
from .wording import hhmm

GATE_CLOSED, BLACKOUT, OUTSIDE_WINDOW = "gate-closed", "blackout", "outside-window"
_GROUPED = ("group", "fault_domain", "update_domain")


@lru_cache(maxsize=1 << 16)
def matches(configured: str, scope: str) -> bool:
    """Whether the configured scope ``configured`` names the VM scope key ``scope`` (module docstring;
    cached: a decision pass asks it for every event and scope)."""
    if configured == scope:
        return True
    kind, _, value = configured.partition(":")
    other_kind, _, other = scope.partition(":")
    if kind != other_kind or not value:
        return False
    if kind == "zone":
        return "/" not in value and other.rpartition("/")[2] == value
    if kind not in _GROUPED:
        return False
    if kind == "group":
        return "/" not in value and group_label(other).lower() == value
    name, _, domain = value.rpartition("/")
    group, _, their_domain = other.rpartition("/")
    return bool(name) and "/" not in name and domain == their_domain and group_label(group).lower() == name


Hold = tuple[str, str, str, str]  # (configured scope, ReasonCode, Reason, Scope)


def holds_now(state: FleetState, policy: Policy, now: float) -> tuple[Hold, ...]:
    """What holds early approval back now, in the order the rule reports it: closed gates (by name),
    open blackouts, then scopes whose windows are all shut. Made once per decision pass."""
    if not state.gates and not policy.windows:
        return ()
    out: list[Hold] = [(g.scope, GATE_CLOSED, f"gate {g.name!r} ({g.scope}) is closed: {g.reason}", g.scope)
                       for g in sorted(state.gates.values(), key=lambda g: g.name) if not g.open]
    for window in policy.windows:
        if window.blackout and window.at(now):
            end = window.following(now)[1]
            reason = f"inside the blackout {window.name!r} of {window.scope} until {_local(end, window.zone)}"
            out.append((window.scope, BLACKOUT, reason, window.scope))
    for scope in dict.fromkeys(w.scope for w in policy.windows if not w.blackout):
        windows = [w for w in policy.windows if w.scope == scope and not w.blackout]
        if not any(w.at(now) for w in windows):
            start, _, name = _next(windows, now)
            when = f"the next, {name!r}, opens {_local(start, windows[0].zone)}" if start != NEVER[0] \
                else "none opens again"
            out.append((scope, OUTSIDE_WINDOW, f"outside every maintenance window of {scope}: {when}", scope))
    return tuple(out)


def held_back(holds: tuple[Hold, ...], scopes: Iterable[str]) -> tuple[str, str, str] | None:
    """(ReasonCode, Reason, Scope) of the first of ``holds`` (``holds_now``) that names one of
    ``scopes`` (an event's VMs' scope keys and ``fleet``), or None."""
    if not holds:
        return None
    scopes = tuple(scopes)
    for configured, code, reason, scope in holds:
        if any(matches(configured, s) for s in scopes):
            return code, reason, scope
    return None


def _next(windows: list[Window], now: float) -> tuple[float, float, str]:
    found = [(*w.following(now), w.name) for w in windows]
    return min(found, key=lambda f: (f[0], f[1])) if found else (*NEVER, "")


def _local(moment: float, zone: str) -> str:
    """``2026-12-01 02:00 Europe/Berlin (01:00 UTC)``; UTC alone for UTC."""
    if zone == "UTC":
        return hhmm(moment)
    local = datetime.fromtimestamp(moment, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M")
    return f"{local} {zone} ({hhmm(moment)[11:]})"


def next_windows(policy: Policy, now: float) -> list[dict[str, Any]]:
    """Per scope with windows or blackouts: whether early approval is open there now (as far as
    windows go), the window open now or the next one, and the blackout open now or the next one."""
    out = []
    for scope in dict.fromkeys(w.scope for w in policy.windows):
        windows = [w for w in policy.windows if w.scope == scope and not w.blackout]
        blackouts = [w for w in policy.windows if w.scope == scope and w.blackout]
        window = _next(windows, now) if windows else None
        blackout = _next(blackouts, now) if blackouts else None
        in_window = window is None or window[0] <= now
        in_blackout = blackout is not None and blackout[0] <= now < blackout[1]
        out.append({
            "scope": scope, "open": in_window and not in_blackout,
            "window": _span(window, windows), "blackout": _span(blackout, blackouts),
            "rules": [{"name": w.name, "blackout": w.blackout, "text": w.describe()}
                      for w in policy.windows if w.scope == scope],
        })
    return out


def _span(found: tuple[float, float, str] | None, windows: list[Window]) -> dict[str, Any] | None:
    if found is None or found[0] == NEVER[0]:
        return None
    zone = next(w.zone for w in windows if w.name == found[2])
    return {"name": found[2], "start": found[0], "end": found[1], "zone": zone,
            "text": f"{_local(found[0], zone)} to {_local(found[1], zone)}"}
