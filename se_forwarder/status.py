"""`se-forwarder status`: read the state directory (read-only) without disturbing the agent."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .model import MalformedDocument, parse_document
from .outbox import Outbox


def read_status(state_dir: Path) -> dict[str, Any]:
    with Outbox(state_dir, readonly=True) as box:
        now = time.time()
        meta = {k: box.get_meta(k) for k in (
            "last_poll_at", "last_poll_ok", "last_poll_result", "last_ok_poll_at", "incarnation",
        )}
        pending: list[dict[str, Any]] = []
        raw_doc = box.get_meta("document")
        if raw_doc:
            try:
                doc = parse_document(raw_doc)
                for e in doc.events:
                    left = (e.not_before.timestamp() - now) if e.not_before else None
                    pending.append({
                        "EventId": e.event_id, "EventType": e.event_type, "EventStatus": e.status,
                        "NotBeforeInSeconds": None if left is None else round(left),
                        "Resources": list(e.resources),
                    })
            except MalformedDocument:
                pending = []
        sinks = []
        for name in box.sink_names():
            st = box.sink_status(name)
            sinks.append({
                "name": name,
                "backlog": st.backlog,
                "oldest_age_seconds": None if st.oldest_observed_at is None
                else round(now - st.oldest_observed_at, 1),
                "delivered": st.delivered,
                "parked": st.parked,
                "last_error": st.last_error,
                "dead_letters": st.dead_letters,
            })
        approvals = []
        for (payload,) in box.connection.execute(
            "SELECT payload FROM events WHERE state = 'approved' ORDER BY seq DESC LIMIT 10"
        ):
            event = json.loads(payload)
            approvals.append({"EventId": event.get("subject"), "time": event.get("time"),
                              "ApprovedBy": (event.get("data") or {}).get("ApprovedBy")})
        last = float(meta["last_poll_at"]) if meta["last_poll_at"] else None
        return {
            "state_dir": str(state_dir),
            "last_poll": {
                "at": last,
                "age_seconds": None if last is None else round(now - last, 1),
                "ok": meta["last_poll_ok"] == "1",
                "result": meta["last_poll_result"],
            },
            "incarnation": int(meta["incarnation"]) if meta["incarnation"] else None,
            "pending_events": pending,
            "sinks": sinks,
            "last_approvals": approvals,
        }


def render_status(info: dict[str, Any]) -> str:
    lp = info["last_poll"]
    lines = [f"state         {info['state_dir']}"]
    if lp["at"] is None:
        lines.append("last poll     never")
    else:
        lines.append(f"last poll     {lp['age_seconds']} s ago, "
                     f"{'ok' if lp['ok'] else 'FAILED'}: {lp['result']}")
    lines.append(f"incarnation   {info['incarnation']}")
    lines.append(f"events        {len(info['pending_events'])} in the current document")
    for e in info["pending_events"]:
        left = e["NotBeforeInSeconds"]
        when = f"starts in {left} s" if left is not None and left > 0 else e["EventStatus"]
        lines.append(f"  {e['EventId']}  {e['EventType']:<9} {e['EventStatus']:<9} {when}")
    lines.append("")
    lines.append(f"{'sink':<40} {'backlog':>7} {'oldest':>8} {'delivered':>9} {'dead':>5}  state")
    for s in info["sinks"]:
        oldest = "-" if s["oldest_age_seconds"] is None else f"{s['oldest_age_seconds']:.0f}s"
        state = f"PARKED: {s['parked']}" if s["parked"] else (
            f"error: {s['last_error']}" if s["last_error"] else "ok")
        lines.append(f"{s['name']:<40} {s['backlog']:>7} {oldest:>8} {s['delivered']:>9} "
                     f"{s['dead_letters']:>5}  {state}")
    if info["last_approvals"]:
        lines.append("")
        lines.append("last approvals")
        for a in info["last_approvals"]:
            lines.append(f"  {a['time']}  {a['EventId']}  by {a['ApprovedBy']}")
    return "\n".join(lines)
