"""The decision pass: a pure function of the fold's state, the policy and the clock.

``evaluate(state, policy, now)`` looks at every Scheduled event the fleet reports, earliest
``NotBefore`` first (then by EventId), and returns the decisions to publish plus, for every such
event, the verdict (why it waits). It never changes the state: the service folds the decisions it
publishes (``fold.fold_event(state, events.to_dict(d, source))``) before the next pass, and the
same decisions come back from the hub harmlessly (deterministic ids).

For each event not yet approved, the rule chain (rules.py) says why it waits, or that it fits.

Every verdict names the VMs the event affects (its Resources resolved, scopes.py), whatever its
code. A verdict other than ``fits``, ``unmanaged`` or ``due`` is published as a ``defer`` decision
only when its ReasonCode differs from the event's last recorded defer: once per change of reason (a
budget that fails in another scope is the same reason; the read model shows the current one).
``queued`` is what makes "earliest NotBefore first" hold within a scope: an event that does
not fit keeps the scopes where it failed from later events in the same pass (unless it can never
fit: see breach), so a later, smaller event cannot overtake it there.

Breach. At its NotBefore Azure starts an event whatever the coordinator does, for all its
Resources at once. So a managed Scheduled event *breaches* a budgeted scope S when its own
affected VMs in S alone exceed S's limit: ``|affected ∩ S| > max(S)``. This is certain, not a
forecast (other VMs of S may be down then too, which would only make it worse). A ``breach``
decision names those scopes; it is published as soon as the event is resolved (whatever its other
verdicts: held, paused, too early), once per event and set of scopes (again only if a scope was
added). Such an event is never approved early (it cannot fit); it waits for its NotBefore, and
it reserves no scope.

The lag guard. While ``stale`` says the fold is further behind a hub than ``max_lag`` (input/lag.py),
no event is approved (``stale``, after the switches people set), no approval's message is sent and
none is retried: approving on a late picture could count a VM as up that is down. A person's
approve-now still goes. Defers, breaches and the verdicts go on.

Approved events (an echo from a VM the event affects or from ARM, or a counted approve decision)
are not decided again. An approval's message goes out until it is sent: while the latest approve
decision of an event has no ``sent`` record (events.py), the event is not echoed, held, paused, in
a blackout or past NotBefore, and every budget still fits as for a retry (below: sending it is
approving it), its id is listed in ``Evaluation.sends`` (the service sends those, under their own
message id). An approval through ARM (``Via: "arm"``) is never listed: it has no message; the
service acknowledges it once published, and its ``acknowledge`` record says what Azure answered
(decide/arm_path.py). An approve decision that got no such echo within ``echo_timeout`` of its
``sent`` (or ``acknowledge``) record, or whose message its target VM itself (or ARM, for one
through ARM) rejected (any reason but ``replayed``, ``not-scheduled``, ``unknown-event``), is
retried as a new ``approve`` (next attempt, ``retry-no-echo`` / ``retry-rejected``) to the next
watched affected VM by name that has not rejected it (cycling; the same VM when it is the only
one; through ARM when no VM is left and that path is open), while NotBefore is ahead, the event is
neither held, paused nor in a blackout, and every budget still fits (``budget``/``unresolved``
otherwise; its own VMs counted once, a person's overrides kept). When no VM is left: a ``defer``
with ``no-target``. In shadow mode nothing was sent, so nothing is retried; shadow approvals count
as approvals there (so a shadow run paces like a live one) and are ignored by a live run.

Gates and maintenance windows (decide/gates.py) hold an approval's message and a retry back as a
blackout does.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from ..config.policy import Policy
from ..fold import azure as azure_fold
from ..fold import topology as azure_topology
from ..fold.state import SCHEDULED, DecisionRecord, EventRecord, FleetState
from . import arm_path as azure_paths
from .availability import Conflict, conflicts, echoes, unavailable, used
from .events import BudgetUse, Decision, VmRef, inherited, overridden
from .gates import held_back, holds_now
from .ownership import owned
from .recovery import Overdue
from .rules import first_failing
from .scopes import FLEET, Resolution, ScopeIndex, index, last_heartbeat, resolve
from .wording import hhmm, span

NO_RETRY_CODES = ("replayed", "not-scheduled", "unknown-event")
PERSONS = ("approve-now", "approve-now-override")  # a person's approval: it goes on a late picture too


class Verdict(NamedTuple):
    """Why an event waits (or that it was approved) after this pass (a named tuple, as a decision
    is: events.py)."""

    event_key: str
    event_id: str
    code: str
    reason: str
    scope: str | None = None
    affected: tuple[str, ...] = ()  # VM keys (every verdict: the resolved Resources)
    budgets: tuple[BudgetUse, ...] = ()
    next_try: float | None = None  # acknowledge-refused: when acknowledge is tried again (arm_path.py)


@dataclass
class Evaluation:
    now: float
    decisions: list[Decision] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # event key -> verdict
    unavailable: dict[str, str] = field(default_factory=dict)  # VM key -> reason (before the pass)
    used: Counter[str] = field(default_factory=Counter)  # budgeted scope -> unavailable VMs
    index: ScopeIndex | None = None
    sends: list[str] = field(default_factory=list)  # approve ids whose message is to be sent now
    overdue: list[Overdue] = field(default_factory=list)  # VMs not seen recovered in time (recovery.py)
    conflicts: dict[str, Conflict] = field(default_factory=dict)  # VM key -> its name conflict


class DecisionPass:
    """One evaluation: the unavailable set grows with each approval made in it."""

    def __init__(self, state: FleetState, policy: Policy, now: float, stale: str = "") -> None:
        self.state, self.policy, self.now, self.stale = state, policy, now, stale
        self.idx = index(state, policy)
        overdue: list[Overdue] = []
        self.recovering: set[str] = set()  # down only until seen recovered (decide/recovery.py)
        self.down = unavailable(state, policy, self.idx, now, overdue, self.recovering)
        self.on_clock = policy.on_clock
        self.counts = used(self.idx, self.down, self.recovering, self.on_clock)
        self.taken, self.taken_counts = dict(self.down), Counter(self.counts)
        self.reserved: dict[str, str] = {}  # scope -> EventId of the earlier event waiting for it
        self._uses: tuple[tuple[str, ...], int, tuple[BudgetUse, ...]] | None = None
        self._targets: tuple[EventRecord, tuple[str, ...], list[str]] | None = None
        self.holds = holds_now(state, policy, now)  # gates and windows (decide/gates.py)
        self.out = Evaluation(now, unavailable=dict(self.down), used=Counter(self.counts), index=self.idx,
                              overdue=overdue, conflicts=conflicts(state, policy, self.idx, now))
        kinds = [b.kind for b in policy.budgets]
        self.kind_rank = {kind: i for i, kind in enumerate(kinds)}
        self._scopes: dict[str, tuple[str, ...]] = {}  # looked up once a pass (budget_scopes, facts)
        self._facts: dict[str, tuple[int, str, int, int]] = {}

    # -- helpers shared with control.py -------------------------------------------------------

    def agent_watched(self, vm: str) -> bool:
        beat = last_heartbeat(self.state, self.idx, vm)
        return beat is not None and beat >= self.now - self.policy.heartbeat_timeout

    def watched(self, vm: str) -> bool:
        """Its agent is watched, or Azure watches it (azure_topology.watched)."""
        return self.agent_watched(vm) or azure_topology.watched(self.state, self.policy, vm, self.now)

    def arm(self, record: EventRecord, res: Resolution) -> VmRef | None:
        """The approval's target when it goes through ``acknowledge`` (decide/arm_path.py)."""
        return azure_paths.arm_target(self.state, self.policy, self.idx, record, res.vms)

    def ref(self, vm: str) -> VmRef:
        record = self.state.vms[vm]
        return VmRef(record.name, record.vm_id, self.idx.group_of.get(vm, ""))

    def budget_scopes(self, vm: str) -> tuple[str, ...]:
        """The budgeted scopes holding ``vm`` (none when it is not of the fleet)."""
        if (found := self._scopes.get(vm)) is None:
            found = self._scopes[vm] = self.idx.budget_scopes_of.get(vm, ())
        return found

    def facts(self, scope: str) -> tuple[int, str, int, int]:
        """A budgeted scope's kind's place in the policy, its kind, size and limit."""
        if (found := self._facts.get(scope)) is None:
            size, inventory, kind, budget = self.idx.counts.look(scope)  # idx.kind_of, size and limit at once
            if kind is None or budget is None:
                raise KeyError(scope)
            found = self._facts[scope] = (self.kind_rank[kind], kind, size, budget.limit(inventory))
        return found

    def uses(self, vms: tuple[str, ...]) -> tuple[BudgetUse, ...]:
        """Budget use of every budgeted scope holding one of ``vms``, in policy order (the last
        answer again while nothing was taken since: the rules and the decision both ask)."""
        if self._uses is not None and self._uses[0] is vms and self._uses[1] == len(self.taken):
            return self._uses[2]
        extra: dict[str, int] = {}
        for vm in vms:
            for scope in self.budget_scopes(vm):
                extra[scope] = extra.get(scope, 0) + self._free_in(vm, scope)
        taken, ordered = self.taken_counts, sorted((f[0], s, f) for s in extra for f in (self.facts(s),))
        found = tuple(BudgetUse(s, kind, size, taken[s], taken[s] + extra[s], limit)
                      for _, s, (_, kind, size, limit) in ordered)
        self._uses = (vms, len(self.taken), found)
        return found

    def _free_in(self, vm: str, scope: str) -> bool:
        """``vm`` does not count against ``scope`` yet: not down, or down only until it is seen
        recovered while ``scope``'s budget frees slots on the clock (decide/recovery.py)."""
        return vm not in self.taken or (vm in self.recovering and self.facts(scope)[1] in self.on_clock)

    def take(self, vms: tuple[str, ...]) -> None:
        counts = self.taken_counts
        for vm in vms:
            for scope in self.budget_scopes(vm):
                if self._free_in(vm, scope):
                    counts[scope] += 1
            self.taken.setdefault(vm, "approved")
            self.recovering.discard(vm)

    def targets(self, record: EventRecord, vms: tuple[str, ...]) -> list[str]:
        """Watched affected VMs of this shard (ownership.py) whose approval queue no other VM shares
        (queues.py), those that reported the event Scheduled first, then by name (the last answer
        again for the same event and VMs: the rules and the decision both ask)."""
        if self._targets is not None and self._targets[0] is record and self._targets[1] is vms:
            return list(self._targets[2])
        found = [vm for vm in vms if self.agent_watched(vm) and vm not in self.idx.shared_queue
                 and owned(self.state, self.policy, vm)]
        if len(found) > 1:
            seen = {self.idx.key(r) for r, rank in record.reports.items() if rank == SCHEDULED}
            found.sort(key=lambda vm: (vm not in seen, self.state.vms[vm].name.lower(), vm))
        self._targets = (record, vms, found)
        return list(found)

    def decision(self, kind: str, record: EventRecord, ident: str, code: str, reason: str,
                 res: Resolution, **more: object) -> Decision:
        return Decision(
            kind=kind, id=ident, subject=record.event_id, time=self.now, code=code, reason=reason,
            shadow=self.policy.shadow, event_id=record.event_id, event_type=record.event_type or None,
            event_source=record.event_source or None, not_before=record.not_before,
            resources=record.resources, affected=tuple(self.ref(vm) for vm in res.vms),
            **more,  # type: ignore[arg-type]
        )

    # -- the pass -------------------------------------------------------------------------------

    def run(self) -> Evaluation:
        pending = [self.state.events[k] for k in self.state.open_events
                   if self.state.events[k].rank == SCHEDULED]
        pending.sort(key=lambda r: (r.not_before if r.not_before is not None else float("inf"), r.key))
        for record in pending:
            verdict = self.consider(record)
            self.out.verdicts[record.key] = verdict
        return self.out

    def consider(self, record: EventRecord) -> Verdict:
        res = resolve(self.state, self.idx, record)
        if echoes(self.idx, record, res.vms) or record.last_approval(self.policy.shadow) is not None:
            return self.retry(record, res)
        if unmanaged := [t for t in record.types or (record.event_type,) if t not in self.policy.manage]:
            said = " and ".join(record.types) if len(record.types) > 1 else unmanaged[0] or "this type"
            return Verdict(record.key, record.event_id, "unmanaged",
                           f"{said} is not in manage: left alone", None, res.vms)
        if record.not_before is not None and record.not_before <= self.now:
            return Verdict(record.key, record.event_id, "due", "NotBefore has passed: Azure starts it now",
                           None, res.vms)
        impossible = self.breach(record, res)
        code, reason, scope = first_failing(self, record, res, impossible)
        budgets = self.uses(res.vms)
        if code == "budget" and not impossible:
            for use in budgets:
                if not use.fits:
                    self.reserved.setdefault(use.scope, record.event_id)
        if code == "fits":
            targets = self.targets(record, res.vms)
            attempt = max(record.approvals, default=0) + 1
            self.approve(self.decision(
                "approve", record, f"{record.event_id}/coordinator/approve/{attempt}", code, reason, res,
                target=self.ref(targets[0]) if targets else self.arm(record, res), budgets=budgets,
                attempt=attempt, via=None if targets else azure_paths.VIA_ARM))
            self.take(res.vms)
            return Verdict(record.key, record.event_id, "approved", reason, None, res.vms, budgets)
        self.defer(record, res, code, reason, scope, budgets)
        return Verdict(record.key, record.event_id, code, reason, scope, res.vms, budgets)

    def approve(self, decision: Decision) -> None:
        self.out.decisions.append(decision)
        if not decision.shadow and decision.via is None:  # through ARM: acknowledged, no message
            self.out.sends.append(decision.id)

    def defer(self, record: EventRecord, res: Resolution, code: str, reason: str, scope: str | None,
              budgets: tuple[BudgetUse, ...]) -> None:
        last = record.last_defer()
        if last is not None and last.code == code:
            return
        ident = f"{record.event_id}/coordinator/defer/{len(record.defers) + 1}-{code}"
        self.out.decisions.append(self.decision("defer", record, ident, code, reason, res,
                                                budgets=budgets, scope=scope))

    def breach(self, record: EventRecord, res: Resolution) -> bool:
        """Publish a breach warning if this event alone exceeds a scope; True when it does."""
        if not res.vms:
            return False
        own: dict[str, int] = {}
        for vm in res.vms:
            for scope in self.budget_scopes(vm):
                own[scope] = own.get(scope, 0) + 1
        facts = self.facts
        over = sorted((f[0], s, f) for s, n in own.items() if n > (f := facts(s))[3])
        if not over:
            return False
        if not {s for _, s, _ in over} <= record.warned_scopes():
            digest = hashlib.sha256(",".join(sorted(s for _, s, _ in over)).encode()).hexdigest()[:12]
            budgets = tuple(BudgetUse(s, kind, size, self.counts[s], own[s], limit)
                            for _, s, (_, kind, size, limit) in over)
            first = budgets[0]
            reason = (f"at NotBefore {hhmm(record.not_before)} this event alone takes {first.with_event} "
                      f"VMs of {first.scope} down, max {first.max}")
            self.out.decisions.append(self.decision(
                "breach", record, f"{record.event_id}/coordinator/breach/{digest}", "breach", reason, res,
                budgets=budgets, scope=first.scope))
        return True

    def retry(self, record: EventRecord, res: Resolution) -> Verdict:
        """An approved event: resend the approval elsewhere when no echo came (module docstring)."""
        last = record.last_approval(self.policy.shadow)
        echoed = echoes(self.idx, record, res.vms)
        sent = azure_paths.went_out(self.state, record, last)
        status = ("acknowledged by Azure" if list(echoed) == [azure_fold.ARM] else "echoed by an agent"
                  if echoed else "in shadow mode, nothing sent"
                  if last is not None and last.shadow else azure_paths.waiting(last, sent))
        approved = Verdict(record.key, record.event_id, "approved", f"approved, {status}", None, res.vms)
        if echoed or last is None or last.shadow or self.policy.shadow:
            return approved
        if record.not_before is not None and record.not_before <= self.now:
            return approved
        scopes = {s for vm in res.vms for s in self.idx.scopes_of.get(vm, ())} | {FLEET}
        if (self.state.held(record.key) or self.policy.blackout_at(self.now)
                or any(self.state.paused(s) for s in scopes)
                or held_back(self.holds, scopes) is not None):
            return approved
        if self.stale and last.code not in PERSONS:  # neither sent nor retried on a late picture
            return Verdict(record.key, record.event_id, "approved",
                           f"approved; its message waits: {self.stale}", None, res.vms)
        targets = {r.id: azure_fold.ARM if r.data.get("Via") == azure_paths.VIA_ARM  # who may reject it
                   else self.idx.key(r.target_key) for r in record.approvals.values()}
        refusals = {msg: vm for msg, (vm, code) in record.rejections.items()
                    if msg in targets and self.idx.key(vm) == targets[msg] and code not in NO_RETRY_CODES}
        rejected = last.id in refusals
        if sent is None and not rejected and last.data.get("Via") != azure_paths.VIA_ARM:
            waits = self.recheck(record, res, last)  # its message is yet to go out: that approves it too
            if waits is None:
                self.out.sends.append(last.id)
            return waits or approved
        since = sent.time if sent is not None else last.time
        if not rejected and self.now < since + self.policy.echo_timeout:
            return approved
        rejecters = {self.idx.key(vm) for vm in refusals.values()}
        candidates = [vm for vm in self.targets(record, res.vms) if vm not in rejecters]
        arm = None if candidates else self.arm_again(record, res, rejecters)
        if isinstance(arm, Verdict):
            return arm
        if not candidates and arm is None:
            reason = "no watched affected VM left to send the approval to"
            self.defer(record, res, "no-target", reason, None, ())
            return Verdict(record.key, record.event_id, "no-target", reason, None, res.vms)
        waits = self.recheck(record, res, last)
        if waits is not None:
            return waits
        previous = self.idx.key(last.target_key)
        ordered = sorted(candidates, key=lambda vm: (self.state.vms[vm].name.lower(), vm))
        after = [vm for vm in ordered if (self.state.vms[vm].name.lower(), vm) >
                 (self.state.vms[previous].name.lower() if previous in self.state.vms else "", previous)]
        target = self.ref((after or ordered)[0]) if candidates else arm
        assert target is not None
        before = ("acknowledge" if last.data.get("Via") == azure_paths.VIA_ARM else
                  self.state.vms[previous].name if previous in self.state.vms else "its target")
        where = f"sending it to {target.name}" if candidates else "approving it through acknowledge"
        code = "retry-rejected" if rejected else "retry-no-echo"
        reason = (f"{before} rejected the approval; {where}" if rejected else
                  f"no approved echo from {before} within {span(self.policy.echo_timeout)}; {where}")
        attempt = max(record.approvals) + 1
        self.approve(self.decision(
            "approve", record, f"{record.event_id}/coordinator/approve/{attempt}", code, reason, res,
            target=target, budgets=self.uses(res.vms), attempt=attempt,
            overrides=inherited(last), via=None if candidates else azure_paths.VIA_ARM))
        return Verdict(record.key, record.event_id, "approved", reason, None, res.vms)

    def arm_again(self, record: EventRecord, res: Resolution, rejecters: set[str]) -> VmRef | Verdict | None:
        """The ARM target of a retry: never after ARM rejected the event but with a 403, and after a
        403 at its next try only (arm_path.next_try); the verdict while it waits for that."""
        if azure_fold.ARM not in rejecters:
            return self.arm(record, res)
        again = azure_paths.next_try(self.state, record)
        target = self.arm(record, res) if again is not None else None
        if target is None or again is None or self.now >= again:
            return target
        count, answer = azure_paths.refused_in_a_row(self.state, record)
        said = str(answer.data.get("Reason") or "")[:200] if answer is not None else ""
        reason = f"ARM refused the acknowledge {count} time(s) ({said}); next try at {hhmm(again, True)}"
        self.defer(record, res, "acknowledge-refused", reason, None, ())
        return Verdict(record.key, record.event_id, "acknowledge-refused", reason, None, res.vms,
                       next_try=again)

    def recheck(self, record: EventRecord, res: Resolution, last: DecisionRecord) -> Verdict | None:
        """Before a retry: every budget, as for a first approval (this event's VMs counted once, as
        the approval already counts them); None when it may go. A person's overrides carry over."""
        allowed = inherited(last)
        if (res.unresolved or not res.vms) and "all" not in allowed:
            names = ", ".join(res.unresolved) or "its Resources"
            reason = f"{names} match no known VM: its budgets cannot be counted, the approval is not resent"
            self.defer(record, res, "unresolved", reason, None, ())
            return Verdict(record.key, record.event_id, "unresolved", reason, None, res.vms)
        budgets = self.uses(res.vms)
        over = next((u for u in budgets if not u.fits and not overridden(u, allowed)), None)
        if over is None:
            return None
        reason = (f"{over.scope} would have {over.with_event} unavailable, max {over.max}: the approval "
                  "is not resent")
        self.defer(record, res, "budget", reason, over.scope, budgets)
        return Verdict(record.key, record.event_id, "budget", reason, over.scope, res.vms, budgets)


def evaluate(state: FleetState, policy: Policy, now: float, stale: str = "") -> Evaluation:
    """The decisions of one pass and the verdict on every Scheduled event (module docstring);
    ``stale``: why the fold is too far behind its hubs to approve on (the lag guard), or ""."""
    return DecisionPass(state, policy, now, stale).run()

