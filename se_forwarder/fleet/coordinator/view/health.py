"""What ``status`` and the page show of health: the VMs counted down for their health or their
recovery, and the alerts the fold holds open. Pure, JSON-serialisable.

``health(state, evaluation)``: one entry per VM counted down (decide/availability.py) as
``unhealthy``, ``azure-unavailable``, ``not-recovered`` or ``recovering``, whatever other reason it
has too (the first that applies, in that order), by name::

    {"name", "vmId", "reason", "detail", "eventId": for a recovery, else null, "sinceUtc"}

``detail`` says what it waits for: the failing probe (the agent's own words, bounded), Azure's
availability state, or what would free the slot. ``alerts(state, evaluation)``: the open alerts
view/alerts.py derives (``recovery-timeout``, ``breach``, ...), as ``as_data`` gives them.
"""

from __future__ import annotations

from typing import Any

from ....timestamps import rfc3339_or_none
from ..decide.evaluate import Evaluation
from ..fold.health import azure_health
from ..fold.state import FleetState
from ..fold.topology import agent_reported
from .alerts import as_data, derive


def health(state: FleetState, evaluation: Evaluation) -> list[dict[str, Any]]:
    """The VMs counted down for health or recovery (module docstring): whatever reason comes first
    for a VM (a VM unhealthy while its event settles is listed too)."""
    assert evaluation.index is not None
    late = {o.vm: o for o in evaluation.overdue}
    out = []
    azure = bool(state.azure.health)
    for key in evaluation.index.members:
        vm = state.vms[key]
        reason = evaluation.unavailable.get(key)
        if reason is None and not azure and vm.health != "unhealthy":
            continue  # the common case, at a glance
        said = azure_health(state, key)
        event_id, since = None, None
        if vm.health == "unhealthy":
            reason, detail = "unhealthy", f"probe failing: {vm.health_reason or 'no reason given'}"
        elif said is not None and said.down:
            reason, since = "azure-unavailable", said.occurred
            detail = f"Azure Resource Health says {said.state}"
        elif reason in ("recovering", "not-recovered"):
            detail = ("waiting for its agent's `recovered` report" if agent_reported(vm)
                      else "waiting for Azure Resource Health to say Available")
            if key in late:
                event_id, since = late[key].event_id, late[key].done
                detail += " (past recover_timeout)"
        else:
            continue
        out.append({"name": vm.name, "vmId": vm.vm_id, "reason": reason, "detail": detail,
                    "eventId": event_id, "sinceUtc": rfc3339_or_none(since)})
    return sorted(out, key=lambda h: (h["name"].lower(), h["vmId"]))


def alerts(state: FleetState, evaluation: Evaluation) -> list[dict[str, Any]]:
    """The fold's open alerts, by id."""
    return [as_data(a) for _, a in sorted(derive(state, evaluation).open.items())]
