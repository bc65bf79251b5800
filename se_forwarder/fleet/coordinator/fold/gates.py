"""What the gates said, as the fold keeps it: one ``GateVerdict`` per ``[[gates]]`` entry. Pure.

input/gates.py asks each gate on a thread of its own and hands its verdicts to the service's loop,
which folds them here (``fold_gate``) before the next decision pass; decide/gates.py reads them.
They are not in snapshots: every instance asks the gates itself, and until a gate has answered
once it counts as closed (``unasked``), so a coordinator that just started approves nothing early
in that gate's scope.
"""

from __future__ import annotations

from dataclasses import dataclass

ALERTS_KEPT = 20  # alerts named per verdict


@dataclass(frozen=True)
class GateVerdict:
    """One gate's last answer: ``open`` or not, and why in one line; ``alerts``: what fires (names
    as people read them, at most ``ALERTS_KEPT``); ``unreachable``: it could not be asked."""

    name: str
    kind: str  # alertmanager | azure-monitor | http
    scope: str
    open: bool
    reason: str
    alerts: tuple[str, ...] = ()
    unreachable: bool = False
    checked: float | None = None  # epoch seconds of the answer; None: not asked yet
    since: float | None = None  # when it last changed between open and closed


def unasked(name: str, kind: str, scope: str) -> GateVerdict:
    """A gate before its first answer: closed."""
    return GateVerdict(name, kind, scope, False, "not asked yet")


def fold_gate(gates: dict[str, GateVerdict], verdict: GateVerdict) -> bool:
    """``verdict`` in place of the gate's last one (``since`` carried while it stays open or
    closed); True when its open/closed state, reason or alerts changed."""
    last = gates.get(verdict.name)
    same_state = last is not None and last.open == verdict.open and last.checked is not None
    since = last.since if same_state and last is not None else verdict.checked
    gates[verdict.name] = GateVerdict(verdict.name, verdict.kind, verdict.scope, verdict.open, verdict.reason,
                                      verdict.alerts[:ALERTS_KEPT], verdict.unreachable, verdict.checked,
                                      since)
    return last is None or not same_state or (last.reason, last.alerts) != (verdict.reason, verdict.alerts)
