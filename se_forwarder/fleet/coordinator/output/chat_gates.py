"""Each gate that closes, and opens again, as one chat message (``[[notify]]`` with ``gate`` in its
``decisions``, the default; output/chat.py sends it).

``GateChanges.take`` runs on the service thread once a second, like the decisions' look: a gate
whose verdict (fold/gates.py) turned closed since the last look, after this notifier started and
while this instance acts, is one ``gate`` message naming the gate, its scope and why (the alerts
that fire, or that it cannot be asked); one that opens after such a message is another. A gate that
was never said closed is not said open. The message is a CloudEvent-shaped dict of type
``com.azure.scheduledevents.coordinator.gate`` for se_forwarder.notify (it is not published).
"""

from __future__ import annotations

from typing import Any

from ....timestamps import rfc3339
from ..fold.state import FleetState
from ..schema import DECISION_PREFIX

KIND = DECISION_PREFIX + "gate"


class GateChanges:
    def __init__(self, since: float) -> None:
        self.since = since
        self.said: dict[str, tuple[bool, float | None]] = {}  # gate -> (open, since) last said

    def take(self, state: FleetState, acting: bool) -> list[dict[str, Any]]:
        out = []
        for name, gate in sorted(state.gates.items()):
            if gate.checked is None or gate.since is None or gate.since < self.since:
                continue
            last = self.said.get(name)
            if last == (gate.open, gate.since) or (gate.open and (last is None or last[0])):
                continue
            self.said[name] = (gate.open, gate.since)
            if acting:
                said = "open" if gate.open else "closed"
                out.append({"type": KIND, "id": f"gate/{name}/{said}/{gate.since}",
                            "time": rfc3339(gate.since), "data": {
                                "Gate": name, "GateType": gate.kind, "Scope": gate.scope, "Open": gate.open,
                                "Reason": gate.reason, "Alerts": list(gate.alerts)}})
        return out
