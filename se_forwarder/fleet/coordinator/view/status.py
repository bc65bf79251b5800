"""The read model: what ``coordinator status`` prints and the fleet page shows. JSON-serialisable.

``status(state, policy, now)`` (times RFC 3339 UTC, ages in seconds)::

    {"time", "shadow", "blackout": name | null,
     "fleet": {"vms", "watched", "unavailable", "groups", "openEvents"},
     "paused": [{"scope", "since", "actor", "reason"}], "held": [{"eventId", "since", "actor", "reason"}],
     "scopes": [{"scope", "kind", "size", "inventory", "used", "max", "paused"}],
     "scopeTotals": {kind: {"scopes", "full"}},
     "pending": [{"eventId", "eventType", "eventSource", "notBeforeUtc", "resources", "affected",
                  "reasonCode", "reason", "scope", "budgets", "nextTryUtc",
                  "approvals": [{"by", "time", "attempt", "shadow", "vm", "echo"}]}],
     "started": [{"eventId", "eventType", "startedUtc", "due", "affected"}],
     "decisions": [{"id", "decision", "time", "eventId", "reasonCode", "reason", "actor", "shadow",
                    "attempt", "target", "scope"}],
     "unwatched": [{"name", "vmId", "group", "lastHeartbeatUtc", "heartbeatAgeSeconds"}],
     "queueConflicts": [{"queue", "vms": ["<name> (<vmId>)"]}],
     "nameConflicts": [{"name", "vms": ["<name> (<vmId>)"], "first", "held": [...], "since"}],
     "outsideInventory": [{"name", "vmId", "scopes": [...]}],
     "identities": {"registered", "rekeyed": [{"name", "vmId", "old", "new", "time"}],
                    "sharedKeys": [{"keyid", "vms": ["<name> (<vmId>)"]}]},
     "azure": null | {"vms", "events", "agentless": [names], "syncedAgeSeconds": {sub: s},
                      "findings": [...]},   (view/azure.py)
     "health": [{"name", "vmId", "reason", "detail", "eventId", "sinceUtc"}],
     "alerts": [{"id", "kind", "summary", "severity", "details"}],   (view/health.py)
     "gates": [...], "windows": [...]}   (view/gates.py)

``scopes`` lists the budgeted scopes with a VM unavailable, full or paused (``all_scopes=True``:
every one), fullest first (``size``: the VMs that claim it; ``inventory``: those a percentage
``max`` is taken of, fold/inventory.py); ``outsideInventory``: VMs whose claim moved beyond where they
were placed, with the scopes they claim and do not count in (``coordinator confirm``);
``scopeTotals`` counts every scope per kind. ``pending`` lists every
Scheduled event, earliest NotBefore first, with the verdict of the pass (``reasonCode`` as in
decide/evaluate.py, ``approved`` once approved); ``affected`` are VM names; ``nextTryUtc``: when
an acknowledge ARM refused with a 403 is tried again (``acknowledge-refused``), else null.
``started``: the events Started, and those due (``due``: past the NotBefore at which Azure starts
them, not yet reported Started: "started by Azure (due)", since their NotBefore). ``decisions`` is
the log, newest first (``decisions_limit``). ``queueConflicts``: approval queues more than one VM
would use (queues.py); none of those VMs is sent an approval. ``nameConflicts``: VMs heard from
lately that claim one name in one group, or one resourceId (availability.py): each counts as
unavailable at first; once the conflict is older than heartbeat_timeout only those ``held`` do,
all but the ``first`` claimant.
``identities``: how many VMs have a registered key, the latest key changes (reinstalls, newest
first) and keys registered for several VMs (fold/identities.py).

The groups' VMs and their states are view/groups.py's.
"""

from __future__ import annotations

from typing import Any

from ....timestamps import rfc3339_or_none
from ..config.policy import Policy
from ..decide.availability import conflicts, due_at, echoes, is_due, unwatched
from ..decide.evaluate import Evaluation, evaluate
from ..decide.queues import queue_conflicts
from ..decide.scopes import ScopeIndex, last_heartbeat, resolve
from ..fold.identities import recent_rekeys, shared_keys
from ..fold.state import (
    SCHEDULED,
    STARTED,
    DecisionRecord,
    EventRecord,
    FleetState,
    Switch,
)
from . import azure as azure_view
from . import health as health_view
from .gates import gates_and_windows


def _age(now: float, moment: float | None) -> float | None:
    return None if moment is None else round(max(0.0, now - moment), 1)


def _switch(switch: Switch, key: str, name: str) -> dict[str, Any]:
    data = switch.record.data
    return {key: name, "since": rfc3339_or_none(switch.record.time), "actor": data.get("Actor"),
            "reason": data.get("Reason")}


def _approvals(state: FleetState, record: EventRecord, idx: ScopeIndex, vms: tuple[str, ...],
               ) -> list[dict[str, Any]]:
    """Who approved the event and when: the coordinator's (or a person's) approve decisions, then
    the echoes that count, of VMs the event affects (``by`` = their ApprovedBy)."""
    out: list[dict[str, Any]] = []
    for attempt, d in sorted(record.approvals.items()):
        target = d.data.get("Target")
        out.append({"by": d.data.get("Actor"), "time": rfc3339_or_none(d.time), "attempt": attempt,
                    "shadow": d.shadow, "vm": target.get("name") if isinstance(target, dict) else None,
                    "echo": False})
    for vm, (moment, by) in sorted(echoes(idx, record, vms).items(), key=lambda item: item[1]):
        name = state.vms[vm].name if vm in state.vms else vm
        out.append({"by": by, "time": rfc3339_or_none(moment), "attempt": None, "shadow": False, "vm": name,
                    "echo": True})
    return out


def _decision(d: DecisionRecord) -> dict[str, Any]:
    data = d.data
    target = data.get("Target")
    return {
        "id": d.id, "decision": d.kind, "time": rfc3339_or_none(d.time), "eventId": data.get("EventId"),
        "eventType": data.get("EventType"), "reasonCode": data.get("ReasonCode"),
        "reason": data.get("Reason"), "actor": data.get("Actor"), "shadow": d.shadow,
        "attempt": data.get("Attempt"), "target": target.get("name") if isinstance(target, dict) else None,
        "scope": data.get("Scope"), "budgets": data.get("Budgets") or [],
    }


def status(state: FleetState, policy: Policy, now: float, evaluation: Evaluation | None = None, *,
           decisions_limit: int = 50, all_scopes: bool = False) -> dict[str, Any]:
    """The status document (module docstring); ``evaluation`` saves a pass when the caller has one."""
    ev = evaluation if evaluation is not None else evaluate(state, policy, now)
    assert ev.index is not None
    idx = ev.index
    blackout = policy.blackout_at(now)
    scopes: list[dict[str, Any]] = []
    totals: dict[str, dict[str, int]] = {}
    for scope in idx.budget_of:
        kind, size, used = idx.kind_of[scope], idx.size[scope], ev.used[scope]
        limit = idx.limit(scope)
        total = totals.setdefault(kind, {"scopes": 0, "full": 0})
        total["scopes"] += 1
        total["full"] += used >= limit
        paused = state.paused(scope) is not None
        if all_scopes or used or paused:
            scopes.append({"scope": scope, "kind": kind, "size": size, "inventory": idx.inventory[scope],
                           "used": used, "max": limit, "paused": paused})
    scopes.sort(key=lambda s: (-s["used"] / max(s["max"], 1), s["scope"]))
    pending = []
    for key, verdict in ev.verdicts.items():
        record = state.events[key]
        pending.append({
            "eventId": record.event_id, "eventType": record.event_type, "eventSource": record.event_source,
            "notBeforeUtc": rfc3339_or_none(record.not_before), "resources": list(record.resources),
            "affected": [state.vms[v].name for v in verdict.affected], "reasonCode": verdict.code,
            "reason": verdict.reason, "scope": verdict.scope,
            "nextTryUtc": rfc3339_or_none(verdict.next_try),
            "budgets": [u.as_data() for u in verdict.budgets],
            "approvals": _approvals(state, record, idx, verdict.affected),
        })
    started = []
    for key in sorted(state.open_events):
        record = state.events[key]
        due = record.rank == SCHEDULED and not record.ran and is_due(state, record, now)
        if record.rank == STARTED or due:
            since = due_at(state, record) if due else record.started_at
            started.append({"eventId": record.event_id, "eventType": record.event_type,
                            "startedUtc": rfc3339_or_none(since), "due": due,
                            "affected": [state.vms[v].name for v in resolve(state, idx, record).vms]})
    log = sorted(state.decisions.values(), key=lambda d: (d.time, d.id), reverse=True)[:decisions_limit]
    not_watched: list[dict[str, Any]] = []
    for vm in unwatched(state, policy, idx, now):
        beat = last_heartbeat(state, idx, vm)
        not_watched.append({"name": state.vms[vm].name, "vmId": state.vms[vm].vm_id,
                            "group": idx.group_of.get(vm), "lastHeartbeatUtc": rfc3339_or_none(beat),
                            "heartbeatAgeSeconds": _age(now, beat)})
    not_watched.sort(key=lambda u: (u["name"].lower(), u["vmId"]))
    return {
        "time": rfc3339_or_none(now), "shadow": policy.shadow,
        "blackout": blackout.name if blackout else None,
        "fleet": {"vms": len(idx.members), "watched": len(idx.members) - len(not_watched),
                  "unavailable": len(ev.unavailable), "groups": len(set(idx.group_of.values())),
                  "openEvents": len(state.open_events)},
        "paused": [_switch(s, "scope", k) for k, s in sorted(state.pauses.items()) if s.on],
        "held": [_switch(s, "eventId", s.record.data.get("EventId") or k)
                 for k, s in sorted(state.holds.items()) if s.on],
        "scopes": scopes, "scopeTotals": totals,
        "pending": sorted(pending, key=lambda p: (p["notBeforeUtc"] or "~", p["eventId"])),
        "started": started,
        "decisions": [_decision(d) for d in log],
        "unwatched": not_watched,
        "queueConflicts": queue_conflicts(state, idx.shared_queue),
        "azure": azure_view.summary(state, idx, now),
        "nameConflicts": name_conflicts(state, policy, idx, now),
        "outsideInventory": [{"name": state.vms[k].name, "vmId": state.vms[k].vm_id, "scopes": list(out)}
                             for k, out in sorted(idx.outside.items()) if out],
        "identities": identities(state),
        "health": health_view.health(state, ev),
        "alerts": health_view.alerts(state, ev),
        **gates_and_windows(state, policy, now),
    }


def _named(state: FleetState, key: str) -> str:
    vm = state.vms.get(key)
    return f"{vm.name} ({vm.vm_id or key})" if vm is not None else key


def name_conflicts(state: FleetState, policy: Policy, idx: ScopeIndex, now: float) -> list[dict[str, Any]]:
    """Sets of VMs that claim one name (or resourceId), each once, sorted: who claimed it first and
    who is held down for it (availability.conflicts)."""
    seen: set[tuple[str, ...]] = set()
    out: list[dict[str, Any]] = []
    found = conflicts(state, policy, idx, now)
    for key, conflict in sorted(found.items()):
        members = tuple(sorted({key, *conflict.others}))
        if members not in seen:
            seen.add(members)
            first = next((k for k in members if found[k].first), None)
            out.append({"name": state.vms[key].name, "vms": [_named(state, k) for k in members],
                        "first": _named(state, first) if first else None,
                        "held": [_named(state, k) for k in members if found[k].held],
                        "since": rfc3339_or_none(conflict.since if conflict.since != float("inf") else None)})
    return out


def identities(state: FleetState) -> dict[str, Any]:
    return {
        "registered": len(state.identities),
        "rekeyed": [{"name": state.vms[r.vm].name if r.vm in state.vms else "", "vmId": r.vm, "old": r.old,
                     "new": r.new, "time": rfc3339_or_none(r.time)} for r in reversed(recent_rekeys(state))],
        "conflicts": key_conflicts(state),
        "sharedKeys": [{"keyid": kid, "vms": [_named(state, k) for k in vms]}
                       for kid, vms in shared_keys(state)],
    }


def key_conflicts(state: FleetState) -> list[dict[str, Any]]:
    """vmIds whose document came with two keys: counted down until settled (fold/identities.py)."""
    return [{"name": state.vms[vm].name if vm in state.vms else "", "vmId": vm,
             "keys": [c.keyid for c in conflict.candidates], "since": rfc3339_or_none(conflict.since)}
            for vm, conflict in sorted(state.conflicts.items())]
