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
     "events": [{"eventId", "eventType", "notBeforeUtc", "status"}],
     "groups": [{"group", "label", "scope", "size", "unavailable", "max", "paused", "zonal",
                 "vms": [[name, zone, faultDomain, updateDomain, state, heartbeatAge, event, watched]]}]}

``state`` is view.groups' (``ok``, ``pending``, ``approved``, ``started``, ``completed``,
``prepare-failed``, ``not-watched``); ``heartbeatAge`` whole seconds or -1 (never heard);
``event`` an index into ``events`` or -1; ``watched`` 1 or 0. ``max`` is the group's budget, or
null when groups have none. Labels come from se_forwarder.notify.describe, as the chat messages
say them.
"""

from __future__ import annotations

from typing import Any

from ....notify.describe import group_label, scope_label
from ..decide import evaluate
from ..settings import Policy
from ..state import FleetState
from ..view import groups, status

VERSION = 1
AFFECTED_LISTED = 20
DECISIONS_LISTED = 100


def page_view(state: FleetState, policy: Policy, now: float, service: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """The page's document (module docstring); ``service`` is Service.describe() when there is one."""
    ev = evaluate(state, policy, now)
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
    for g in groups(state, policy, now, ev):
        scope = f"group:{g['group']}".lower()
        vms = []
        zonal = False
        for vm in g["vms"]:
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
                        -1 if age is None else int(age), number, 1 if vm["watched"] else 0])
        out_groups.append({
            "group": g["group"], "label": group_label(g["group"]), "scope": scope, "size": g["size"],
            "unavailable": g["unavailable"], "max": idx.limit(scope) if scope in idx.budget_of else None,
            "paused": scope in paused, "zonal": zonal, "vms": vms,
        })
    return {"version": VERSION, "now": round(now, 3), "service": service, **st, "events": events,
            "groups": out_groups}
