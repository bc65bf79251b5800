"""When a VM an event took down frees its slot: on the clock, or on observed recovery. Pure.

A VM is *done* with an event at a moment availability.completions says (its own completed report,
the silence that made it done, or Azure's Completed). Then ``[policy] free_slot`` decides:

- ``"min_healthy"`` (the default): it is back ``min_healthy`` after that, on the clock alone;
- ``"recovered"``: it is back once ``min_healthy`` has passed *and* it is seen recovered:
  - a VM whose agent ever reported (fold/topology.agent_reported): its own ``recovered`` report of
    that event (the agent sends it once its recover hook succeeded and its ``[health]`` probes
    pass: docs/health.md), verified at the edge like every report;
  - a VM without an agent: Azure's Resource Health shows it ``Available``, a state it took at or
    after the event Started (after the VM was done with it when no start is known).

Until then its reason (availability.py) is ``completed`` within ``min_healthy``, then
``recovering``, and ``not-recovered`` once ``recover_timeout`` has passed since it was done: it stays
counted down in every budget (never freed by the clock), and ``unavailable`` lists it as ``Overdue``
for the ``recovery-timeout`` alert (view/alerts.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.policy import Policy
from ..fold.health import azure_health
from ..fold.state import EventRecord, FleetState
from ..fold.topology import agent_reported
from .scopes import ScopeIndex

RECOVERED = "recovered"


@dataclass(frozen=True)
class Overdue:
    """A VM not seen recovered ``recover_timeout`` after it was done with an event."""

    vm: str  # VM key
    event_key: str
    event_id: str
    done: float  # when it was done with the event


def recovered_at(state: FleetState, idx: ScopeIndex, record: EventRecord, vm: str,
                 done: float) -> float | None:
    """When ``vm`` was seen recovered from ``record`` (module docstring); None while it is not."""
    own = [moment for reporter, moment in record.recovered.items() if idx.key(reporter) == vm]
    if own:
        return min(own)
    facts = state.vms.get(vm)
    if facts is not None and agent_reported(facts):
        return None
    health = azure_health(state, vm)
    since = record.started_at if record.started_at is not None else done
    return health.occurred if health is not None and health.state == "Available" and \
        health.occurred >= since else None


def recovered(state: FleetState, idx: ScopeIndex, record: EventRecord, vm: str, done: float) -> bool:
    return recovered_at(state, idx, record, vm, done) is not None


def held(state: FleetState, policy: Policy, idx: ScopeIndex, record: EventRecord, vm: str, done: float,
         back: float, now: float) -> str | None:
    """Why ``vm``, done with ``record`` at ``done``, still counts as unavailable now (``back``: when
    the clock frees it, availability.back_at); None once back."""
    if back > now:
        return "completed"
    if policy.free_slot != RECOVERED or recovered(state, idx, record, vm, done):
        return None
    return "not-recovered" if done + policy.recover_timeout <= now else "recovering"
