"""The fold's part for agents' reports: a VM speaks only for itself. Pure, never raises on content.

A report is folded for its ``Sender``: the VM trust.py found it comes from (its registered vmId)
and whether it was verified. A verified report changes only what is its sender's own: its record
(topology from ``data.Vm``, last heard, heartbeat and the events that heartbeat lists), its status
for an event, its echo, its ``prepared``/``preparefailed``, its rejections. What an event is across
VMs merges everyone's word so that no report makes another VM look more available:

- ``Resources`` is the union of every report's (in natural order; never shrinks; at most
  ``resources_per_event`` names: a report that would add more adds nothing, counted);
- ``rank``, ``started_at``, ``completed_at`` say that *someone* saw it go that far: a VM of
  Resources that has not itself reported the event over stays unavailable (availability.py);
- ``types``: every EventType reported; an event reported under two types is managed only when
  every one of them is (decide/evaluate.py), and only an all-``Terminate`` event retires its VMs (scopes.py);
- NotBefore, description and duration come from the newest report (a VM can shift the NotBefore
  others see, so the order in which events are approved, never a budget); the earliest NotBefore
  any report gave is kept too: from then on the event counts as down (availability.py's ``due``),
  so no report can make it due later.

Times. A report's ``time`` is the sender's word: it is clamped to the hub's enqueued time plus
``skew`` (trust settings), so a report dated 2099 neither wins every "newest" comparison nor keeps a
VM watched. A report dated in the past is the sender's word about itself (its own heartbeat is
stale, its own completion older); it cannot end an event for another VM.

An event stays *open* (``state.open_events``) until every VM that goes by a name of its Resources
reported it completed or canceled itself (for an event Azure reported, until Azure shows it ended:
Azure's word wins, fold/azure.py); ``prune`` keeps it until then (or until nobody reported
it for ``forget_after``).

Unverified reports (``[trust] require_signed_reports = false``, a fleet mid-upgrade; trust.py lets
them through only for VMs without a registered key) can only make the coordinator more careful:

==========================  ===================================================================
``data.Vm``                 the claimed VM's record (topology, last heard): it counts in its
                            scopes, and since nothing unverified makes a VM watched it always
                            counts as unavailable there
``started``, a heartbeat    ``doubted``: the event counts as started for every VM of its
listing an event Started    Resources that has not reported it over (a known event only)
anything else               nothing: no heartbeat, status, echo, ``prepared``, Resources or
                            co-reception
==========================  ===================================================================
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ....model import Kind
from ....printable import has_controls
from ..config.limits import MAX_REJECTIONS, Limits
from . import azure as azure_fold
from . import health, inventory
from . import topology as azure_topology
from .caps import (
    FOLDED,
    LATE,
    MALFORMED,
    Dropped,
    FoldStats,
    admit,
    event_id_ok,
    fingerprint,
    free_text,
    identifier,
    lower,
    may_report,
    moment,
    not_before,
    resources,
    topology,
    union,
)
from .state import CANCELED, COMPLETED, SCHEDULED, STARTED, TERMINAL, EventRecord, FleetState, Seen, Stamp, Vm

TRANSITIONS: dict[str, int] = {Kind.SCHEDULED: SCHEDULED, Kind.STARTED: STARTED, Kind.CANCELED: CANCELED,
                               Kind.COMPLETED: COMPLETED}
_HEARTBEAT_STATUS = {"Scheduled": SCHEDULED, "Started": STARTED}
MAX_TYPES = 4  # EventTypes kept per event (a real event has one)


@dataclass(frozen=True)
class Sender:
    """Who a report is from: ``key`` its VM key (None: as the report says), and whether trust.py
    verified it (the signature of the key registered for that VM)."""

    key: str | None = None
    verified: bool = True


CLAIMED = Sender()  # no trust layer (tests, benches): the report's own word, as if verified
OWN = Sender()  # the coordinator's own decisions, folded as it makes them: no VM's word at all


def fold_report(state: FleetState, event: Mapping[str, Any], suffix: str, ident: str, when: float,
                data: dict[str, Any], limits: Limits, stats: FoldStats, received: float | None,
                sender: Sender, skew: float) -> str:
    """Fold one agent report (``suffix``: its type after ``com.azure.scheduledevents.``)."""
    if received is not None:
        when = min(when, received + skew)
    vm = _vm(state, event, data, (when, ident), limits, stats.capped,
             when if received is None else received, sender)
    if vm is None:
        return MALFORMED
    if suffix == Kind.HEARTBEAT:
        return _heartbeat(state, vm, data, when, limits, stats.capped, sender.verified)
    event_id = data.get("EventId") or event.get("subject")
    if not event_id_ok(event_id):
        return MALFORMED
    key = event_id.lower()
    if key in state.gone:
        return LATE
    if not sender.verified:
        known = state.events.get(key)
        if suffix == Kind.STARTED and known is not None and known.reports:
            _doubt(state, known, when)
        return FOLDED
    if suffix == Kind.APPROVAL_REJECTED:
        known = state.events.get(key)
        if known is None or not known.reports:
            raise Dropped("unreported-event")
        state.note("events", key)
        return _rejection(known, vm.key, data, stats.capped)
    if not may_report(state, vm.key, key, limits):
        raise Dropped("vm-events")
    record = state.event(event_id)
    _info(record, event, data, (when, ident), limits, stats.capped)
    report(state, record, vm.key, TRANSITIONS.get(suffix, SCHEDULED), when)
    _terminated(state, record)
    if suffix == Kind.APPROVED:
        echo = (when, free_text(data.get("ApprovedBy"), 200, stats.capped))
        old = record.echoes.get(vm.key)
        if old is None or echo < old:
            record.echoes[vm.key] = echo
    elif suffix == Kind.PREPARED:
        record.prepared[vm.key] = max(when, record.prepared.get(vm.key, when))
    elif suffix == Kind.RECOVERED:
        record.recovered[vm.key] = min(when, record.recovered.get(vm.key, when))
    elif suffix == Kind.PREPARE_FAILED:
        failure = (when, free_text(data.get("Reason"), 300, stats.capped))
        old_failure = record.prepare_failed.get(vm.key)
        if old_failure is None or failure > old_failure:
            record.prepare_failed[vm.key] = failure
    return FOLDED


def _vm(state: FleetState, event: Mapping[str, Any], data: dict[str, Any], stamp: Stamp, limits: Limits,
        capped: Counter[str], clock: float, sender: Sender) -> Vm | None:
    """The sending VM's record, created (within ``new_vms_per_minute`` of ``clock`` unless its
    registration verified: then at once, with the registered vmId) or updated from ``data.Vm``."""
    info = data.get("Vm")
    info = info if isinstance(info, dict) else {}
    if info and sender.verified and sender.key is not None:
        vm = state.vms.get(sender.key)
        if vm is not None and vm.seen is not None and vm.seen[0] == fingerprint(info):
            _again(state, vm, info, stamp, limits, capped, clock, vm.seen)
            return vm
    chars, counted = limits.text_chars, (capped["text"], capped["control"])
    vm_id, name = identifier(info.get("vmId"), chars, capped), identifier(info.get("name"), chars, capped)
    complete = info.get("complete") is not False and bool(vm_id)
    if not info:  # an older agent: the source says /virtualMachines/<name>, the extension the id
        source, ext = event.get("source"), event.get("vmid")
        if isinstance(source, str) and "/virtualMachines/" in source:
            name = identifier(source.rsplit("/virtualMachines/", 1)[1].split("/")[0], chars, capped)
        complete = isinstance(source, str) and source.startswith("/subscriptions/") and bool(ext)
        vm_id = identifier(ext, chars, capped) if complete else ""
        complete = complete and bool(vm_id)
    if sender.key is None and not complete and not name:
        return None
    key = sender.key or (lower(vm_id) if complete else "host:" + name.lower())
    registered = sender.verified and sender.key is not None  # Azure attested this vmId (trust.py)
    if registered:
        vm_id = str(sender.key)  # the registration's, never the report's
    vm = state.vms.get(key)
    if vm is None:
        if not registered:  # new_vms_per_minute is for claims nothing backs
            admit(state, limits, clock)
        vm = state.vms[key] = Vm(key=key, name=name, vm_id=vm_id if complete else "")
        state.rename(key, None, name)
        state.touch(key)
    _heard(state, vm, stamp)
    own = sender.key is None or (complete and vm_id.lower() == key)  # what it says is about itself
    if not info or not own:
        return vm
    read: tuple[None, Any] | None = None  # this data.Vm's placement, when it is read now
    if stamp > vm.topology_stamp:
        vm.topology_stamp = stamp
        seen = fingerprint(info)
        if seen is None or vm.seen is None or seen != vm.seen[0]:  # else as read before
            caps = ("text",) * (capped["text"] - counted[0]) + ("control",) * (capped["control"] - counted[1])
            before = vm.topology()
            if name and name != vm.name:
                state.rename(key, vm.name, name)
            vm.name, vm.vm_id, vm.complete = name or vm.name, vm_id, complete
            topology(vm, info, limits, capped)
            read = (None, inventory.placement(vm, state))  # the agent's own, before Azure's is put back
            azure_topology.after_report(state, vm)  # Azure's topology wins; the agent's is its claim
            if vm.topology() != before:
                state.touch(key)
            vm.seen = None if seen is None else (seen, complete, caps, *read)
    if sender.verified:  # where it was first, what it claimed
        observed = inventory.observe(state, vm, info, (clock, stamp[1]), limits, read)
        if read is not None and vm.seen is not None:
            vm.seen = (*vm.seen[:3], *observed)
    return vm


def _again(state: FleetState, vm: Vm, info: dict[str, Any], stamp: Stamp, limits: Limits,
           capped: Counter[str], clock: float, seen: Seen) -> None:
    """``_vm`` for a registered VM's data.Vm equal to the one it read last (``seen``): the same
    outcome, without reading its fields again."""
    _heard(state, vm, stamp)
    for reason in seen[2]:
        capped[reason] += 1
    if seen[1] and lower(vm.key) == vm.key:  # complete, and about itself
        observed = inventory.observe(state, vm, info, (clock, stamp[1]), limits, seen[3:])
        if observed[0] is not seen[3] or observed[1] is not seen[4]:
            vm.seen = (*seen[:3], *observed)
        vm.topology_stamp = max(stamp, vm.topology_stamp)


def _heard(state: FleetState, vm: Vm, stamp: Stamp) -> None:
    if stamp[0] > vm.last_heard:
        if vm.key in state.retired:
            state.touch(vm.key)  # heard from after its Terminate completed: not deleted after all
        vm.last_heard = stamp[0]
    state.note("vms", vm.key)


def _heartbeat(state: FleetState, vm: Vm, data: dict[str, Any], when: float, limits: Limits,
               capped: Counter[str], verified: bool) -> str:
    listed = data.get("Events")
    listed = listed if isinstance(listed, list) else []
    if len(listed) > limits.events_per_heartbeat:
        capped["heartbeat-events"] += len(listed) - limits.events_per_heartbeat
        listed = listed[:limits.events_per_heartbeat]
    items = [(item.get("EventId"), item.get("EventStatus"), item) for item in listed
             if isinstance(item, dict)]
    if verified and (vm.last_heartbeat is None or when >= vm.last_heartbeat):
        polled = moment(data.get("LastPollUtc"))
        polled = when if polled is None or polled >= when else polled  # one float with ``when`` when equal
        seen = tuple(sorted({sys.intern(e.lower()) for e, _, _ in items if event_id_ok(e)})) if items else ()
        if vm.last_heartbeat is None or when > vm.last_heartbeat:
            vm.last_heartbeat, vm.polled, vm.listed = when, polled, seen
            version = free_text(data.get("AgentVersion"), 40, capped)
            vm.agent_version = vm.agent_version if version == vm.agent_version else sys.intern(version)
            health.verdict(state, vm, data, capped)
        else:  # two of one time: in any order
            if (polled, seen) > (vm.polled or float("-inf"), vm.listed):
                vm.polled, vm.listed = polled, seen
            health.verdict(state, vm, data, capped, tie=True)
    for event_id, status, item in items:
        rank = _HEARTBEAT_STATUS.get(status) if isinstance(status, str) else None
        if not event_id_ok(event_id) or rank is None or event_id.lower() in state.gone:
            continue
        record = state.events.get(event_id.lower())
        if record is None or not record.reports:  # only heartbeats name it: it stays unknown
            capped["unreported-event"] += 1
            continue
        if not verified:
            if rank == STARTED:
                _doubt(state, record, when)
            continue
        if not may_report(state, vm.key, record.key, limits):
            capped["vm-events"] += 1
            continue
        if not record.event_type:
            record.event_type = identifier(item.get("EventType"), limits.text_chars, capped)
        report(state, record, vm.key, rank, when)
    return FOLDED


def _doubt(state: FleetState, record: EventRecord, when: float) -> None:
    """An unverified Started claim: the event counts as started for its VMs (module docstring)."""
    state.note("events", record.key)
    if record.doubted is None or when < record.doubted:
        record.doubted = when
        record.revision += 1
        track(state, record)


def _info(record: EventRecord, event: Mapping[str, Any], data: dict[str, Any], stamp: Stamp,
          limits: Limits, capped: Counter[str]) -> None:
    """What the event is: Resources united, types gathered, the rest from the newest report."""
    listed, chars = data.get("Resources"), limits.text_chars
    names = resources(listed, limits, capped) if isinstance(listed, list) else None
    if names is not None:
        merged = union(record.resources, names)
        if len(merged) > limits.resources_per_event:
            capped["resources"] += 1
        elif merged != record.resources or not record.has_resources:
            record.resources, record.has_resources = merged, True
            record.revision += 1
    kind = identifier(data.get("EventType") or event.get("eventtype"), chars, capped)
    if kind and kind not in record.types:
        if len(record.types) >= MAX_TYPES:
            capped["text"] += 1
        else:
            record.types = tuple(sorted((*record.types, kind)))
    if names is not None and stamp > record.info_stamp:
        record.info_stamp = stamp
        record.event_type = kind or record.event_type
        record.event_source = identifier(data.get("EventSource"), chars, capped)
        record.description = free_text(data.get("Description"), chars, capped)
        duration = data.get("DurationInSeconds")
        record.duration = duration if isinstance(duration, int) and not isinstance(duration, bool) else None
    elif not record.event_type:
        record.event_type = kind
    due = not_before(data)
    if due is not None and stamp > record.not_before_stamp:
        record.not_before, record.not_before_stamp = due, stamp
    if due is not None and (record.earliest_not_before is None or due < record.earliest_not_before):
        record.earliest_not_before = due  # no report can make an event due later (availability.due_at)


def report(state: FleetState, record: EventRecord, vm_key: str, rank: int, when: float) -> None:
    """The VM's own status for the event (the highest it reported), and the event's merged times."""
    state.note("events", record.key)
    old = record.reports.get(vm_key, 0)
    if rank > old:
        if old == 0 and record.reports:
            other = next(iter(record.reports))
            if state.groups.union(vm_key, other):
                state.joined(vm_key, other)
        record.reports[vm_key] = rank
        record.revision += 1
        record.rank = max(record.rank, rank)
    if when > record.last_report:
        record.last_report = when
    if rank == SCHEDULED and (record.scheduled_at is None or when < record.scheduled_at):
        record.scheduled_at = when
    if rank == STARTED and (record.started_at is None or when < record.started_at):
        record.started_at = when
    elif rank >= TERMINAL:
        if rank == COMPLETED:
            if record.completed_at is None or when > record.completed_at:
                record.completed_at = when
            record.finished[vm_key] = max(when, record.finished.get(vm_key, when))
            state.settling.add(record.key)
        if record.ended_at is None or when > record.ended_at:
            record.ended_at = when
    track(state, record)
    azure_fold.reconcile(state, record)  # Azure's word on an event it reported wins (fold/azure.py)


def closed(state: FleetState, record: EventRecord) -> bool:
    """Every VM that goes by a name of its Resources reported it over itself, and every such name is
    some VM's (without Resources: every reporter reported it over). A VM cannot close an event for
    a peer by taking the peer's name. For an event Azure reported, Azure's word: whether it shows
    the event ended (fold/azure.py)."""
    azure = azure_fold.ended(state, record)
    if azure is not None:
        return azure
    if not record.has_resources:
        return bool(record.reports) and all(rank >= TERMINAL for rank in record.reports.values())
    for name in record.resources:
        bearers = state.named(name.lower())
        if not bearers or any(record.reports.get(key, 0) < TERMINAL for key in bearers):
            return False
    return True


def track(state: FleetState, record: EventRecord) -> None:
    """Keep ``open_events`` true for ``record`` (module docstring)."""
    if (record.rank or record.doubted is not None) and not closed(state, record):
        state.open_events.add(record.key)
    else:
        state.open_events.discard(record.key)


def _terminated(state: FleetState, record: EventRecord) -> None:
    """Note a completed Terminate: the VMs it deleted leave the fleet (scopes.py)."""
    if record.types == ("Terminate",) and record.rank == COMPLETED:
        mark = (record.completed_at, record.resources)
        if state.terminated.get(record.key) != mark:
            state.terminated[record.key] = mark
            state.touch(*record.reports)  # the VMs it may have deleted (scopes.py)


def _rejection(record: EventRecord, vm_key: str, data: dict[str, Any], capped: Counter[str]) -> str:
    message = data.get("Message")
    message_id = message.get("Id") if isinstance(message, dict) else None
    if not isinstance(message_id, str) or not message_id or has_controls(message_id[:300]):
        return MALFORMED
    ident = message_id[:300]
    if (ident not in record.rejections and len(record.rejections) >= MAX_REJECTIONS
            and all(d.id != ident for d in record.approvals.values())):
        raise Dropped("rejections")
    rejection = (vm_key, free_text(data.get("ReasonCode"), 60, capped))
    old = record.rejections.get(ident)
    if old is None or rejection < old:
        record.rejections[ident] = rejection
    return FOLDED
