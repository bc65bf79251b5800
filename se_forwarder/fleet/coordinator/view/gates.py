"""The gates and maintenance windows in the read model (`status`, the page). Pure.

``gates_and_windows(state, policy, now)``::

    {"gates": [{"name", "type", "scope", "open", "reason", "alerts": [...], "unreachable",
                "checkedUtc", "sinceUtc"}],
     "windows": [{"scope", "open", "window": null | {"name", "startUtc", "endUtc", "zone", "text"},
                  "blackout": null | {...}, "rules": [{"name", "blackout", "text"}]}]}

``window`` is the maintenance window open now in that scope, else the next one (null: the scope has
none, or none opens again); ``blackout`` likewise; ``open``: early approval is open there as far as
windows go (decide/gates.py). Gates are as they last answered (fold/gates.py).
"""

from __future__ import annotations

from typing import Any

from ....timestamps import rfc3339_or_none
from ..config.policy import Policy
from ..decide.gates import next_windows
from ..fold.state import FleetState


def gates_and_windows(state: FleetState, policy: Policy, now: float) -> dict[str, Any]:
    gates = [{"name": g.name, "type": g.kind, "scope": g.scope, "open": g.open, "reason": g.reason,
              "alerts": list(g.alerts), "unreachable": g.unreachable,
              "checkedUtc": rfc3339_or_none(g.checked), "sinceUtc": rfc3339_or_none(g.since)}
             for g in sorted(state.gates.values(), key=lambda g: g.name)]
    windows = []
    for found in next_windows(policy, now):
        for key in ("window", "blackout"):
            span = found[key]
            if span is not None:
                found[key] = {"name": span["name"], "startUtc": rfc3339_or_none(span["start"]),
                              "endUtc": rfc3339_or_none(span["end"]), "zone": span["zone"],
                              "text": span["text"]}
        windows.append(found)
    return {"gates": gates, "windows": windows}
