"""`se-forwarder status`: what the agent is doing, read from the state directory.

The outbox is opened read-only (SQLite WAL readers never block the agent's writer), so this can run
as often as you like next to a running agent.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .cloudevents import ce_id
from .model import Kind, MalformedDocument, parse_document
from .outbox import Outbox
from .printable import strip_tree
from .timestamps import rfc3339

APPROVAL_TYPES = (Kind.APPROVED.type, Kind.APPROVAL_REJECTED.type)
LAST_APPROVALS = 10


def read_status(state_dir: Path) -> dict[str, Any]:
    """Everything `status` shows, as JSON-ready data (ages in seconds, times as unix seconds)."""
    with Outbox(state_dir, readonly=True) as box:
        now = time.time()
        meta = {k: box.get_meta(k) for k in (
            "last_poll_at", "last_poll_ok", "last_poll_result", "last_ok_poll_at", "incarnation",
            "vm",
        )}
        last, last_ok = box.last_poll()
        vm = _json_object(meta["vm"])
        return {
            "state_dir": str(state_dir),
            "vm": vm,
            # False while events carry only the host name (a warning, not a failure)
            "enrichment_complete": None if vm is None else vm.get("complete", True) is not False,
            "last_poll": {
                "at": last,
                "age_seconds": _age(now, last),
                "ok": meta["last_poll_ok"] == "1",
                "result": meta["last_poll_result"],
                "last_ok_at": last_ok,
                "last_ok_age_seconds": _age(now, last_ok),
            },
            "incarnation": int(meta["incarnation"]) if meta["incarnation"] else None,
            "pending_events": _pending(box, now),
            "sinks": [_sink(box, name, now) for name in box.sink_names()],
            "last_approvals": _approvals(box),
            "health": _json_object(box.get_meta("health")),
            "pending_recoveries": [
                {"EventId": p.event_id, "completed_at": p.completed_at,
                 "completed_age_seconds": _age(now, p.completed_at)}
                for p in box.recoveries.pending()],
        }


def _pending(box: Outbox, now: float) -> list[dict[str, Any]]:
    raw = box.get_meta("document")
    if not raw:
        return []
    try:
        doc = parse_document(raw)
    except MalformedDocument:
        return []
    out = []
    for e in doc.events:
        left = (e.not_before.timestamp() - now) if e.not_before else None
        out.append({
            "EventId": e.event_id, "EventType": e.event_type, "EventStatus": e.status,
            "NotBefore": rfc3339(e.not_before) if e.not_before else None,
            "NotBeforeInSeconds": None if left is None else round(left),
            "Resources": list(e.resources),
            "approved": box.has_event(ce_id(e.event_id, Kind.APPROVED)),
        })
    return out


def _sink(box: Outbox, name: str, now: float) -> dict[str, Any]:
    st = box.sink_status(name)
    return {
        "name": name,
        "backlog": st.backlog,
        "oldest_age_seconds": _age(now, st.oldest_observed_at),
        "delivered": st.delivered,
        "last_delivery_age_seconds": _age(now, st.last_ok_at),
        "parked": st.parked,
        "parked_age_seconds": _age(now, st.parked_at) if st.parked else None,
        "last_error": st.last_error,
        "last_error_age_seconds": _age(now, st.last_error_at) if st.last_error else None,
        "dead_letters": st.dead_letters,
    }


def _approvals(box: Outbox) -> list[dict[str, Any]]:
    out = []
    for stored in box.latest_of_types(APPROVAL_TYPES, LAST_APPROVALS):
        event = json.loads(stored.payload)
        data = event.get("data") or {}
        approved = event.get("type") == APPROVAL_TYPES[0]
        out.append({"EventId": event.get("subject") or data.get("EventId"), "time": event.get("time"),
                    "outcome": "approved" if approved else "rejected",
                    "ApprovedBy": data.get("ApprovedBy"), "Reason": data.get("Reason")})
    return out


def _json_object(raw: str | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _age(now: float, then: float | None) -> float | None:
    return None if then is None else round(max(0.0, now - then), 1)


# -- rendering ------------------------------------------------------------------------------------


def ago(seconds: float | None) -> str:
    """A duration the way people read it: ``4 s``, ``3 min 10 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if seconds < 1:
        return "<1 s"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def render_status(status: dict[str, Any]) -> str:
    """The human table (control characters in what IMDS and the sinks said are stripped)."""
    info: dict[str, Any] = strip_tree(status)
    lp = info["last_poll"]
    lines = [f"state         {info['state_dir']}"]
    vm = info.get("vm")
    if vm and vm.get("complete") is False:
        lines.append(f"vm            {vm.get('name')} (host name only: WARNING the instance metadata "
                     "has not answered yet; events carry the host name as the VM name)")
    elif vm:
        lines.append(f"vm            {vm.get('name')} (vmId {vm.get('vmId')})")
    if lp["at"] is None:
        lines.append("last poll     never (the agent has not polled from this state directory)")
    elif lp["ok"]:
        lines.append(f"last poll     {ago(lp['age_seconds'])} ago: ok")
    else:
        since = ("never succeeded" if lp["last_ok_age_seconds"] is None
                 else f"last success {ago(lp['last_ok_age_seconds'])} ago")
        lines.append(f"last poll     {ago(lp['age_seconds'])} ago: FAILED ({since}): {lp['result']}")
    lines.append(f"incarnation   {'-' if info['incarnation'] is None else info['incarnation']}")
    lines += _health_lines(info.get("health"), info.get("pending_recoveries") or [])
    events = info["pending_events"]
    lines.append(f"events        {len(events)} in the current document")
    if events:
        lines.append(f"  {'EventId':<38} {'Type':<10} {'Status':<10} {'approved':<9} NotBefore")
        for e in events:
            lines.append(f"  {e['EventId']:<38} {e['EventType']:<10} {e['EventStatus']:<10} "
                         f"{'yes' if e['approved'] else 'no':<9} {_not_before(e)}")
    lines.append("")
    sinks = info["sinks"]
    width = max([len("sink")] + [len(s["name"]) for s in sinks])
    lines.append(f"{'sink':<{width}}  {'backlog':>7}  {'oldest':>9}  {'delivered':>9}  {'dead':>4}  state")
    for s in sinks:
        oldest = "-" if not s["backlog"] else ago(s["oldest_age_seconds"])
        lines.append(f"{s['name']:<{width}}  {s['backlog']:>7}  {oldest:>9}  {s['delivered']:>9}  "
                     f"{s['dead_letters']:>4}  {_sink_state(s)}")
    if not sinks:
        lines.append("(no sink has run from this state directory)")
    approvals = info["last_approvals"]
    if approvals:
        lines.append("")
        lines.append("last approvals")
        for a in approvals:
            how = f"by {a['ApprovedBy']}" if a["outcome"] == "approved" else f"REJECTED: {a['Reason']}"
            lines.append(f"  {a['time']}  {a['EventId']}  {how}")
    return "\n".join(lines)


def _health_lines(health: dict[str, Any] | None, pending: list[dict[str, Any]]) -> list[str]:
    """The [health] verdict the agent stored last, and the recoveries not yet reported."""
    lines = []
    if health:
        checked = health.get("CheckedUtc")
        said = f"{health.get('Verdict')} since {health.get('SinceUtc')}"
        if health.get("Probe"):
            said += f" (probe {health['Probe']}: {health.get('Reason')})"
        lines.append(f"health        {said}; last checked {checked or 'never'}")
    for p in pending:
        lines.append(f"recovered     not yet for {p['EventId']} (completed "
                     f"{ago(p['completed_age_seconds'])} ago)")
    return lines


def _not_before(e: dict[str, Any]) -> str:
    left = e["NotBeforeInSeconds"]
    if left is None:
        return "-"
    when = datetime.fromisoformat(e["NotBefore"].replace("Z", "+00:00")).astimezone(UTC)
    stamp = when.strftime("%H:%M:%S UTC")
    return f"in {ago(left)} ({stamp})" if left > 0 else f"passed {ago(-left)} ago ({stamp})"


def _sink_state(s: dict[str, Any]) -> str:
    if s["parked"]:
        return (f"PARKED {ago(s['parked_age_seconds'])} ago: {s['parked']} "
                f"(fix it, then: se-forwarder sink resume {s['name']})")
    if s["last_error"]:
        return f"retrying: {s['last_error']} ({ago(s['last_error_age_seconds'])} ago)"
    return "ok"
