"""What the fleet demo prints while it runs: a line per decision and per VM state change, in columns.

Read from the hub, as any consumer of it would (the demo's terminal is one more reader of the
local hub): each agent's signed reports and each of the coordinator's signed decisions. Pure but
for ``Tail``, the thread that reads. Shown, in the style of the one-VM demo (``sinks/pretty.py``:
columns, the first line of each kind followed by a ``^`` line saying what it means):

- a VM's own reports (``AffectsThisVm``): scheduled, approved, started, completed, recovered,
  canceled, and a rejected approval message. Its neighbours' reports of the same event are left out
  (the page shows who saw what), and so are identity announcements and heartbeats, but for a change
  of a VM's health verdict to or from ``unhealthy``;
- the coordinator's decisions but ``sent`` (the record that a message is in its queue).

Text from the hub is made inert for the terminal (printable.py); EventIds are cut to 8 characters.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..model import Kind
from ..printable import strip_controls
from ..sinks.pretty import ID_WIDTH, MARK, WIDTH, clock, seconds_between

DECISION = "com.azure.scheduledevents.coordinator."
REPORT = "com.azure.scheduledevents."
COLUMNS = ("TIME", "WHO", "WHAT", "EVENT", "EVENT ID", "DETAILS")
_FORMAT = "{:<8}  {:<11}  {:<10}  {:<8}  {:<8}  {}"
_INDENT = len(_FORMAT.format("", "", "", "", "", ""))
_GUID = re.compile(r"\b([0-9A-Fa-f]{8})-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b")
LEGEND = (
    "Columns: TIME when it happened (UTC); WHO the VM whose agent reported it, or the coordinator; "
    "WHAT the VM's new state, or the coordinator's decision; EVENT Azure's EventType; EVENT ID its "
    "first 8 characters. A line starting with ^ explains the line above."
)
SHOWN = (Kind.SCHEDULED, Kind.APPROVED, Kind.STARTED, Kind.COMPLETED, Kind.CANCELED, Kind.APPROVAL_REJECTED,
         Kind.RECOVERED)


def explanations(min_healthy: float) -> dict[str, str]:
    return {
        "scheduled": "scheduled: Azure announced maintenance of this VM; it starts at NotBefore, or "
                     "sooner if approved",
        "approve": "approve: the coordinator releases it early, as every budget fits, and sends the "
                   "VM's queue a message signed with its key",
        "defer": "defer: the coordinator waits, and says why (once each time the reason changes)",
        "breach": "breach: at NotBefore this event alone takes more VMs of a scope down than its budget",
        "approved": "approved: the VM's agent verified the coordinator's signature and POSTed "
                    "StartRequests to IMDS",
        "started": "started: Azure started it at once, on the approval",
        "started:not-before": "started at NotBefore: nobody approved it early (the coordinator leaves "
                              "Freezes to Azure)",
        "started:no-notice": "hardware failure: Azure starts it without notice; it counts against the "
                             "budgets all the same",
        "completed": f"completed: the maintenance is over; the coordinator counts the VM as down for "
                     f"min_healthy ({min_healthy:g} s) more",
        "canceled": "canceled: Azure withdrew it before it started",
        "approvalrejected": "approval rejected: the VM's agent refused a message; nothing was approved",
        "recovered": "recovered: the VM's agent says it is back (its recover hook and its health probes, "
                     "if any, passed); only now does the coordinator free its slot",
        "unhealthy": "unhealthy: the VM's own health probe fails (its heartbeat says so); the "
                     "coordinator counts it as down, whatever the events say",
    }


def short(text: str) -> str:
    """Inert text with every GUID cut to its first 8 characters."""
    return _GUID.sub(lambda m: m.group(1).upper(), strip_controls(text))


class FleetLines:
    """CloudEvents from the hub -> lines; remembers what it showed (kinds explained, events seen)."""

    def __init__(self, min_healthy: float) -> None:
        self.explain = explanations(min_healthy)
        self._explained: set[str] = set()
        self._scheduled: set[str] = set()  # EventIds a VM reported Scheduled
        self._approved: set[str] = set()  # EventIds a VM's agent approved
        self.decisions: Counter[str] = Counter()  # kind -> how many were shown
        self.defers: Counter[str] = Counter()  # ReasonCode -> how many
        self.echoes = 0  # VMs' reports that they approved on the coordinator's message
        self._verdicts: dict[str, str] = {}  # VM -> its heartbeats' last health verdict

    def header(self) -> list[str]:
        return [*textwrap.wrap(LEGEND, WIDTH), "", _FORMAT.format(*COLUMNS)]

    def lines(self, event: dict[str, Any]) -> list[str]:
        ce_type = str(event.get("type", ""))
        data = event.get("data") if isinstance(event.get("data"), dict) else {}
        assert isinstance(data, dict)
        if ce_type.startswith(DECISION):
            return self._decision(event, ce_type[len(DECISION):], data)
        state = ce_type[len(REPORT):] if ce_type.startswith(REPORT) else ""
        if state == Kind.HEARTBEAT:
            return self._verdict(event, data)
        if state not in SHOWN or data.get("AffectsThisVm") is not True:
            return []
        vm = data.get("Vm") if isinstance(data.get("Vm"), dict) else {}
        assert isinstance(vm, dict)
        return self._report(event, state, str(vm.get("name") or "?"), data)

    def _verdict(self, event: dict[str, Any], data: dict[str, Any]) -> list[str]:
        """A line when a VM's health verdict turns unhealthy or back (heartbeats are otherwise not shown)."""
        health = data.get("Health") if isinstance(data.get("Health"), dict) else None
        vm = data.get("Vm") if isinstance(data.get("Vm"), dict) else {}
        if health is None or not isinstance(vm, dict):
            return []
        name, verdict = str(vm.get("name") or "?"), str(health.get("Verdict") or "")
        before = self._verdicts.get(name, "")
        self._verdicts[name] = verdict
        if verdict == before or "unhealthy" not in (verdict, before) or verdict == "unknown":
            return []
        details = f"probe {health.get('Probe')}: {health.get('Reason')}" if verdict == "unhealthy" else \
            "its probes pass again"
        return self._line({**event, "subject": "-"}, name, verdict, "-", details, verdict)

    def _decision(self, event: dict[str, Any], kind: str, data: dict[str, Any]) -> list[str]:
        if kind == "sent":
            return []
        self.decisions[kind] += 1
        if kind == "defer":
            self.defers[str(data.get("ReasonCode") or "")] += 1
        target = data.get("Target") if isinstance(data.get("Target"), dict) else None
        affected = [str(a.get("name")) for a in data.get("Affected") or [] if isinstance(a, dict)]
        who = str(target.get("name")) if target else ", ".join(affected)
        reason = str(data.get("Reason") or "")
        details = f"{who}: {reason}" if who else reason
        return self._line(event, "coordinator", kind, str(data.get("EventType") or "-"), details, kind)

    def _report(self, event: dict[str, Any], state: str, vm: str, data: dict[str, Any]) -> list[str]:
        subject = str(event.get("subject") or "")
        kind, details = state, ""
        if state == Kind.SCHEDULED:
            self._scheduled.add(subject)
            notice = seconds_between(event.get("time"), data.get("NotBeforeUtc"))
            if notice is not None:
                details = f"NotBefore {clock(data.get('NotBeforeUtc'))} (in {max(notice, 0):.0f} s)"
        elif state == Kind.APPROVED:
            self._approved.add(subject)
            by = str(data.get("ApprovedBy") or "")
            if by.startswith("coordinator"):
                self.echoes += 1
            details = "by the coordinator's signed message" if by.startswith("coordinator") else f"by {by}"
        elif state == Kind.STARTED:
            if subject not in self._scheduled:
                kind, details = "started:no-notice", "no notice"
            elif subject not in self._approved:
                kind, details = "started:not-before", "at NotBefore, left to Azure"
        elif state == Kind.APPROVAL_REJECTED:
            details = str(data.get("Reason") or "")
        elif state == Kind.RECOVERED:
            after = data.get("RecoveredAfterSeconds")
            details = f"{after:.0f} s after it completed" if isinstance(after, int | float) else ""
        return self._line(event, vm, state, str(event.get("eventtype") or "-"), details, kind)

    def _line(self, event: dict[str, Any], who: str, what: str, event_type: str, details: str,
              kind: str) -> list[str]:
        first = _FORMAT.format(clock(event.get("time")), short(who)[:11], what[:10], short(event_type)[:8],
                               short(str(event.get("subject") or "-"))[:ID_WIDTH], "")
        out = [line.rstrip() for line in textwrap.wrap(
            short(details), WIDTH, initial_indent=first, subsequent_indent=" " * _INDENT,
            break_on_hyphens=False)] or [first.rstrip()]
        if kind not in self._explained and kind in self.explain:
            self._explained.add(kind)
            out += textwrap.wrap(self.explain[kind], WIDTH, initial_indent=MARK,
                                 subsequent_indent=" " * len(MARK))
        return out


class Tail:
    """A thread that reads every event the hub takes, in order, and prints its lines."""

    def __init__(self, read: Callable[[int], tuple[list[Any], int]], lines: FleetLines,
                 say: Callable[[str], None]) -> None:
        self.read, self.format, self.say = read, lines, say
        self._next = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-terminal", daemon=True)

    def start(self) -> None:
        self.say("\n".join(self.format.header()))
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.drain()

    def drain(self) -> None:
        """Print what the hub took since the last call."""
        events, self._next = self.read(self._next)
        for data in events:
            try:
                event = json.loads(data.body)
            except ValueError:
                continue
            if isinstance(event, dict):
                out = self.format.lines(event)
                if out:
                    self.say("\n".join(out))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.drain()
