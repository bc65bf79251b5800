"""The fleet page's document: view.status and view.groups in one compact JSON object. Pure.

One evaluation serves both. VMs travel as arrays, not objects, so 10,000 VMs stay a few hundred
kilobytes (about a tenth of that gzipped)::

    {"version": 1, "now": <epoch s>, "time", "service": {...} | null, "shadow", "blackout",
     "fleet": {...}, "paused": [...], "held": [...],
     "scopes": [{"scope", "label", "kind", "size", "used", "max", "paused"}],
     "scopeTotals": {...},
     "pending": [{... as view.status, "label" per budget, "affected" at most AFFECTED_LISTED names,
                  "affectedCount", "held": bool, "scopeLabel"}],
     "started": [...], "decisions": [{... as view.status, "subject": a label for people}],
     "nameConflicts": [...], "identities": {...} (as view.status: the banner shows them),
     "gates": [...], "windows": [...] (as view.status, view/gates.py: a closed gate in the banner),
     "events": [{"eventId", "eventType", "notBeforeUtc", "status"}],
     "timeline": {"kinds": timeline.KINDS, "events": [[eventId, eventType, notBefore | null]],
                  "start": <epoch s> | null, "minHealthy": <s>},
     "groups": [{"group", "label", "scope", "size", "unavailable", "max", "paused", "zonal",
                 "vms": [[name, zone, faultDomain, updateDomain, state, heartbeatAge, event, watched,
                          agentless, findings, said]],
                 "spans": [[vm, kind, start, end | null, event]], "down": [[time, VMs]], "peak"}]}

``state`` is view.groups' (``ok``, ``pending``, ``approved``, ``started``, ``due``, ``completed``,
``prepare-failed``, ``name-conflict``, ``key-conflict``, ``not-watched``); ``heartbeatAge`` whole
seconds or -1 (never heard); ``event`` an index into ``events`` or -1; ``watched`` 1 or 0;
``agentless`` 1 when Azure lists the VM and no agent reports it; ``findings`` where its agent and
Azure disagree, ``"; "``-joined ("" when none); ``said`` what its agent and Azure said of that
event (``"agent completed, Azure Started"``, "" when neither; view/azure.py). ``max`` is the
group's budget, or null when groups have none. Labels come from se_forwarder.notify.describe, as
the chat messages say them.

The timeline (timeline.py) rides on the groups: a group's ``spans`` are its VMs' stages (``vm`` an
index into its ``vms``, ``kind`` into ``timeline.kinds``, ``event`` into ``timeline.events``; times in
epoch seconds, ``end`` null while it goes on), ``down`` its budget line and ``peak`` the most VMs
down at once on it. ``timeline.start`` is the earliest span's start.
"""

from __future__ import annotations

from typing import Any

from ....notify.describe import group_label, scope_label
from ..config.policy import Policy
from ..decide.evaluate import evaluate
from ..decide.scopes import ScopeIndex
from ..fold.state import FleetState
from .status import groups, status
from .timeline import KINDS, Span, down, peak, spans

VERSION = 1
AFFECTED_LISTED = 20
DECISIONS_LISTED = 100


def page_view(state: FleetState, policy: Policy, now: float, service: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """The page's document (module docstring); ``service`` is Service.describe() when there is one."""
    ev = evaluate(state, policy, now, str((service or {}).get("stale") or ""))  # the lag guard's word
    assert ev.index is not None
    idx = ev.index
    st = status(state, policy, now, ev, decisions_limit=DECISIONS_LISTED)
    paused = {p["scope"] for p in st["paused"]}
    held = {h["eventId"].lower() for h in st["held"] if h.get("eventId")}
    for scope in st["scopes"]:
        scope["label"] = scope_label(scope["scope"])
    for item in st["pending"]:
        affected = item["affected"]
        item["affectedCount"] = len(affected)
        item["affected"] = affected[:AFFECTED_LISTED]
        item["held"] = item["eventId"].lower() in held
        item["scopeLabel"] = scope_label(item["scope"]) if item.get("scope") else None
        for use in item["budgets"]:
            use["label"] = scope_label(use["scope"])
    for item in st["started"]:
        item["affectedCount"] = len(item["affected"])
        item["affected"] = item["affected"][:AFFECTED_LISTED]
    for d in st["decisions"]:
        d["subject"] = d["eventId"] or scope_label(d["scope"] or "fleet")
        d["scopeLabel"] = scope_label(d["scope"]) if d.get("scope") else None
        d.pop("budgets", None)
    for p in st["paused"]:
        p["label"] = scope_label(p["scope"])
    events: list[dict[str, Any]] = []
    numbers: dict[tuple[str, str], int] = {}
    out_groups = []
    line = TimelineLayout(state, policy, idx, now)
    for g in groups(state, policy, now, ev, keys=True):
        scope = f"group:{g['group']}".lower()
        vms = []
        zonal = False
        busy: list[tuple[int, str]] = []  # (row, VM key) of its VMs on the timeline
        for row, vm in enumerate(g["vms"]):
            if vm["key"] in line.by_vm:
                busy.append((row, vm["key"]))
            ref = vm["event"]
            number = -1
            if ref is not None:
                key = (ref["eventId"], ref["status"])
                number = numbers.get(key, -1)
                if number < 0:
                    number = numbers[key] = len(events)
                    events.append(ref)
            age = vm["heartbeatAgeSeconds"]
            zonal = zonal or bool(vm["zone"])
            vms.append([vm["name"], vm["zone"], vm["faultDomain"], vm["updateDomain"], vm["state"],
                        -1 if age is None else int(age), number, 1 if vm["watched"] else 0,
                        1 if vm["agentless"] else 0, "; ".join(vm["findings"]), _said(ref)])
        out_groups.append({
            "group": g["group"], "label": group_label(g["group"]), "scope": scope, "size": g["size"],
            "unavailable": g["unavailable"], "max": idx.limit(scope) if scope in idx.budget_of else None,
            "paused": scope in paused, "zonal": zonal, "vms": vms,
            **line.group(busy),
        })
    return {"version": VERSION, "now": round(now, 3), "service": service, **st, "events": events,
            "timeline": line.header(policy), "groups": out_groups}


class TimelineLayout:
    """The timeline's spans laid out on the page's groups (module docstring)."""

    def __init__(self, state: FleetState, policy: Policy, idx: ScopeIndex, now: float | None = None) -> None:
        self.state = state
        self.by_vm: dict[str, list[Span]] = {}
        self.start: float | None = None
        for span in spans(state, policy, idx, now):
            self.by_vm.setdefault(span.vm, []).append(span)
            self.start = span.start if self.start is None else min(self.start, span.start)
        self.events: list[list[Any]] = []
        self.numbers: dict[str, int] = {}

    def number(self, event_key: str) -> int:
        if event_key not in self.numbers:
            record = self.state.events[event_key]
            self.numbers[event_key] = len(self.events)
            self.events.append([record.event_id, record.event_type, _at(record.not_before)])
        return self.numbers[event_key]

    def group(self, busy: list[tuple[int, str]]) -> dict[str, Any]:
        """``spans``, ``down`` and ``peak`` of a group, given (row, VM key) of its VMs with spans."""
        mine: list[Span] = []
        rows: list[list[Any]] = []
        for row, key in busy:
            for span in self.by_vm[key]:
                mine.append(span)
                rows.append([row, KINDS.index(span.kind), _at(span.start), _at(span.end),
                             self.number(span.event)])
        if not mine:
            return {"spans": rows, "down": [], "peak": 0}
        budget_line = down(mine)
        return {"spans": rows, "down": [[_at(t), n] for t, n in budget_line], "peak": peak(budget_line)}

    def header(self, policy: Policy) -> dict[str, Any]:
        return {"kinds": list(KINDS), "events": self.events, "start": _at(self.start),
                "minHealthy": policy.min_healthy}


def _said(event: dict[str, Any] | None) -> str:
    said = (event or {}).get("said") or {}
    parts = [f"agent {said['agent']}" if said.get("agent") else "",
             f"Azure {said['azure']}" if said.get("azure") else ""]
    return ", ".join(p for p in parts if p)


def _at(moment: float | None) -> float | None:
    return None if moment is None else round(moment, 3)
