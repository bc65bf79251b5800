"""Which VMs are unavailable now, and why: the conservative count (fleet-coordinator.md). Pure.

Each VM's state for an event is its own word (fold/reports.py): what its peers say about the event
can make it count as down, never as back. For an event the fold keeps open or still settling, a VM
the event affects (its Resources resolved, scopes.py) is *done* with it once it reported the event
completed or canceled itself, or, for an event someone reported Started or that is due (below),
when its newest heartbeat polled IMDS more than ``heartbeat_timeout`` after anyone last reported the
event (and after it was due) and did not list it (an agent that missed the event's end, or the whole
event).

Due. Azure starts an event at its NotBefore whoever approved it or not, and the VM's agent may never
get to say so (it goes down with its VM). So from ``due_at`` (its NotBefore: Azure's when Azure
reported the event, else the earliest any report gave; or its first Started sighting, if earlier)
an event counts its VMs down in every budget until each is done with it, then ``back_at``.

For an event Azure reported (its feed, Resource Graph: fold/azure.py), Azure's word wins: every VM
the event affects is done when Azure shows it Completed (at that time, or its own later completed
report) or Canceled, and none is while Azure still shows it Scheduled or Started, whatever an agent
reported; so an agentless VM, which never reports, is done when Azure says so. Until then, for
that VM:

==================  ==============================================================================
reason              when (first that applies; the reasons of all events and VMs then merge in
                    this order)
==================  ==================================================================================
``started``         anyone reported it Started or completed (Azure starts an event for all its
                    Resources at once), or an unverified report claimed so (``doubted``); or it
                    reported the event Started itself while a name of Resources is no VM's (a
                    peer's own report does not count it: its IMDS lists the event too)
``due``             not reported Started by anyone, but due: Azure starts it now (shown as "started
                    by Azure (due)")
``approved``        approved and not done: by a counted coordinator decision, or by an ``approved``
                    echo from a VM the event affects (only those can approve it on IMDS) or from
                    ARM (Azure answered the coordinator's ``acknowledge``)
``prepare-failed``  it reported ``preparefailed`` for the event, and no ``prepared`` after
``unhealthy``       its newest heartbeat's ``[health]`` verdict is unhealthy: a failing probe counts
                    as an unplanned outage, in every budget the VM belongs to
``azure-unavailable`` Azure's Resource Health shows it Unavailable or Degraded, whatever its agent
                    says (fold/health.py)
``not-recovered``   with ``free_slot = "recovered"``: done, and not seen recovered ``recover_timeout``
                    after (decide/recovery.py; the ``recovery-timeout`` alert)
``recovering``      with ``free_slot = "recovered"``: done, ``min_healthy`` passed, not seen
                    recovered yet
``completed``       done, and not back yet (``back_at``: ``min_healthy`` after its own completed
                    report, or after the silence that made it done)
``name-conflict``   two or more VMs heard from within heartbeat_timeout claim one name in one
                    group, or one resourceId: all of them at first, whatever they say; once the
                    conflict is older than heartbeat_timeout, all but the one that claimed it
                    first (``conflicts``)
``key-conflict``    its vmId's attested document came with two keys (fold/identities.py): not
                    settled yet, so nobody speaks for it
``not-watched``     no heartbeat for ``heartbeat_timeout``, and not watched by Azure either
                    (azure_topology.watched)
==================  ==================================================================================

Everything per decision pass is O(open and settling events x their VMs) plus one pass over the
VMs for heartbeat ages and names.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from ..config.policy import Policy
from ..fold import topology as azure_topology
from ..fold.azure import ARM
from ..fold.health import azure_health, unhealthy
from ..fold.inventory import claimed_at
from ..fold.state import CANCELED, COMPLETED, STARTED, TERMINAL, EventRecord, FleetState
from .recovery import RECOVERY_ONLY, Overdue, held
from .scopes import ScopeIndex, last_heartbeat, resolve

REASONS = ("started", "due", "approved", "prepare-failed", "unhealthy", "azure-unavailable",
           "not-recovered", "recovering", "completed", "name-conflict", "key-conflict", "not-watched")


def echoes(idx: ScopeIndex, record: EventRecord, vms: tuple[str, ...]) -> dict[str, tuple[float, str]]:
    """The ``approved`` echoes that count: from VMs the event affects, or ARM's (VM -> (time, ApprovedBy))."""
    affected = set(vms)
    return {vm: echo for vm, echo in record.echoes.items() if vm == ARM or idx.key(vm) in affected}


def counted_approval(idx: ScopeIndex, record: EventRecord, vms: tuple[str, ...], policy: Policy) -> bool:
    """Approved: by an echo that counts, or by a coordinator decision that counts in this mode."""
    return bool(echoes(idx, record, vms)) or record.last_approval(policy.shadow) is not None


def own_ranks(idx: ScopeIndex, record: EventRecord) -> dict[str, int]:
    """Each VM's own status for the event (a host: record's counted as its VM's)."""
    out: dict[str, int] = {}
    alias = idx.alias
    for reporter, rank in record.reports.items():
        vm = alias.get(reporter, reporter)  # idx.key
        had = out.get(vm, 0)
        out[vm] = rank if rank > had else had
    return out


def due_at(state: FleetState, record: EventRecord) -> float | None:
    """When Azure starts ``record`` whatever anyone approved (module docstring): its NotBefore (Azure's
    when Azure reported it, else the earliest any report gave), or its first Started sighting if that
    came first; None when neither is known."""
    azure = state.azure.events.get(record.key)
    planned = azure.not_before if azure is not None and azure.not_before is not None \
        else record.earliest_not_before
    seen = [t for t in (planned, record.started_at, record.doubted) if t is not None]
    return min(seen, default=None)


def is_due(state: FleetState, record: EventRecord, now: float) -> bool:
    """Azure has started it by now, whether or not anyone said so yet."""
    due = due_at(state, record)
    return due is not None and due <= now


def back_at(policy: Policy, record: EventRecord, vm: str | None, done: float) -> float:
    """When ``vm``, done with ``record`` at ``done``, counts as available again: ``min_healthy``
    later. The one place that says when an outage is over (``vm`` None: the event's latest)."""
    return done + policy.min_healthy


def completions(state: FleetState, idx: ScopeIndex, record: EventRecord, vms: tuple[str, ...],
                policy: Policy, ranks: dict[str, int] | None = None) -> dict[str, float | None]:
    """When each of ``vms`` was done with ``record`` (module docstring): its own completed report,
    or the silence that made it done; None when it reported the event canceled (never down).
    VMs not done are absent. ``ranks``: ``own_ranks`` of the event, when the caller has them."""
    own: dict[str, float] = {}
    for reporter, moment in record.finished.items():
        vm = idx.key(reporter)
        own[vm] = max(moment, own.get(vm, moment))
    azure = state.azure.events.get(record.key)
    if azure is not None:  # Azure's word wins (module docstring)
        if azure.rank == CANCELED:
            return dict.fromkeys(vms)
        if azure.rank != COMPLETED or azure.ended_at is None:
            return {}
        return {vm: max(own.get(vm, azure.ended_at), azure.ended_at) for vm in vms}
    ranks = own_ranks(idx, record) if ranks is None else ranks
    due = due_at(state, record)
    last = record.last_report if due is None else max(record.last_report, due)
    silent_from = last + policy.heartbeat_timeout
    out: dict[str, float | None] = {}
    silence = record.ran or due is not None
    for vm in vms:
        if vm in own:
            out[vm] = own[vm]
        elif ranks.get(vm, 0) >= TERMINAL:
            out[vm] = None
        elif silence and _silent(state, idx, vm, record, silent_from):
            out[vm] = silent_from
    return out


def _silent(state: FleetState, idx: ScopeIndex, vm: str, record: EventRecord, after: float) -> bool:
    """Its newest heartbeat polled after ``after`` and does not list the event."""
    vms = state.vms
    record_vm = vms.get(vm)
    if record_vm is not None and record_vm.polled is not None and record_vm.polled > after \
            and record.key not in record_vm.listed:
        return True
    for key in idx.extra_heartbeats.get(vm, ()):
        record_vm = vms.get(key)
        if record_vm is not None and record_vm.polled is not None and record_vm.polled > after \
                and record.key not in record_vm.listed:
            return True
    return False


def unavailable(state: FleetState, policy: Policy, idx: ScopeIndex, now: float,
                overdue: list[Overdue] | None = None, recovering: set[str] | None = None) -> dict[str, str]:
    """VM key -> the first reason it is unavailable now (module docstring); others are absent.
    ``overdue`` (when given) gets each VM not seen recovered in time, ``recovering`` each VM down for
    no other reason than a recovery not yet seen: free in the scopes of a budget whose
    ``free_slot`` is ``min_healthy`` (decide/recovery.py, ``used``)."""
    found: dict[str, set[str]] = {}
    late: list[Overdue] = [] if overdue is None else overdue
    for key in sorted(state.open_events):
        record = state.events.get(key)
        if record is not None:
            _open_event(state, policy, idx, record, now, found, late)
    clock = not policy.waits_for_recovery
    for key in sorted(state.settling - state.open_events):  # every VM of it is done with it
        record = state.events.get(key)
        if record is None or record.completed_at is None or \
                (clock and back_at(policy, record, None, record.completed_at) <= now):
            continue
        for vm, moment in completions(state, idx, record, resolve(state, idx, record).vms, policy).items():
            if moment is not None:
                _held(state, policy, idx, record, vm, moment, now, found, late)
    health(state, idx, found)
    for vm, conflict in conflicts(state, policy, idx, now).items():
        if conflict.held:
            found.setdefault(vm, set()).add("name-conflict")
    for vm in state.conflicts:
        found.setdefault(vm, set()).add("key-conflict")
    for vm in unwatched(state, policy, idx, now):
        found.setdefault(vm, set()).add("not-watched")
    if recovering is not None:
        recovering.update(vm for vm, reasons in found.items()
                          if vm in idx.group_of and reasons <= RECOVERY_ONLY)
    return {vm: next(r for r in REASONS if r in reasons) for vm, reasons in sorted(found.items())
            if vm in idx.group_of}


def _held(state: FleetState, policy: Policy, idx: ScopeIndex, record: EventRecord, vm: str, done: float,
          now: float, found: dict[str, set[str]], late: list[Overdue]) -> None:
    """A VM done with ``record`` at ``done``: its reason while not back (decide/recovery.py)."""
    reason = held(state, policy, idx, record, vm, done, back_at(policy, record, vm, done), now)
    if reason is not None:
        found.setdefault(vm, set()).add(reason)
    if reason == "not-recovered":
        late.append(Overdue(vm, record.key, record.event_id, done))


def health(state: FleetState, idx: ScopeIndex, found: dict[str, set[str]]) -> None:
    """``unhealthy`` and ``azure-unavailable`` (module docstring): the VMs whose agent says unhealthy
    (kept by the fold), and while Resource Health shows some VM down, a look at every VM."""
    fleet = idx.fleet
    for key in unhealthy(state):
        if key in fleet:
            found.setdefault(key, set()).add("unhealthy")
    if any(said.down for said in state.azure.health.values()):
        for key in idx.members:
            if (said := azure_health(state, key)) is not None and said.down:
                found.setdefault(key, set()).add("azure-unavailable")


def _open_event(state: FleetState, policy: Policy, idx: ScopeIndex, record: EventRecord, now: float,
                found: dict[str, set[str]], late: list[Overdue]) -> None:
    """The reasons an event that some VM has not reported over gives its VMs (module docstring)."""
    resolution = resolve(state, idx, record)
    affected = resolution.vms
    ranks = own_ranks(idx, record)
    # A peer's IMDS lists the event too (an availability set): its Started is about the event, not
    # itself, unless Resources name a VM nobody goes by (the reporter may be it, by another name).
    uncertain = bool(resolution.unresolved)
    # Whether a VM is done matters only for the VMs the event affects and, when uncertain, those
    # that reported it Started (below).
    asked = (*affected, *(v for v, rank in ranks.items() if rank == STARTED and v not in affected)) \
        if uncertain else affected
    done = completions(state, idx, record, asked, policy, ranks)
    approved = counted_approval(idx, record, affected, policy)
    due = not record.ran and is_due(state, record, now)
    for vm, rank in ranks.items():
        if rank == STARTED and vm not in done and (uncertain or vm in affected):
            found.setdefault(vm, set()).add("started")
    for vm in affected:
        if vm in done:
            back = done[vm]
            if back is not None:
                _held(state, policy, idx, record, vm, back, now, found, late)
            continue
        if record.ran:
            found.setdefault(vm, set()).add("started")
        elif due:
            found.setdefault(vm, set()).add("due")
        elif approved:
            found.setdefault(vm, set()).add("approved")
    for reporter, (failed_at, _) in record.prepare_failed.items():
        vm = idx.key(reporter)
        later = failed_at >= record.prepared.get(reporter, float("-inf"))
        if vm in affected and vm not in done and later:
            found.setdefault(vm, set()).add("prepare-failed")


@dataclass(frozen=True)
class Conflict:
    """A VM that claims a name in its group, or a resourceId, another VM heard from lately claims too."""

    others: tuple[str, ...]  # VM keys
    held: bool  # counted as unavailable for it
    first: bool  # it claimed it before the others (fold/inventory.claimed_at)
    since: float  # when the conflict began: the later claimant's first claim


def conflicts(state: FleetState, policy: Policy, idx: ScopeIndex, now: float) -> dict[str, Conflict]:
    """VM key -> its conflict, among VMs heard from within ``heartbeat_timeout``.

    Both (all) claimants count as unavailable while the conflict is young: either may be the VM it
    says it is. Never forever: once it is older than ``heartbeat_timeout`` (longer than any honest
    overlap, such as a VM deleted and made again under its name, whose old agent falls silent within
    that time), only the later claimants are held; the VM that claimed it first (by the hub's
    time, then registration, then key) is counted by its own word again, at once when the later one
    claimed more names than the fold keeps. A VM that copies a peer's name or resourceId thus holds
    down itself, not the peer. The claims shared by several VMs are
    found once per index; each pass only looks at those."""
    shared = idx.shared_claims(state)
    recent = now - policy.heartbeat_timeout
    out: dict[str, Conflict] = {}
    for keys in shared:
        live = [k for k in keys if state.vms[k].last_heard >= recent]
        if len(live) < 2:
            continue
        order = sorted(live, key=lambda k: (claimed_at(state.vms[k]), _registered(state, k), k))
        since = claimed_at(state.vms[order[1]])  # inf: it renamed itself more often than is kept
        settled = since == float("inf") or now - since > policy.heartbeat_timeout
        for key in live:
            held = not (settled and key == order[0])
            old = out.get(key)
            others = {k for k in live if k != key} | set(old.others if old else ())
            out[key] = Conflict(tuple(sorted(others)), held or (old is not None and old.held),
                                key == order[0] and (old is None or old.first),
                                since if old is None else max(since, old.since))
    return out


def _registered(state: FleetState, key: str) -> float:
    identity = state.identities.get(key)
    return identity.registered_at if identity is not None else float("inf")


def unwatched(state: FleetState, policy: Policy, idx: ScopeIndex, now: float) -> set[str]:
    """VMs of the fleet without a heartbeat for ``heartbeat_timeout`` and not watched by Azure.
    Kept, not found: VMs wait in a heap by the heartbeat they had when last looked at, and only
    those whose heartbeat is older than the cutoff are looked at again (``stale``, then every
    pass while they stay so); a pass costs what went stale, not the fleet."""
    cutoff = now - policy.heartbeat_timeout
    beats: Beats = idx.cache.setdefault("beats", Beats())
    for key in idx.joined:
        if key in idx.fleet:  # placed, then gone again before this look (a prune, Azure's listing)
            beats.arm(key, last_heartbeat(state, idx, key))
    idx.joined.clear()
    beats.sweep(cutoff, lambda key: last_heartbeat(state, idx, key) if key in idx.fleet else None,
                idx.fleet)
    return {key for key in beats.stale if not azure_topology.watched(state, policy, key, now)}


class Beats:
    """The fleet's VMs by heartbeat: a heap of (heartbeat when last looked at, VM), and the VMs
    whose heartbeat is older than the last cutoff (``stale``)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, str]] = []
        self.armed: dict[str, float] = {}  # VM -> its entry in the heap
        self.stale: set[str] = set()

    def arm(self, key: str, beat: float | None) -> None:
        moment = float("-inf") if beat is None else beat
        self.armed[key] = moment
        heapq.heappush(self.heap, (moment, key))

    def sweep(self, cutoff: float, beat: Callable[[str], float | None], fleet: AbstractSet[str]) -> None:
        for key in list(self.stale):  # heard from again, or gone, or an earlier cutoff than before
            moment = beat(key)
            if key not in fleet:
                self.stale.discard(key)
            elif moment is not None and moment >= cutoff:
                self.stale.discard(key)
                self.arm(key, moment)
        heap = self.heap
        while heap and heap[0][0] < cutoff:
            moment, key = heapq.heappop(heap)
            if self.armed.get(key) != moment:
                continue  # an entry replaced by a later one
            now_beat = beat(key) if key in fleet else None
            if now_beat is not None and now_beat >= cutoff:
                self.arm(key, now_beat)  # in place: a dict's entry taken out is never reused
                continue
            del self.armed[key]
            if key in fleet:
                self.stale.add(key)


def used(idx: ScopeIndex, down: dict[str, str], recovering: AbstractSet[str] = frozenset(),
         on_clock: AbstractSet[str] = frozenset()) -> Counter[str]:
    """Unavailable VMs per budgeted scope; a VM of ``recovering`` (``unavailable``) does not count in
    a scope whose budget's kind is ``on_clock`` (Policy.on_clock)."""
    counts: Counter[str] = Counter()
    for vm in down:
        for scope in idx.budget_scopes_of.get(vm, ()):
            if vm not in recovering or idx.kind_of[scope] not in on_clock:
                counts[scope] += 1
    return counts
