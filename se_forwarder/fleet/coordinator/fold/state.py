"""What the coordinator knows: the facts the fold keeps, as plain typed records.

Every field is merged so that the order in which reports arrive does not matter (Event Hubs
partitions interleave differently on each instance) and a repeated report changes nothing: the
latest status of a VM for an event is the highest rank it reported, times are minima or maxima,
topology comes from the report with the greatest ``(time, id)``. So two instances that read the
same events in any order hold equal states, and no set of seen ids is needed.

Times are UTC epoch seconds (floats) taken from the CloudEvents' ``time``, never from the clock of
the instance that folds them. Keys:

- a VM: its ``vmId`` in lower case; ``host:<name in lower case>`` while its agent reports it without
  instance metadata (``data.Vm.complete`` false).
- an event: its EventId in lower case (``event_id`` keeps the spelling first seen).

A VM's reports change only what is its own (its record, its status for an event, its echo, its
``prepared``); what an event is across VMs (``rank``, ``started_at``, ``resources``) merges them so
that a report can make the coordinator more careful about other VMs, never less (fold/dispatch.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .azure_state import AzureView
from .gates import GateVerdict
from .groups import Groups

# Status ranks of one VM's view of an event: a higher rank replaces a lower one.
SCHEDULED, STARTED, CANCELED, COMPLETED = 1, 2, 3, 4
RANK_NAMES = {SCHEDULED: "scheduled", STARTED: "started", CANCELED: "canceled", COMPLETED: "completed"}
TERMINAL = CANCELED

Stamp = tuple[float, str]  # (CloudEvent time, CloudEvent id): orders reports of equal time too
# Where a VM is (fold/inventory.py): subscription, resource group, location, zone, scale set, fault
# and update domain, tags.
Placement = tuple[str, str, str, str, str, str, str, tuple[tuple[str, str], ...]]
# What fold/inventory.py read of a data.Vm: its entry of Vm.claims (name, resourceId, when first
# claimed) and its placement; and what fold/reports.py keeps of the data.Vm it read last (Vm.seen:
# its fingerprint, whether complete, its caps, then Observed's two, flat: one tuple a VM, not two).
Observed = tuple[tuple[str, str, float] | None, Placement | None]
Seen = tuple[int, bool, tuple[str, ...], tuple[str, str, float] | None, Placement | None]
NO_STAMP: Stamp = (float("-inf"), "")
# The tags of every VM without any: one dict shared by all (a VM's tags are replaced, never changed
# in place), so 100,000 untagged VMs do not hold 100,000 empty dicts.
NO_TAGS: dict[str, str] = {}


@dataclass(slots=True)
class Vm:
    """One VM: identity and topology (from the newest report), and when it was last heard from."""

    key: str
    name: str = ""
    vm_id: str = ""
    complete: bool = False
    resource_id: str = ""
    subscription: str = ""
    resource_group: str = ""
    location: str = ""
    zone: str = ""
    scale_set: str = ""
    fault_domain: str = ""
    update_domain: str = ""
    placement_group: str = ""
    tags: dict[str, str] = field(default_factory=lambda: NO_TAGS)  # names in lower case; replaced whole
    topology_stamp: Stamp = NO_STAMP
    last_heartbeat: float | None = None  # time of the newest heartbeat
    last_heard: float = float("-inf")  # time of the newest report of any kind
    agent_version: str = ""
    listed: tuple[str, ...] = ()  # event keys its newest heartbeat listed
    polled: float | None = None  # its newest heartbeat's LastPollUtc (else its time)
    health: str = ""  # its newest heartbeat's data.Health verdict: healthy | unhealthy | unknown | ""
    health_reason: str = ""  # "<probe>: <reason>" while unhealthy (fold/health.py)
    placed: Placement | None = None  # where its first verified report placed it (fold/inventory.py)
    placed_stamp: Stamp = (float("inf"), "")  # that report's (hub time, id)
    # (name, resourceId, the hub time it first claimed them), names in lower case, sorted (fold/inventory.py)
    claims: tuple[tuple[str, str, float], ...] = ()
    # The data.Vm read last (fold/reports.py): its fingerprint, whether it was complete, what reading
    # its vmId and name counted in ``capped``, and its entry of ``claims`` and its placement
    # (fold/inventory.py): the same again is not read again.
    seen: Seen | None = field(default=None, repr=False, compare=False)

    def topology(self) -> tuple[Any, ...]:
        return (self.name, self.vm_id, self.complete, self.resource_id, self.subscription,
                self.resource_group, self.location, self.zone, self.scale_set, self.fault_domain,
                self.update_domain, self.placement_group, tuple(sorted(self.tags.items())))


@dataclass(slots=True)
class DecisionRecord:
    """A coordinator decision as read back from the hub (``data`` is its CloudEvent data)."""

    id: str
    kind: str  # approve | sent | acknowledge | defer | breach | pause | resume | hold | release
    time: float
    data: dict[str, Any]

    @property
    def code(self) -> str:
        return str(self.data.get("ReasonCode") or "")

    @property
    def shadow(self) -> bool:
        return self.data.get("Shadow") is True

    @property
    def attempt(self) -> int:
        value = self.data.get("Attempt")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def scope(self) -> str:
        return str(self.data.get("Scope") or "")

    @property
    def sequence(self) -> int:
        value = self.data.get("Sequence")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def target_key(self) -> str:
        target = self.data.get("Target")
        if not isinstance(target, dict):
            return ""
        vm_id, name = target.get("vmId"), target.get("name")
        if isinstance(vm_id, str) and vm_id:
            return vm_id.lower()
        return f"host:{name.lower()}" if isinstance(name, str) and name else ""

    def order(self) -> tuple[float, str]:
        return (self.time, self.id)


@dataclass(slots=True)
class EventRecord:
    """One EventId across the fleet: what it is, who reported it in which state, what was decided."""

    key: str
    event_id: str
    event_type: str = ""
    event_source: str = ""  # Platform | User
    description: str = ""
    duration: int | None = None
    resources: tuple[str, ...] = ()
    has_resources: bool = False  # a full report (not only a heartbeat's summary) was seen
    info_stamp: Stamp = NO_STAMP
    not_before: float | None = None
    not_before_stamp: Stamp = NO_STAMP
    earliest_not_before: float | None = None  # the earliest NotBefore any report gave (availability.due_at)
    reports: dict[str, int] = field(default_factory=dict)  # VM key -> highest status rank
    rank: int = 0  # highest rank of any report
    scheduled_at: float | None = None  # earliest scheduled report (the timeline's Scheduled span)
    started_at: float | None = None  # earliest started report
    completed_at: float | None = None  # latest completed report
    finished: dict[str, float] = field(default_factory=dict)  # VM -> its latest completed report
    ended_at: float | None = None  # latest completed or canceled report
    last_report: float = float("-inf")
    echoes: dict[str, tuple[float, str]] = field(default_factory=dict)  # VM -> (time, ApprovedBy)
    prepared: dict[str, float] = field(default_factory=dict)  # VM -> time
    prepare_failed: dict[str, tuple[float, str]] = field(default_factory=dict)  # VM -> (time, reason)
    recovered: dict[str, float] = field(default_factory=dict)  # VM -> its earliest `recovered` report
    rejections: dict[str, tuple[str, str]] = field(default_factory=dict)  # message id -> (VM, code)
    approvals: dict[int, DecisionRecord] = field(default_factory=dict)  # attempt -> decision
    sends: dict[int, DecisionRecord] = field(default_factory=dict)  # attempt -> its message was queued
    defers: dict[str, DecisionRecord] = field(default_factory=dict)
    breaches: dict[str, DecisionRecord] = field(default_factory=dict)
    types: tuple[str, ...] = ()  # every EventType a VM reported for it (sorted; a few at most)
    doubted: float | None = None  # earliest unverified Started claim (require_signed_reports off)
    revision: int = 0  # bumped when resources or reporters change (resolution cache)

    @property
    def terminal(self) -> bool:
        return self.rank >= TERMINAL

    @property
    def ran(self) -> bool:
        """Some VM said it Started (or completed), or an unverified report claimed so."""
        return self.started_at is not None or self.completed_at is not None or self.doubted is not None

    def last_defer(self) -> DecisionRecord | None:
        return max(self.defers.values(), key=DecisionRecord.order, default=None)

    def last_approval(self, shadow: bool) -> DecisionRecord | None:
        """The latest approve decision that counts: live ones, and shadow ones in shadow mode."""
        counted = [d for d in self.approvals.values() if shadow or not d.shadow]
        return max(counted, key=lambda d: (d.attempt, d.time, d.id), default=None)

    def warned_scopes(self) -> set[str]:
        out: set[str] = set()
        for record in self.breaches.values():
            for use in record.data.get("Budgets") or ():
                if isinstance(use, dict) and isinstance(use.get("scope"), str):
                    out.add(use["scope"])
        return out


@dataclass(frozen=True, slots=True)
class Identity:
    """A VM's registered identity key, bound by an IMDS attested document (fold/identities.py)."""

    public_key: str  # base64 of the raw 32-byte Ed25519 public key
    keyid: str
    created_on: float  # the document's timeStamp.createdOn (epoch seconds)
    expires_on: float
    document: str  # SHA-256 (hex) of the document's SignedData: one document binds one key
    subscription: str = ""
    registered_at: float = 0.0  # when the hub enqueued the identity event that bound it


@dataclass(frozen=True, slots=True)
class Conflict:
    """A vmId whose document came with two keys: neither speaks for it (fold/identities.py)."""

    document: str  # the SignedData in dispute (SHA-256 hex)
    created_on: float  # its timeStamp.createdOn: only a newer document settles it
    candidates: tuple[Identity, ...]  # the keys it came with, first read first
    since: float  # hub time of the registration that made the conflict


@dataclass(frozen=True, slots=True)
class Rekey:
    """A vmId that registered a new key with a newer document (a reinstall): kept to be shown."""

    vm: str  # VM key
    old: str  # key id replaced
    new: str
    time: float  # hub time of the registration


@dataclass(slots=True)
class Switch:
    """The current pause/resume of a scope, or hold/release of an event (switches.py: in sequence)."""

    on: bool  # paused / held
    record: DecisionRecord

    def order(self) -> tuple[int, float, str]:
        return (self.record.sequence, self.record.time, self.record.id)


@dataclass
class Journal:
    """What the fold changed since view/digest.py last looked, by part (the keys of the records
    that changed), so the fold's digest is brought up to date with what changed alone; the small
    rest (gone events, key changes, keys in conflict, Azure's freshness) it reads whole each time."""

    vms: set[str] = field(default_factory=set)
    events: set[str] = field(default_factory=set)
    decisions: set[str] = field(default_factory=set)
    identities: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)
    azure_vms: set[str] = field(default_factory=set)
    azure_events: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)
    azure_health: set[str] = field(default_factory=set)  # VM ARM ids (lower case)


@dataclass
class FleetState:
    """The fold's state. ``version`` changes whenever scopes may have changed (new VM, topology,
    groups), so derived indexes are rebuilt only then."""

    vms: dict[str, Vm] = field(default_factory=dict)
    events: dict[str, EventRecord] = field(default_factory=dict)
    groups: Groups = field(default_factory=Groups)
    pauses: dict[str, Switch] = field(default_factory=dict)  # scope -> latest pause/resume
    holds: dict[str, Switch] = field(default_factory=dict)  # event key -> latest hold/release
    decisions: dict[str, DecisionRecord] = field(default_factory=dict)  # id -> decision (the log)
    open_events: set[str] = field(default_factory=set)  # keys of events not completed or canceled
    settling: set[str] = field(default_factory=set)  # completed events prune has not aged out yet
    gone: dict[str, float] = field(default_factory=dict)  # pruned event key -> when it ended
    terminated: dict[str, tuple[float | None, tuple[str, ...]]] = field(default_factory=dict)
    retired: set[str] = field(default_factory=set)  # VMs a completed Terminate deleted (scopes.py)
    identities: dict[str, Identity] = field(default_factory=dict)  # VM key -> its registered key
    rekeyed: dict[str, list[Rekey]] = field(default_factory=dict)  # VM key -> its key changes, newest last
    conflicts: dict[str, Conflict] = field(default_factory=dict)  # VM key -> its key in dispute
    # Reports (and identity events) held until their sender's registration folds (gate.py):
    # VM key -> [(enqueued time, CloudEvent)].
    waiting: dict[str, list[tuple[float, dict[str, Any]]]] = field(default_factory=dict)
    azure: AzureView = field(default_factory=AzureView)  # Azure's own view (fold/azure_state.py)
    # The placements an operator confirmed (fold/inventory.py): VM key -> placement, and its decision's stamp.
    confirmed: dict[str, Placement] = field(default_factory=dict)
    confirmed_at: dict[str, Stamp] = field(default_factory=dict)
    version: int = 0
    # What changed since decide/scopes.py's index last looked (it keeps itself up to date from it):
    # VMs that are new or whose topology changed (None until an index exists, or when anything may
    # have), and VMs whose co-reception set grew (only a learned group's name may change).
    moved: set[str] | None = field(default=None, repr=False, compare=False)
    merged: set[str] = field(default_factory=set, repr=False, compare=False)
    journal: Journal | None = field(default=None, repr=False, compare=False)  # None: nobody looks
    # Derived, not in snapshots (fold/dispatch.py's limits): the events each VM reported (None: rebuilt from
    # ``events`` when next needed), and how many new VM keys each minute of hub time admitted.
    vm_events: dict[str, tuple[str, ...] | set[str]] | None = field(default=None, repr=False, compare=False)
    # name -> its VM's key, or keys (a tuple) when several go by it (``named``)
    names: dict[str, str | tuple[str, ...]] | None = field(default=None, repr=False, compare=False)
    # Each placement VMs were placed at, kept once (fold/inventory.shared).
    places: dict[Placement, Placement] = field(default_factory=dict, repr=False, compare=False)
    # VMs whose agent may say unhealthy now (fold/health.py: a superset, None until first needed).
    unhealthy: set[str] | None = field(default=None, repr=False, compare=False)
    new_vms: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    gates: dict[str, GateVerdict] = field(default_factory=dict, repr=False, compare=False)  # fold/gates.py

    def touch(self, *keys: str) -> None:
        """The scopes of these VMs may have changed (a new VM, its topology, a Terminate)."""
        self.version += 1
        if self.moved is not None:
            self.moved.update(keys)

    def joined(self, *keys: str) -> None:
        """The co-reception sets of these VMs were joined (their learned group may be named anew)."""
        self.version += 1
        if self.moved is not None:
            self.merged.update(keys)

    def note(self, part: str, *keys: str) -> None:
        """These records of ``part`` (a member of ``Journal``) changed."""
        if self.journal is not None:
            getattr(self.journal, part).update(keys)

    def paused(self, scope: str) -> Switch | None:
        switch = self.pauses.get(scope)
        return switch if switch is not None and switch.on else None

    def named(self, name: str) -> tuple[str, ...]:
        """The keys of the VMs that go by ``name`` (lower case), from an index kept by the fold."""
        if self.names is None:
            names: dict[str, str | tuple[str, ...]] = {}
            self.names = names
            for key, vm in self.vms.items():  # what ``rename`` does for each, in one loop (a restore's)
                lowered = vm.name.lower()
                lowered = vm.name if lowered == vm.name else lowered
                bearers = names.get(lowered)
                names[lowered] = key if bearers is None else _more(bearers, key)
        found = self.names.get(name, ())
        return (found,) if isinstance(found, str) else found

    def rename(self, key: str, old: str | None, new: str) -> None:
        """Keep ``names`` true when a VM is added (``old`` None) or changes its name. Almost every
        name is one VM's: its key alone (a tuple of one would be 72 bytes a VM more)."""
        names = self.names
        if names is None:
            return
        if old is not None:
            lowered = old.lower()
            left = tuple(k for k in self.named(lowered) if k != key)
            if left:
                names[lowered] = left[0] if len(left) == 1 else left
            else:
                names.pop(lowered, None)
        lowered = new.lower()
        lowered = new if lowered == new else lowered  # most names are: one string for both
        bearers = names.get(lowered)
        if bearers is None:
            names[lowered] = key
        elif key not in self.named(lowered):
            names[lowered] = _more(bearers, key)

    def event(self, event_id: str) -> EventRecord:
        """The record of ``event_id``, made when new (one spelling whatever the order: the smallest)."""
        key = event_id.lower()
        self.note("events", key)
        record = self.events.get(key)
        if record is None:
            record = self.events[key] = EventRecord(key=key, event_id=event_id)
        elif event_id < record.event_id:
            record.event_id = event_id
        return record

    def held(self, event_key: str) -> Switch | None:
        switch = self.holds.get(event_key)
        return switch if switch is not None and switch.on else None


def _more(bearers: str | tuple[str, ...], key: str) -> tuple[str, ...]:
    """The keys of a name in ``FleetState.names`` and one more."""
    return (bearers, key) if isinstance(bearers, str) else (*bearers, key)
