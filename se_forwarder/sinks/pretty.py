"""The readable form of CloudEvents (``stdout`` sink, ``format = "pretty"``; the demo's output).

One line per CloudEvent in columns under a header, at most ``WIDTH`` columns (long details wrap
under the DETAILS column). With ``explain``, the first CloudEvent of each kind is followed by one
line saying what it means ("canceled: Azure withdrew it before it started"). The JSON forms (file,
``stdout:json``) carry everything; this one is for people and may shorten (EventIds to 8
characters).
"""

from __future__ import annotations

import textwrap
from datetime import datetime
from typing import Any

from ..model import Kind

WIDTH = 100
ID_WIDTH = 8
COLUMNS = ("TIME", "CLOUDEVENT", "EVENT", "EVENT ID", "SOURCE", "INC", "DETAILS")
_FORMAT = "{:<8}  {:<10}  {:<9}  {:<8}  {:<8}  {:>3}  {}"
_INDENT = len(_FORMAT.format("", "", "", "", "", "", ""))
LEGEND = (
    "Columns: TIME when the agent saw it (UTC); CLOUDEVENT what it sent; EVENT Azure's EventType; "
    "SOURCE who asked (Platform = Azure, User = you); INC DocumentIncarnation, the version of "
    "IMDS's event list. A line starting with ^ explains the line above."
)
MARK = " " * 10 + "^ "

# The documented sample's rules (approvals/policy.py SAMPLE_RULES), said in words.
RULE_WORDS = {
    "sample-user": "what a user asked for is approved at once",
    "sample-freeze": "Freezes under 9 s are approved at once",
}
EXPLAIN: dict[str, str] = {
    Kind.SCHEDULED: "scheduled: Azure announced maintenance; it starts at NotBefore, or sooner if approved",
    Kind.STARTED: "started: the maintenance is under way (approved, or NotBefore passed)",
    "started:no-notice": "hardware failure: Azure starts it without notice",
    Kind.COMPLETED: "completed: the maintenance is over and Azure removed the event",
    Kind.CANCELED: "canceled: Azure withdrew it before it started",
    "inferred": "inferred: the agent never saw it Started; it vanished after {why}, so it ran",
    "approved:hook": "approved by hook: the prepare hook succeeded, then the agent approved it",
    "approved:coordinator": "approved by the fleet coordinator: a signed message from the queue",
    "approved:cli": "approved by hand: `se-forwarder approve`",
    Kind.APPROVAL_REJECTED: "approval rejected: a remote approval message was refused; nothing approved",
    Kind.PREPARED: "prepared: the prepare hook finished",
    Kind.PREPARE_FAILED: "prepare failed: the prepare hook failed, so the agent did not approve",
    Kind.RECOVER_FAILED: "recover failed: the recover hook failed after the event",
    Kind.RECOVERED: "recovered: this VM is back after the event (probes passed, recover hook done, if any)",
    Kind.HEARTBEAT: "heartbeat: the agent says it is alive (not stored, not repeated)",
    "other-vms": "for other VMs: Azure shows every VM the events of its neighbours too",
}
_INFERRED_WHY = {"approved": "its approval", "not-before-passed": "its NotBefore passed",
                 "not-before-unknown": "its NotBefore could not be read, so it may have passed"}


def state_of(event: dict[str, Any]) -> str:
    """``scheduled`` for ``com.azure.scheduledevents.scheduled``."""
    return str(event.get("type", "")).rsplit(".", 1)[-1]


def approved_by_words(approved_by: str) -> str:
    """``policy:sample-freeze`` -> ``policy sample-freeze``; ``cli`` -> ``hand (se-forwarder approve)``."""
    kind, _, rest = approved_by.partition(":")
    if kind == "policy":
        return f"policy {rest}"
    if kind == "coordinator":
        return f"the fleet coordinator ({rest})" if rest else "the fleet coordinator"
    if kind == "cli":
        return "hand (se-forwarder approve)"
    return approved_by


class PrettyFormatter:
    """Turns CloudEvents into lines; remembers what it has shown (header, kinds, EventIds)."""

    def __init__(self, explain: bool = False) -> None:
        self.explain = explain
        self._header_done = False
        self._explained: set[str] = set()
        self._scheduled: set[str] = set()  # EventIds seen as scheduled (for "no notice")

    def header(self) -> list[str]:
        """The column names (after a legend when explaining)."""
        legend = [*textwrap.wrap(LEGEND, WIDTH), ""] if self.explain else []
        return [*legend, _FORMAT.format(*COLUMNS)]

    def lines(self, event: dict[str, Any]) -> list[str]:
        """The lines for one CloudEvent (the header first, once)."""
        out: list[str] = []
        if not self._header_done:
            self._header_done = True
            out += self.header()
        details, kinds = self._details(event)
        first = _FORMAT.format(
            clock(event.get("time")),
            state_of(event),
            str(event.get("eventtype") or "-"),
            str(event.get("subject") or "-")[:ID_WIDTH],
            str((event.get("data") or {}).get("EventSource") or "-"),
            str(event.get("incarnation", "-")),
            "",
        )
        # A long CloudEvent type pushes DETAILS right: wrap from where it really starts.
        out += [line.rstrip() for line in textwrap.wrap(
            details, WIDTH, initial_indent=first, subsequent_indent=" " * _INDENT,
            break_on_hyphens=False)] or [first.rstrip()]
        if self.explain:
            for kind, text in kinds:
                if kind not in self._explained:
                    self._explained.add(kind)
                    out += textwrap.wrap(text, WIDTH, initial_indent=MARK,
                                         subsequent_indent=" " * len(MARK))
        return out

    def _details(self, event: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
        """The DETAILS column and the kinds (key, explanation) this CloudEvent shows."""
        data: dict[str, Any] = event.get("data") or {}
        state = state_of(event)
        subject = str(event.get("subject", ""))
        parts: list[str] = []
        kinds: list[tuple[str, str]] = []
        duration = data.get("DurationInSeconds")
        if isinstance(duration, int | float) and duration >= 0 and state in ("scheduled", "started"):
            parts.append(f"pause {duration:g} s" if event.get("eventtype") == "Freeze"
                         else f"lasts {duration:g} s")
        if state == Kind.SCHEDULED:
            self._scheduled.add(subject)
            notice = seconds_between(event.get("time"), data.get("NotBeforeUtc"))
            if notice is not None:
                at = clock(data.get("NotBeforeUtc"))
                parts.append(f"NotBefore {at} (in {max(notice, 0):.0f} s)")
        elif state == Kind.APPROVED:
            by = str(data.get("ApprovedBy") or "")
            parts.append(f"by {approved_by_words(by)}" if by else "")
            kinds.append(_approved_kind(by))
        elif state == Kind.STARTED and not data.get("Inferred") and self.explain:
            if subject not in self._scheduled:
                parts.append("no notice")
                kinds.append(("started:no-notice", EXPLAIN["started:no-notice"]))
        elif state == Kind.HEARTBEAT:
            pending = data.get("Events")
            if isinstance(pending, list):
                parts.append(f"{len(pending)} event(s) pending")
        elif state == Kind.PREPARED and isinstance(data.get("DurationSeconds"), int | float):
            parts.append(f"hook took {data['DurationSeconds']:g} s")
        elif state == Kind.RECOVERED and isinstance(data.get("RecoveredAfterSeconds"), int | float):
            parts.append(f"back {data['RecoveredAfterSeconds']:.0f} s after it ended")
        if data.get("Inferred"):
            why = str(data.get("InferredFrom") or "")
            parts.append(f"inferred ({_INFERRED_WHY.get(why, why or 'unknown')})")
            kinds.append(("inferred", EXPLAIN["inferred"].format(
                why=_INFERRED_WHY.get(why, "it was due"))))
        if not any(k.startswith(("started:", "approved:")) for k, _ in kinds) and state in EXPLAIN:
            kinds.insert(0, (state, EXPLAIN[state]))
        if data.get("Reason"):
            parts.append(f"reason: {data['Reason']}")
        if data.get("AffectsThisVm") is False:
            resources = data.get("Resources")
            names = ",".join(map(str, resources)) if isinstance(resources, list) else "other VMs"
            parts.append(f"for {names}, not this VM")
            kinds.append(("other-vms", EXPLAIN["other-vms"]))
        return "; ".join(p for p in parts if p), kinds


def _approved_kind(approved_by: str) -> tuple[str, str]:
    kind, _, rest = approved_by.partition(":")
    if kind == "policy":
        words = RULE_WORDS.get(rest, "the first matching [[approvals.rules]] entry")
        return f"approved:policy:{rest}", f"approved by policy {rest}: {words}"
    key = f"approved:{kind}"
    return key, EXPLAIN.get(key, f"approved by {approved_by or 'this agent'}")


def _parse(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def clock(stamp: Any) -> str:
    """``HH:MM:SS`` (UTC) of an RFC 3339 time; the text itself if it is not one."""
    moment = _parse(stamp)
    return moment.strftime("%H:%M:%S") if moment else str(stamp or "-")[:8]


def seconds_between(start: Any, end: Any) -> float | None:
    a, b = _parse(start), _parse(end)
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return None
    return (b - a).total_seconds()
