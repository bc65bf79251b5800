"""Forgetting: what ``prune`` drops from the fold, so memory stays bounded over months.

Call ``prune(state, policy, now)`` from time to time (once a minute is plenty), before a decision
pass. It is the only place where the clock changes the state, so two instances agree again as soon
as both pruned at about the same time. It drops:

- VMs not heard from (any report) for ``forget_after``: deleted or long dead; they leave every
  scope, so they no longer count as unavailable (the status lists them as not watched until then);
  with their registered keys and the reports held for them;
- events that every VM of their Resources reported completed or canceled itself (fold/reports.py:
  ``closed``; for an event Azure reported, that Azure showed ended) more than ``keep_events``
  (default: 24 h, at least ``min_healthy``) ago, and events nobody reported for ``forget_after``;
  with their decisions and holds. An event one of its VMs never reported over stays until then,
  whatever the others reported; with ``free_slot = "recovered"``, one a VM still in the fleet
  reported completed and not yet ``recovered`` stays too (decide/recovery.py). Their EventIds
  are remembered for ``keep_gone`` (7 days) so a straggling report cannot bring one back; with
  Azure's record of them (azure_fold.forget);
- pause/resume decisions older than ``keep_events`` that are not the current state of their scope,
  and inventory confirmations and key settlements older than that (what they confirmed or settled
  stays: fold/inventory.py, fold/identities.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.policy import DAY, Policy
from . import azure as azure_fold
from .health import awaiting_recovery
from .identities import forget
from .reports import closed
from .state import COMPLETED, FleetState


@dataclass(frozen=True)
class Pruned:
    vms: int
    events: int
    decisions: int


def prune(state: FleetState, policy: Policy, now: float, *, keep_events: float = DAY,
          keep_gone: float = 7 * DAY) -> Pruned:
    """Drop what the module docstring says; how many of each were dropped."""
    keep_events = max(keep_events, policy.min_healthy)
    recovering = policy.waits_for_recovery
    old_vms = [k for k, vm in state.vms.items() if vm.last_heard < now - policy.forget_after]
    if old_vms:
        for key in old_vms:
            del state.vms[key]
            state.confirmed.pop(key, None)
            state.confirmed_at.pop(key, None)
        state.note("vms", *old_vms)
        state.note("confirmed", *old_vms)
        forget(state, set(old_vms))
        state.touch(*old_vms, *state.groups.drop(set(old_vms)))
    old_events = []
    for key, record in state.events.items():
        if record.terminal and record.ended_at is not None and closed(state, record):
            if record.ended_at < now - keep_events and not (recovering and awaiting_recovery(state, record)):
                old_events.append((key, record.ended_at))
        elif max(record.last_report, max((d.time for d in record.approvals.values()), default=0.0),
                 max((d.time for d in record.defers.values()), default=0.0)) < now - policy.forget_after:
            old_events.append((key, now))
    removed = {key for key, _ in old_events}
    for key, ended in old_events:
        state.note("events", key)
        record = state.events.pop(key)
        state.open_events.discard(key)
        state.settling.discard(key)
        state.holds.pop(key, None)
        if state.terminated.pop(key, None) is not None:
            state.touch(*record.reports)  # the VMs it deleted are no longer (scopes.py)
        state.gone[key] = ended
    state.settling = {k for k in state.settling
                      if (r := state.events.get(k)) is not None and r.rank == COMPLETED
                      and r.completed_at is not None
                      and (recovering or r.completed_at + policy.min_healthy > now)}
    current = {s.record.id for s in state.pauses.values()}
    stale = []
    for ident, decision in state.decisions.items():
        event_id = decision.data.get("EventId")
        of_removed = isinstance(event_id, str) and event_id.lower() in removed
        old_switch = decision.kind in ("pause", "resume", "settle", "confirm") and ident not in current
        if of_removed or (old_switch and decision.time < now - keep_events):
            stale.append(ident)
    for ident in stale:
        del state.decisions[ident]
    state.note("decisions", *stale)
    state.gone = {k: t for k, t in state.gone.items() if t >= now - keep_gone}
    azure_fold.forget(state)
    if old_vms:
        state.names = None  # the fold's index of names, rebuilt when next needed
    if old_vms or old_events:
        state.vm_events = None  # the fold's count of each VM's events, rebuilt when next needed
    return Pruned(len(old_vms), len(old_events), len(stale))
