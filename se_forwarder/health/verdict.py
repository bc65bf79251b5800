"""The verdict on this VM's application from its probes' results (pure: no clock, no I/O).

Each probe has its own state, which only results in a row can change:

- ``unknown`` at start (after every agent start too): no verdict yet;
- ``healthy_threshold`` passes in a row make it ``healthy``; ``unhealthy_threshold`` failures in
  a row make it ``unhealthy``; anything less leaves it as it was (a healthy probe that failed
  once is still healthy, an unhealthy one that passed once still unhealthy).

The VM's verdict (``combine``) is ``unhealthy`` when any probe is (naming the first, with its last
failure), ``healthy`` when every probe is, else ``unknown`` (naming the first probe without a
verdict). A reason is one printable line of at most ``model.REASON_CHARS`` characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..model import HEALTHY, REASON_CHARS, UNHEALTHY, UNKNOWN, HealthVerdict
from ..printable import strip_controls


@dataclass(frozen=True)
class ProbeState:
    """One probe's verdict and its results in a row."""

    name: str
    verdict: str = UNKNOWN
    passes: int = 0  # passes in a row
    failures: int = 0  # failures in a row
    last_ok: bool | None = None  # the last result (None: none yet)
    reason: str | None = None  # the last failure's reason


def reason_line(text: str) -> str:
    """``text`` as one printable line of at most ``REASON_CHARS`` characters."""
    line = " ".join(strip_controls(text).split())
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def step(state: ProbeState, passed: bool, reason: str | None, *, healthy_threshold: int,
         unhealthy_threshold: int) -> ProbeState:
    """``state`` after one more result (``reason``: why it failed)."""
    if passed:
        passes = state.passes + 1
        verdict = HEALTHY if passes >= healthy_threshold else state.verdict
        return replace(state, verdict=verdict, passes=passes, failures=0, last_ok=True)
    failures = state.failures + 1
    verdict = UNHEALTHY if failures >= unhealthy_threshold else state.verdict
    return replace(state, verdict=verdict, passes=0, failures=failures, last_ok=False,
                   reason=reason_line(reason or "failed"))


def combine(states: Sequence[ProbeState], *, healthy_threshold: int, since: float,
            checked_at: float | None, previous: HealthVerdict | None = None) -> HealthVerdict:
    """The VM's verdict from its probes' states (module docstring); ``since`` is kept from
    ``previous`` while the verdict stays the same."""
    sick = next((s for s in states if s.verdict == UNHEALTHY), None)
    if sick is not None:
        verdict, probe, reason = UNHEALTHY, sick.name, sick.reason
    elif states and all(s.verdict == HEALTHY for s in states):
        verdict, probe, reason = HEALTHY, None, None
    else:
        waiting = next((s for s in states if s.verdict != HEALTHY), None)
        verdict, probe, reason = UNKNOWN, waiting.name if waiting else None, _waiting(waiting,
                                                                                   healthy_threshold)
    if previous is not None and previous.verdict == verdict:
        since = previous.since
    return HealthVerdict(verdict=verdict, since=since, checked_at=checked_at,
                         last_round_ok=bool(states) and all(s.last_ok for s in states), probe=probe,
                         reason=reason, probes=len(states))


def _waiting(state: ProbeState | None, healthy_threshold: int) -> str:
    if state is None:
        return "no probe has run yet"
    if state.last_ok is None:
        return "not checked yet"
    if state.last_ok:
        return f"passed {state.passes} of the {healthy_threshold} times in a row it needs"
    return reason_line(f"failing ({state.failures} in a row): {state.reason}")
