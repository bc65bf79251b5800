"""The rule chain of the decision pass: why an event waits, or that it fits. Pure.

For each event not yet approved (evaluate.py), in this order (the first that fails is the verdict):

=================  ==============================================================================
``unmanaged``      a type it was reported under is not in ``manage``: left alone, no decision
``due``            its NotBefore has passed: Azure starts it now, nothing to decide
``too-early``      NotBefore is more than ``approve_within`` ahead
``held``           a person held it
``paused``         a scope holding an affected VM is paused (``fleet``: everything is)
``blackout``       now is inside a ``[[blackouts]]`` window
``gate-closed``    a gate of a scope holding an affected VM is closed (gates.py; ``[[gates]]``)
``blackout``       now is inside a blackout of ``[[windows]]`` of such a scope (gates.py)
``outside-window`` such a scope has maintenance windows (``[[windows]]``) and none is open now
``stale``          the fold is more than ``max_lag`` behind a hub, or how far is not known (the
                   lag guard, input/lag.py): the picture the budgets are counted on is late
``unresolved``     no Resources yet, or a name in Resources matches no VM (scopes.py)
``other-shard``    an affected VM is not of a subscription this shard owns (ownership.py)
``not-watched``    an affected VM is watched neither by its agent (a heartbeat within
                   heartbeat_timeout) nor by Azure (fold/topology.py)
``prepare-failed`` an affected VM reported ``preparefailed`` (and no ``prepared`` after it)
``not-prepared``   ``require_prepared`` and an affected VM has not reported ``prepared``
``queued``         a scope it needs is kept for an earlier event deferred for ``budget``
``budget``         a budgeted scope would exceed its limit with every affected VM counted
                   (VMs already unavailable counted once; approvals earlier in this pass count)
``queue-conflict`` no affected VM can be sent the approval: each one's queue is another VM's too
``fits``           all passed: **approve**, to one watched affected VM whose queue no other VM
                   shares (the first by name among those that reported the event Scheduled,
                   else among the others); with none, through ``acknowledge`` (decide/arm_path.py)
=================  ==============================================================================

The chain reads the pass (``Pass``: the fold, the policy, the clock, the scope index, who is down
and which scopes are kept for earlier events) and changes nothing; evaluate.py acts on its answer.
"""

from __future__ import annotations

from typing import Protocol

from ..config.policy import Policy
from ..fold.state import EventRecord, FleetState
from .events import BudgetUse, VmRef
from .gates import Hold, held_back
from .ownership import not_owned
from .scopes import FLEET, Resolution, ScopeIndex, last_heartbeat
from .wording import hhmm, not_watched, prepare_failed, span, who, why


class Pass(Protocol):
    """What the rules read of one decision pass (evaluate.DecisionPass)."""

    state: FleetState
    policy: Policy
    now: float
    idx: ScopeIndex
    down: dict[str, str]  # VM key -> why it is unavailable (before the pass)
    reserved: dict[str, str]  # scope -> EventId of the earlier event waiting for it
    holds: tuple[Hold, ...]  # closed gates, open blackouts, shut windows (gates.holds_now)
    stale: str  # why the fold's picture is too late to approve on ("" when it is not)

    def watched(self, vm: str) -> bool: ...

    def uses(self, vms: tuple[str, ...]) -> tuple[BudgetUse, ...]: ...

    def targets(self, record: EventRecord, vms: tuple[str, ...]) -> list[str]: ...

    def arm(self, record: EventRecord, res: Resolution) -> VmRef | None: ...


def first_failing(p: Pass, record: EventRecord, res: Resolution, impossible: bool = False,
                  ) -> tuple[str, str, str | None]:
    """(ReasonCode, Reason, Scope) of the first rule that fails, or ``fits``; an event that can
    never fit (a breach) is told ``budget``, not ``queued``."""
    state, policy, now = p.state, p.policy, p.now
    if record.not_before is not None and record.not_before - now > policy.approve_within:
        return ("too-early", f"NotBefore {hhmm(record.not_before)} is more than "
                f"{span(policy.approve_within)} ahead", None)
    held = state.held(record.key)
    if held is not None:
        return ("held", f"held by {who(held.record.data)}{why(held.record.data)}", None)
    # The scopes of its VMs and the fleet, fleet first: made only when a pause or a hold may name one
    scopes = sorted({s for vm in res.vms for s in p.idx.scopes_of.get(vm, ())} | {FLEET},
                    key=lambda s: (s != FLEET, s)) if state.pauses or p.holds else ()
    paused = next((s for s in scopes if state.paused(s)), None)
    if paused is not None:
        data = state.pauses[paused].record.data
        return ("paused", f"{paused} is paused by {who(data)}{why(data)}", paused)
    blackout = policy.blackout_at(now)
    if blackout is not None:
        return ("blackout", f"inside the blackout window {blackout.name!r}", None)
    gated = held_back(p.holds, scopes)
    if gated is not None:
        return gated
    if p.stale:
        return ("stale", f"no early approval on a late picture: {p.stale}", None)
    if not record.has_resources or not res.vms or res.unresolved:
        names = ", ".join(res.unresolved) if res.unresolved else "its Resources"
        return ("unresolved", f"{names} match no VM that reported the event or shares its group",
                None)
    vm = not_owned(state, policy, res.vms)
    if vm is not None:
        return ("other-shard", f"{state.vms[vm].name} is not of a subscription this shard owns "
                f"({state.vms[vm].subscription or 'subscription unknown'})", None)
    vm = next((v for v in res.vms if not p.watched(v)), None)
    if vm is not None:
        beat = last_heartbeat(p.state, p.idx, vm)
        return ("not-watched", not_watched(p.state.vms[vm].name, beat, now), None)
    failed = {p.idx.key(r) for r, (t, _) in record.prepare_failed.items()
              if t >= record.prepared.get(r, float("-inf"))}
    vm = next((v for v in res.vms if v in failed or p.down.get(v) == "prepare-failed"), None)
    if vm is not None:
        said = next((r for k, (_, r) in record.prepare_failed.items() if p.idx.key(k) == vm and r), "")
        return ("prepare-failed", prepare_failed(p.state.vms[vm].name, said), None)
    if policy.require_prepared:
        ready = {p.idx.key(r) for r, t in record.prepared.items()
                 if t >= record.prepare_failed.get(r, (float("-inf"), ""))[0]}
        vm = next((v for v in res.vms if v not in ready), None)
        if vm is not None:
            return ("not-prepared", f"{p.state.vms[vm].name} has not reported prepared", None)
    uses = p.uses(res.vms)
    for use in uses:
        if use.with_event > use.used and use.scope in p.reserved and not impossible:
            return ("queued", f"{use.scope} is kept for the earlier event "
                    f"{p.reserved[use.scope]}", use.scope)
    for use in uses:
        if not use.fits:
            return ("budget", f"{use.scope} would have {use.with_event} unavailable, max {use.max}",
                    use.scope)
    if not p.targets(record, res.vms) and p.arm(record, res) is None:
        shared = [p.state.vms[v].name for v in res.vms if v in p.idx.shared_queue]
        if shared:
            return ("queue-conflict", f"the approval queue of {', '.join(shared)} is another VM's "
                    "too: no affected VM to send the approval to", None)
        return ("not-watched", "no affected VM has a watched agent"
                + ("" if policy.acknowledge else " ([azure] acknowledge is off)"), None)
    at = max(range(len(uses)), key=lambda i: (uses[i].with_event / max(uses[i].max, 1), -i), default=None)
    detail = "" if at is None else f" ({uses[at].scope} {uses[at].with_event}/{uses[at].max})"
    return ("fits", f"fits every budget{detail}", None)
