"""What people do through the control API, as decisions: pause, resume, hold, release, approve-now.

Each function is pure (state, policy, clock and the request in, one Decision out) and raises
``ControlRefused`` with a code and one line when the request cannot be carried out; the service
answers it as an error (e.g. HTTP 409) and publishes nothing. A returned decision is folded at
once (the next request's sequence depends on it) and then published; one that does not fold is
refused too (``not-folded``), never published. Pause, resume, hold and release are numbered
exactly one more than the current switch of their scope or event (switches.py).

=================  ==============================================================================
``pause``          no early approval for events touching ``scope`` (``fleet``, or no scope:
                   everything); approvals already sent stand, their retries stop
``resume``         undoes a pause of that scope
``hold``           no early approval for one EventId (known yet or not)
``release``        undoes a hold
``settle``         a vmId in key conflict (one attested document came with two keys): the key
                   that speaks for it, one of those in dispute, or none (its next registration
                   binds); the decision on the hub is the audit trail
``confirm``        the VMs of ``scope`` whose topology claim moved beyond their placement count
                   in the sizes of the scopes they claim (fold/inventory.py): growth a person
                   checked, published with each VM and the placement confirmed
``approve-now``    approve a Scheduled event at once, on a person's word: it bypasses the window,
                   holds, pauses, blackouts, ``manage`` and ``require_prepared``, but not the
                   budgets: every budget must still fit, except those the person overrides
                   (``overrides``: a scope key, a scope kind such as ``zone``, or ``all``); an
                   unresolved name in Resources needs ``all``. The message goes to a watched
                   affected VM, and is retried like any approval (keeping the overrides). When a
                   budget is exceeded (or cannot be counted) its ReasonCode is
                   ``approve-now-override``: the audit trail shows the person chose to.
=================  ==============================================================================

Refusal codes: ``bad-request`` (actor, reason, scope or EventId malformed), ``no-change`` (pause
of a paused scope, resume of one not paused, hold of a held event, release of one not held, confirm
of a scope whose VMs all count where they claim), ``too-many`` (a confirm of more VMs than one
decision names: confirm a narrower scope),
``unknown-event``, ``not-scheduled``, ``already-approved``, ``unresolved``, ``no-target``,
``budget``, and from the service ``not-folded`` (the decision would not fold: nothing was done).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from ....approvals.messages import EVENT_ID
from ....errors import SeForwarderError
from ....notify.describe import group_label
from ..config.policy import SCOPE_KINDS, Policy, budget_kind
from ..config.windows import SCOPE_KEY
from ..fold import identities, inventory, switches
from ..fold.state import SCHEDULED, FleetState
from .arm_path import VIA_ARM
from .availability import echoes
from .evaluate import DecisionPass
from .events import BudgetUse, Decision, VmRef, overridden
from .ownership import not_owned
from .scopes import FLEET, index, resolve

OVERRIDE = "approve-now-override"


class ControlRefused(SeForwarderError):
    """A control request that cannot be carried out; ``code`` is one of the module's codes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def normalize_scope(scope: str | None) -> str:
    """A scope key as ``pause`` takes it (module docstring of scopes.py); None or "" is ``fleet``."""
    if scope is None or not scope.strip():
        return FLEET
    text = scope.strip().lower()
    if not SCOPE_KEY.match(text) or any(ord(c) < 32 for c in text):
        raise ControlRefused("bad-request", f"{scope[:100]!r} is not a scope (fleet, group:..., zone:..., "
                             "fault_domain:..., update_domain:..., scale_set:..., resource_group:..., "
                             "tag:<name>=<value>)")
    return text


def expand_scope(state: FleetState, policy: Policy, scope: str) -> str:
    """A group named as people say it (``group:web``, ``fault_domain:web/1``: the availability set's,
    scale set's or tag's name, as status and the page show it) as its full key, when exactly one
    group of the fleet has that name; a name two groups share is refused, naming both."""
    kind, _, value = scope.partition(":")
    domain = kind in ("fault_domain", "update_domain")
    name, slash, rest = value.rpartition("/") if domain else (value, "", "")
    if not (domain or kind == "group") or "/" in name or (domain and not slash):
        return scope
    groups = set(index(state, policy).group_of.values())
    if name in groups:
        return scope
    found = sorted(g for g in groups if group_label(g).lower() == name)
    if len(found) > 1:
        raise ControlRefused("bad-request", f"{name!r} names {len(found)} groups; give one of "
                             + ", ".join(f"{kind}:{g}{slash}{rest}" for g in found[:5]))
    return f"{kind}:{found[0]}{slash}{rest}" if found else scope


def _text(value: str, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ControlRefused("bad-request", f"{what} is required")
    if len(value) > limit or any(ord(c) < 32 for c in value):
        raise ControlRefused("bad-request", f"{what} must be one line of at most {limit} characters")
    return value.strip()


def pause(state: FleetState, policy: Policy, now: float, scope: str | None, actor: str,
          reason: str) -> Decision:
    return _switch_scope(state, policy, now, expand_scope(state, policy, normalize_scope(scope)), True,
                         actor, reason)


def resume(state: FleetState, policy: Policy, now: float, scope: str | None, actor: str,
           reason: str) -> Decision:
    return _switch_scope(state, policy, now, expand_scope(state, policy, normalize_scope(scope)), False,
                         actor, reason)


def _switch_scope(state: FleetState, policy: Policy, now: float, scope: str, on: bool, actor: str,
                  reason: str) -> Decision:
    actor, reason = _text(actor, "actor", 200), _text(reason, "reason", 1000)
    kind = "pause" if on else "resume"
    current = state.pauses.get(scope)
    if (current is not None and current.on) == on:
        raise ControlRefused("no-change", f"{scope} is {'already' if on else 'not'} paused")
    sequence = switches.current(state.pauses, scope) + 1
    run = DecisionPass(state, policy, now)
    idx, used = run.idx, run.counts[scope]
    budgets = ((BudgetUse(scope, idx.kind_of[scope], idx.size[scope], used, used, idx.limit(scope)),)
               if scope in idx.budget_of else ())
    return Decision(kind=kind, id=f"coordinator/{kind}/{scope}/{sequence}", subject=scope, time=now,
                    code=kind, reason=reason, actor=actor, shadow=policy.shadow, scope=scope,
                    sequence=sequence, budgets=budgets)


def hold(state: FleetState, policy: Policy, now: float, event_id: str, actor: str,
         reason: str) -> Decision:
    return _switch_event(state, policy, now, event_id, True, actor, reason)


def release(state: FleetState, policy: Policy, now: float, event_id: str, actor: str,
            reason: str) -> Decision:
    return _switch_event(state, policy, now, event_id, False, actor, reason)


def _event_id(event_id: str) -> str:
    if not isinstance(event_id, str) or not EVENT_ID.match(event_id):
        raise ControlRefused("bad-request", f"{str(event_id)[:100]!r} is not an EventId")
    return event_id


def _switch_event(state: FleetState, policy: Policy, now: float, event_id: str, on: bool, actor: str,
                  reason: str) -> Decision:
    event_id = _event_id(event_id)
    actor, reason = _text(actor, "actor", 200), _text(reason, "reason", 1000)
    kind = "hold" if on else "release"
    current = state.holds.get(event_id.lower())
    if (current is not None and current.on) == on:
        raise ControlRefused("no-change", f"{event_id} is {'already' if on else 'not'} held")
    sequence = switches.current(state.holds, event_id.lower()) + 1
    record = state.events.get(event_id.lower())
    if record is not None:
        event_id = record.event_id
    return Decision(
        kind=kind, id=f"{event_id}/coordinator/{kind}/{sequence}", subject=event_id, time=now, code=kind,
        reason=reason, actor=actor, shadow=policy.shadow, event_id=event_id,
        event_type=record.event_type or None if record else None,
        event_source=record.event_source or None if record else None,
        not_before=record.not_before if record else None,
        resources=record.resources if record else (), sequence=sequence)


def confirm(state: FleetState, policy: Policy, now: float, scope: str | None, actor: str,
            reason: str) -> Decision:
    """A person confirms where the VMs of ``scope`` claim to be (module docstring)."""
    scope = expand_scope(state, policy, normalize_scope(scope))
    actor, reason = _text(actor, "actor", 200), _text(reason, "reason", 1000)
    idx = index(state, policy)
    moved = sorted(k for k, outside in idx.outside.items() if outside
                   and (scope == FLEET or scope in idx.scopes_of.get(k, ())))
    if not moved:
        raise ControlRefused("no-change", f"every VM of {scope} counts where it claims to be already")
    if len(moved) > inventory.MAX_CONFIRMED:
        raise ControlRefused("too-many", f"{len(moved)} VMs of {scope} claim a new placement, more than "
                             f"{inventory.MAX_CONFIRMED} in one confirmation: confirm a narrower scope")
    placed = tuple((key, inventory.placement(state.vms[key])) for key in moved)
    digest = hashlib.sha256(json.dumps([[k, inventory.as_data(p)] for k, p in placed]).encode()).hexdigest()
    run = DecisionPass(state, policy, now)
    return Decision(kind="confirm", id=f"coordinator/confirm/{scope}/{digest[:16]}", subject=scope,
                    time=now, code="confirm", reason=reason, actor=actor, shadow=policy.shadow, scope=scope,
                    affected=tuple(run.ref(k) for k in moved), confirmed=placed)


def settle(state: FleetState, policy: Policy, now: float, vm_id: str, keyid: str | None, actor: str,
           reason: str) -> Decision:
    """An operator's word on a vmId whose attested document came with two keys (fold/identities.py):
    the key that speaks for it (one of those in dispute), or none (its next registration binds)."""
    actor, reason = _text(actor, "actor", 200), _text(reason, "reason", 1000)
    vm = vm_id.strip().lower() if isinstance(vm_id, str) else ""
    conflict = state.conflicts.get(vm)
    if conflict is None:
        raise ControlRefused("no-change", f"{str(vm_id)[:100]} is not in key conflict")
    keys = [c.keyid for c in conflict.candidates]
    if keyid is not None and keyid not in keys:
        raise ControlRefused("bad-request", f"{str(keyid)[:40]} is not one of the keys in dispute for {vm}: "
                             f"{', '.join(keys)}")
    known = state.vms.get(vm)
    return Decision(kind="settle", id=f"coordinator/settle/{vm}/{int(now * 1000)}", subject=vm, time=now,
                    code="settle", reason=reason, actor=actor, shadow=policy.shadow,
                    scope=identities.SETTLE_SCOPE + vm, overrides=(f"key:{keyid}",) if keyid else (),
                    target=VmRef(known.name, vm, "") if known else None)


def _overrides(state: FleetState, policy: Policy, values: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        text = value.strip().lower() if isinstance(value, str) else ""
        if text == "all" or text in SCOPE_KINDS:
            out.append(text)
        elif text.startswith("tag:") and "=" not in text:
            try:
                out.append(budget_kind(text, "scope"))
            except SeForwarderError as exc:
                raise ControlRefused("bad-request", str(exc)) from None
        else:
            out.append(expand_scope(state, policy, normalize_scope(value)))
    return tuple(dict.fromkeys(out))


def approve_now(state: FleetState, policy: Policy, now: float, event_id: str, actor: str, reason: str,
                overrides: Sequence[str] = ()) -> Decision:
    """A person's approval of ``event_id`` (module docstring), or ControlRefused saying why not."""
    event_id = _event_id(event_id)
    actor, reason = _text(actor, "actor", 200), _text(reason, "reason", 1000)
    allowed = _overrides(state, policy, overrides)
    record = state.events.get(event_id.lower())
    if record is None or record.rank == 0:
        raise ControlRefused("unknown-event", f"no VM has reported {event_id}")
    if record.rank != SCHEDULED:
        raise ControlRefused("not-scheduled", f"{record.event_id} is not Scheduled any more")
    run = DecisionPass(state, policy, now)
    res = resolve(state, run.idx, record)
    if echoes(run.idx, record, res.vms) or record.last_approval(policy.shadow) is not None:
        raise ControlRefused("already-approved", f"{record.event_id} is approved already")
    if (res.unresolved or not res.vms) and "all" not in allowed:
        names = ", ".join(res.unresolved) or "its Resources"
        raise ControlRefused("unresolved", f"{names} match no known VM; its budgets cannot be counted "
                             "(override with scope all to approve anyway)")
    foreign = not_owned(state, policy, res.vms)
    if foreign is not None:
        raise ControlRefused("other-shard", f"{state.vms[foreign].name} is not of a subscription this shard "
                             "owns: approve it on the shard that owns it")
    targets = run.targets(record, res.vms)
    arm = None if targets else run.arm(record, res)
    if not targets and arm is None:
        raise ControlRefused("no-target", f"no affected VM of {record.event_id} has a watched agent to send "
                             "the approval to, and it cannot go through acknowledge ([azure])")
    budgets = run.uses(res.vms)
    for use in budgets:
        if not use.fits and not overridden(use, allowed):
            raise ControlRefused("budget", f"{use.scope} would have {use.with_event} unavailable, max "
                                 f"{use.max} (override it with --scope {use.scope} or --scope {use.kind})")
    exceeds = res.unresolved or not res.vms or any(not use.fits for use in budgets)
    attempt = max(record.approvals, default=0) + 1
    return run.decision("approve", record, f"{record.event_id}/coordinator/approve/{attempt}",
                        OVERRIDE if exceeds else "approve-now", reason, res, actor=actor,
                        target=run.ref(targets[0]) if targets else arm, budgets=budgets, attempt=attempt,
                        overrides=allowed, via=None if targets else VIA_ARM)
