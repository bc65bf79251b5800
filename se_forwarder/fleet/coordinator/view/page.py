"""The fleet page's document: view.status and view.groups in one compact JSON object. Pure.

One evaluation serves both. VMs travel as arrays, not objects::

    {"version": 2, "now": <epoch s>, "time", "service": {...} | null, "shadow", "blackout",
     "fleet": {...}, "paused": [...], "held": [...],
     "scopes": [{"scope", "label", "kind", "size", "used", "max", "paused"}],
     "scopeTotals": {...},
     "pending": [{... as view.status, "label" per budget, "affected" at most AFFECTED_LISTED names,
                  "affectedCount", "held": bool, "scopeLabel"}],
     "started": [...], "decisions": [{... as view.status, "subject": a label for people}],
     "nameConflicts": [...], "identities": {...} (as view.status: the banner shows them),
     "gates": [...], "windows": [...] (as view.status, view/gates.py: a closed gate in the banner),
     "summarised": bool,
     "events": [{"eventId", "eventType", "notBeforeUtc", "status"}],
     "timeline": {"kinds": timeline.KINDS, "events": [[eventId, eventType, notBefore | null]],
                  "start": <epoch s> | null, "minHealthy": <s>,
                  "gates": [[name, scope, [[closed, opened | null], ...]]]},
     "groups": [{"group", "label", "scope", "size", "unavailable", "max", "paused", "zonal",
                 "counts": {state: VMs}, "notable": VMs not ok or flagged,
                 "vms": [[name, zone, faultDomain, updateDomain, state, heartbeatAge, event, watched,
                          agentless, findings, said]],
                 "spans": [[vm, kind, start, end | null, event]], "down": [[time, VMs]], "peak",
                 "spanCount", "started", "spanEnd": <epoch s> | null}]}

A fleet of up to ``INLINE_VMS`` VMs travels whole: every group lists every VM (``summarised``
false). A larger one is summarised: each group lists only its ``notable`` VMs (not ``ok``, agentless,
or with findings: view/groups.py), at most LISTED_PER_GROUP of them and LISTED_IN_ALL in all, and no
``spans``; its ``counts`` and its timeline's ``spanCount``, ``started`` (Started spans) and
``spanEnd`` (when its last span ended, null while one goes on) say the rest; a key whose value is
its ``LEFT_OUT`` one is left out of it (``unavailable`` 0, ``vms`` [], ...). So 100,000 VMs are a
document of about a megabyte (a twentieth of that gzipped), whatever happens to them. The page fetches a
group's VMs when it is opened (``group_view``: a page of them, with their spans) and the VMs a
search names (``search_view``), from the ``Context`` of the last document.

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
down at once on it (a ``recovering`` span is left out of it when the group's budget frees slots on
the clock: ``[[budgets]] free_slot``). ``timeline.gates`` are the gates that were closed while the
fold kept them (fold/gates.py: their last closed periods, ``opened`` null while still closed), each
a row of its own on the page. ``timeline.start`` is the earliest span's or closed period's start.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from ....notify.describe import group_label, scope_label
from ..config.policy import Policy
from ..decide.evaluate import Evaluation, evaluate
from ..decide.scopes import ScopeIndex
from ..fold.state import FleetState
from .groups import Rows, Summary, place, summarise
from .status import status
from .timeline import KINDS, Span, down, peak, spans

VERSION = 2
AFFECTED_LISTED = 20
DECISIONS_LISTED = 100
INLINE_VMS = 5_000  # a fleet up to this size travels whole
LISTED_PER_GROUP = 60  # a summarised group's notable VMs listed, at most
LISTED_IN_ALL = 3_000  # and all groups' together
GROUP_PAGE = 2_000  # a group's VMs fetched at once, at most
SEARCH_LISTED = 50  # VMs a search names, at most
LEFT_OUT = {"unavailable": 0, "paused": False, "zonal": False, "notable": 0, "vms": [], "spans": [],
            "down": [], "peak": 0, "spanCount": 0, "started": 0, "spanEnd": None}  # a summarised group's


class Numbered:
    """A list of things referred to by index, each added once."""

    def __init__(self, make: Callable[[Any], Any] | None = None) -> None:
        self.make = make
        self.items: list[Any] = []
        self.index: dict[Hashable, int] = {}

    def __call__(self, key: Hashable, item: Any = None) -> int:
        """The index of ``key``'s item: ``item``, or what ``make`` makes of the key."""
        number = self.index.get(key)
        if number is None:
            number = self.index[key] = len(self.items)
            self.items.append(item if self.make is None else self.make(key))
        return number


@dataclass
class Context:
    """What one document was made from: a group's VMs and a search are read from it later (on the
    service's thread, as the document was)."""

    state: FleetState
    policy: Policy
    rows: Rows
    line: TimelineLayout
    summaries: dict[str, Summary]


def page_view(state: FleetState, policy: Policy, now: float, service: dict[str, Any] | None = None,
              inline: int = INLINE_VMS) -> dict[str, Any]:
    """The page's document (module docstring); ``service`` is Service.describe() when there is one."""
    return page_document(state, policy, now, service, inline)[0]


def page_document(state: FleetState, policy: Policy, now: float, service: dict[str, Any] | None = None,
                  inline: int = INLINE_VMS) -> tuple[dict[str, Any], Context]:
    """The page's document and the Context it was made from."""
    ev = evaluate(state, policy, now, str((service or {}).get("stale") or ""))  # the lag guard's word
    assert ev.index is not None
    idx = ev.index
    st = _status(state, policy, now, ev)
    paused = {p["scope"] for p in st["paused"]}
    rows = Rows(state, policy, now, ev)
    whole = len(idx.members) <= inline
    summaries = summarise(rows, None if whole else LISTED_PER_GROUP)
    if not whole:
        _trim(summaries, LISTED_IN_ALL)
    line = TimelineLayout(state, policy, idx, now)
    context = Context(state, policy, rows, line, {s.group: s for s in summaries})
    events = Numbered()
    numbers = Numbered(line.event_row)
    by_group: dict[str, list[Span]] = {}  # a summarised group's spans
    for key, mine in ([] if whole else line.by_vm.items()):
        if key in idx.group_of:
            by_group.setdefault(idx.group_of[key], []).extend(mine)
    out_groups = []
    for s in summaries:
        scope = f"group:{s.group}".lower()
        entry = {"group": s.group, "label": group_label(s.group), "scope": scope, "size": s.size,
                 "unavailable": s.unavailable, "max": idx.limit(scope) if scope in idx.budget_of else None,
                 "paused": scope in paused, "zonal": s.zonal, "counts": s.counts, "notable": s.notable}
        keys = _placed(rows, s.listed)
        entry["vms"] = [_row(rows.vm(k), events) for k in keys]
        if whole:
            entry.update(line.group(keys, numbers))
        else:
            entry.update(line.summary(by_group.get(s.group, [])))
            entry = {k: v for k, v in entry.items() if k not in LEFT_OUT or LEFT_OUT[k] != v}
        out_groups.append(entry)
    return ({"version": VERSION, "now": round(now, 3), "service": service, **st, "summarised": not whole,
             "events": events.items, "timeline": line.header(policy, numbers), "groups": out_groups}, context)


def group_view(context: Context, group: str, offset: int = 0, limit: int = GROUP_PAGE
               ) -> dict[str, Any] | None:
    """A page of one group's VMs, in the order the page draws them, with their spans (None: no such
    group in the document the context made)::

        {"group", "size", "offset", "vms": [...], "spans": [...], "events": [...],
         "timelineEvents": [...]}

    rows, spans and events as in the document (module docstring), their indices into these lists."""
    summary = context.summaries.get(group)
    if summary is None:
        return None
    keys = _placed(context.rows, summary.members)[offset:offset + limit]
    events, numbers = Numbered(), Numbered(context.line.event_row)
    vms = [_row(context.rows.vm(k), events) for k in keys]
    spans_of = context.line.group(keys, numbers)["spans"]
    return {"group": group, "size": len(summary.members), "offset": offset, "vms": vms, "spans": spans_of,
            "events": events.items, "timelineEvents": numbers.items}


def search_view(context: Context, text: str, limit: int = SEARCH_LISTED) -> dict[str, Any]:
    """The VMs whose name contains ``text`` (case-insensitive), at most ``limit``, by group::

        {"query", "count": VMs that match, "groups": [{"group", "vms": [...], "spans": [...]}],
         "events": [...], "timelineEvents": [...]}"""
    needle = text.lower()
    vms_of = context.state.vms
    found: dict[str, list[str]] = {}
    count = 0
    for group, summary in context.summaries.items():
        for key in summary.members:
            vm = vms_of.get(key)
            if vm is not None and needle in vm.name.lower():
                count += 1
                if count <= limit:
                    found.setdefault(group, []).append(key)
    events, numbers = Numbered(), Numbered(context.line.event_row)
    out = []
    for group, keys in found.items():
        placed = _placed(context.rows, keys)
        out.append({"group": group, "vms": [_row(context.rows.vm(k), events) for k in placed],
                    "spans": context.line.group(placed, numbers)["spans"]})
    return {"query": text, "count": count, "groups": out, "events": events.items,
            "timelineEvents": numbers.items}


def _status(state: FleetState, policy: Policy, now: float, ev: Evaluation) -> dict[str, Any]:
    """view.status with labels for people, and pending and started events naming at most
    AFFECTED_LISTED VMs."""
    st = status(state, policy, now, ev, decisions_limit=DECISIONS_LISTED)
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
    return st


def _trim(summaries: list[Summary], total: int) -> None:
    """At most ``total`` VMs listed in all: as many per group as fit when every group has as many."""
    share = max(1, total // max(1, sum(1 for s in summaries if s.listed)))
    left = total
    for s in summaries:
        s.listed = s.listed[:min(share, left)]
        left -= len(s.listed)


def _placed(rows: Rows, keys: Iterable[str]) -> list[str]:
    """VM keys in the order the page draws a group's VMs (view.groups.place)."""
    vms = rows.state.vms
    return sorted((k for k in keys if k in vms), key=lambda k: place(vms[k]))


def _row(vm: dict[str, Any], events: Numbered) -> list[Any]:
    """A VM of view.groups as the page's array (module docstring)."""
    ref = vm["event"]
    number = -1 if ref is None else events((ref["eventId"], ref["status"]), ref)
    age = vm["heartbeatAgeSeconds"]
    return [vm["name"], vm["zone"], vm["faultDomain"], vm["updateDomain"], vm["state"],
            -1 if age is None else int(age), number, 1 if vm["watched"] else 0,
            1 if vm["agentless"] else 0, "; ".join(vm["findings"]), _said(ref)]


class TimelineLayout:
    """The timeline's spans laid out on the page's groups (module docstring)."""

    def __init__(self, state: FleetState, policy: Policy, idx: ScopeIndex, now: float | None = None) -> None:
        self.state = state
        self.on_clock = "group" in policy.on_clock  # a wait for recovery holds no slot of a group
        self.by_vm: dict[str, list[Span]] = {}
        self.start: float | None = None
        for span in spans(state, policy, idx, now):
            self.by_vm.setdefault(span.vm, []).append(span)
            self.start = span.start if self.start is None else min(self.start, span.start)
        self.events: dict[str, list[Any]] = {}  # event key -> [eventId, eventType, notBefore]

    def event_row(self, event_key: str) -> list[Any]:
        row = self.events.get(event_key)
        if row is None:  # the event as the document saw it, though the fold prunes it since
            record = self.state.events[event_key]
            row = self.events[event_key] = [record.event_id, record.event_type, _at(record.not_before)]
        return row

    def group(self, keys: list[str], number: Callable[[str], int]) -> dict[str, Any]:
        """``spans``, ``down`` and ``peak`` of a group whose VMs are ``keys`` (the rows' order)."""
        rows: list[list[Any]] = []
        for row, key in enumerate(keys):
            for span in self.by_vm.get(key, ()):
                rows.append([row, KINDS.index(span.kind), _at(span.start), _at(span.end), number(span.event)])
        return {"spans": rows, **self._line([s for key in keys for s in self.by_vm.get(key, ())])}

    def summary(self, mine: list[Span]) -> dict[str, Any]:
        """A summarised group's timeline, given its spans: its budget line, and its spans counted
        (module docstring)."""
        ends = [s.end for s in mine if s.end is not None]
        return {"spans": [], "spanCount": len(mine), "started": sum(s.kind == "started" for s in mine),
                "spanEnd": _at(max(ends)) if ends and len(ends) == len(mine) else None, **self._line(mine)}

    def _line(self, mine: list[Span]) -> dict[str, Any]:
        if not mine:
            return {"down": [], "peak": 0}
        budget_line = down(s for s in mine if not (self.on_clock and s.kind == "recovering"))
        return {"down": [[_at(t), n] for t, n in budget_line], "peak": peak(budget_line)}

    def header(self, policy: Policy, number: Numbered) -> dict[str, Any]:
        gates = [[g.name, g.scope, [[_at(a), _at(b)] for a, b in g.closed]]
                 for g in sorted(self.state.gates.values(), key=lambda g: g.name) if g.closed]
        start = min([t for t in (self.start,) if t is not None] + [g.closed[0][0] for g in
                    self.state.gates.values() if g.closed], default=None)
        return {"kinds": list(KINDS), "events": number.items, "start": _at(start),
                "minHealthy": policy.min_healthy, "gates": gates}


def _said(event: dict[str, Any] | None) -> str:
    said = (event or {}).get("said") or {}
    parts = [f"agent {said['agent']}" if said.get("agent") else "",
             f"Azure {said['azure']}" if said.get("azure") else ""]
    return ", ".join(p for p in parts if p)


def _at(moment: float | None) -> float | None:
    return None if moment is None else round(moment, 3)
