"""The fold: one CloudEvent (a structured-mode dict) in, the fleet state updated. No I/O, no clock.

What it reads (``type`` = ``com.azure.scheduledevents.<suffix>``):

=====================  =========================================================================
``scheduled``          the event's type, source, Resources, NotBefore; the VM saw it Scheduled
``started``            the VM saw it Started (also the inferred ``started`` of the contract)
``completed``          the VM saw it gone after Started (or inferred); ``canceled``: gone unstarted.
                       A completed ``Terminate`` deleted its VMs: see scopes.py
``approved``           an echo: the VM approved it (``data.ApprovedBy`` says on whose word)
``approvalrejected``   the VM refused an approval message (``data.Message.Id``, ``ReasonCode``)
``prepared``           the VM's prepare hook succeeded; ``preparefailed``: it failed
``heartbeat``          the VM's agent is alive; its topology; ``data.Events`` it currently sees
``coordinator.<kind>`` the coordinator's own decisions (approve, ..., release), as trust.py let
                       them through; pause/resume/hold/release only in sequence (switches.py);
                       its ``sent`` records (an approval's message put in its queue), and its
                       ``acknowledge`` records (what Azure answered an approval through ARM)
=====================  =========================================================================

Anything else (another type, a missing ``id``/``time``/``type``, a ``data`` that is not an object)
is counted in ``FoldStats`` and skipped; the fold never raises on what it reads. Every report
carries ``data.Vm`` (shared-contracts.md): the VM's identity and topology. Every report of an
EventId by a VM joins that VM to the group of the VMs that reported it before (co-reception:
availability sets and scale-set placement groups receive each other's events).

Bounded whatever a VM sends: the fold keeps of each VM's word only what ``Limits`` allow (limits.py:
events a heartbeat lists, tags, text lengths, Resources, events per VM, new VM keys per minute of
``received``, the hub's enqueued time), and never makes an event known from heartbeats alone;
``FoldStats.capped`` counts each drop by reason. ``FoldStats.skipped`` names at most
``SKIPPED_TYPES`` CloudEvent types and counts the rest together.

Merging rules (see state.py): a VM's status for an event is the highest it reported
(scheduled < started < canceled < completed); topology comes from the newest report; a
decision id seen twice keeps one record (the earlier, then the smaller by content), so decisions
published twice or by two instances are harmless. A report of an EventId that ``prune`` removed
is counted as ``late`` and skipped.

The fold updates ``state`` in place in O(1) per report (plus O(number of events a heartbeat
lists), at most ``events_per_heartbeat``); nothing scans the fleet.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any, TypeGuard

from ...model import TYPE_PREFIX, Kind
from ...printable import has_controls
from . import azure_fold, azure_topology, switches
from .intake import (
    CAPPED,
    FOLDED,
    LATE,
    MALFORMED,
    SKIPPED,
    Dropped,
    FoldStats,
    admit,
    free_text,
    identifier,
    may_report,
    moment,
    not_before,
    resources,
    topology,
)
from .limits import DEFAULT_LIMITS, MAX_REJECTIONS, Limits
from .state import (
    CANCELED,
    COMPLETED,
    SCHEDULED,
    STARTED,
    TERMINAL,
    DecisionRecord,
    EventRecord,
    FleetState,
    Stamp,
    Switch,
    Vm,
)

PREFIX = TYPE_PREFIX
DECISION_PREFIX = PREFIX + "coordinator."
DECISION_KINDS = ("approve", "sent", "defer", "breach", "pause", "resume", "hold", "release", "acknowledge")
_TRANSITIONS: dict[str, int] = {Kind.SCHEDULED: SCHEDULED, Kind.STARTED: STARTED, Kind.CANCELED: CANCELED,
                                Kind.COMPLETED: COMPLETED}
_SEEN_SCHEDULED = (Kind.APPROVED, Kind.PREPARED, Kind.PREPARE_FAILED)
AGENT_TYPES = (*_TRANSITIONS, *_SEEN_SCHEDULED, Kind.APPROVAL_REJECTED, Kind.HEARTBEAT)
_HEARTBEAT_STATUS = {"Scheduled": SCHEDULED, "Started": STARTED}

MAX_DECISION_BYTES = 64 * 1024  # a real decision's data is ~1 KB (an event with ~100 Resources: ~20 KB)


def fold_json(state: FleetState, text: str | bytes, stats: FoldStats | None = None,
              limits: Limits = DEFAULT_LIMITS, received: float | None = None) -> str:
    """``fold_event`` on a structured-mode CloudEvent's JSON text."""
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        event = None
    if not isinstance(event, dict):
        if stats is not None:
            stats.count(MALFORMED, "")
        return MALFORMED
    return fold_event(state, event, stats, limits, received)


def fold_event(state: FleetState, event: Mapping[str, Any], stats: FoldStats | None = None,
               limits: Limits = DEFAULT_LIMITS, received: float | None = None) -> str:
    """Fold one CloudEvent; the outcome: ``folded``, ``skipped``, ``malformed``, ``late`` or
    ``capped`` (dropped by a limit). ``received``: when the hub enqueued it (epoch seconds)."""
    kind = event.get("type")
    kind = kind if isinstance(kind, str) else ""
    counted = stats if stats is not None else FoldStats()
    try:
        outcome = _fold(state, event, kind, limits, counted, received)
    except Dropped as drop:
        counted.capped[drop.reason] += 1
        outcome = CAPPED
    except (TypeError, ValueError, AttributeError, OverflowError, KeyError):
        outcome = MALFORMED  # a report with fields of the wrong shape: counted, never fatal
    counted.count(outcome, kind.removeprefix(PREFIX) if outcome == FOLDED else kind)
    return outcome


def _fold(state: FleetState, event: Mapping[str, Any], kind: str, limits: Limits, stats: FoldStats,
          received: float | None) -> str:
    if kind.startswith(DECISION_PREFIX):
        suffix = kind[len(DECISION_PREFIX):]
        if suffix not in DECISION_KINDS:
            return SKIPPED
    elif not kind.startswith(PREFIX) or kind[len(PREFIX):] not in AGENT_TYPES:
        return SKIPPED
    ident, when = event.get("id"), moment(event.get("time"))
    data = event.get("data")
    if isinstance(data, str | bytes):
        data = json.loads(data)
    if not isinstance(ident, str) or not ident or when is None or not isinstance(data, dict):
        return MALFORMED
    if kind.startswith(DECISION_PREFIX):
        try:  # kept as read (the log, snapshots): strict JSON of a sane size only
            size = len(json.dumps(data, allow_nan=False))
        except (ValueError, TypeError, RecursionError):
            return MALFORMED
        if size > MAX_DECISION_BYTES or len(ident) > 600:
            return MALFORMED
        return _decision(state, DecisionRecord(ident, kind[len(DECISION_PREFIX):], when, data))
    suffix = kind[len(PREFIX):]
    stamp = (when, ident)
    vm = _vm(state, event, data, stamp, limits, stats.capped, when if received is None else received)
    if vm is None:
        return MALFORMED
    if suffix == Kind.HEARTBEAT:
        return _heartbeat(state, vm, data, when, limits, stats.capped)
    event_id = data.get("EventId") or event.get("subject")
    if not _is_event_id(event_id):
        return MALFORMED
    key = event_id.lower()
    if key in state.gone:
        return LATE
    if suffix == Kind.APPROVAL_REJECTED:
        known = state.events.get(key)
        if known is None or not known.reports:
            raise Dropped("unreported-event")
        return _rejection(known, vm.key, data, stats.capped)
    if not may_report(state, vm.key, key, limits):
        raise Dropped("vm-events")
    record = _event(state, event_id)
    _info(record, event, data, stamp, limits, stats.capped)
    _report(state, record, vm.key, _TRANSITIONS.get(suffix, SCHEDULED), when)
    _terminated(state, record)
    if suffix == Kind.APPROVED:
        echo = (when, free_text(data.get("ApprovedBy"), 200, stats.capped))
        old = record.echoes.get(vm.key)
        if old is None or echo < old:
            record.echoes[vm.key] = echo
    elif suffix == Kind.PREPARED:
        record.prepared[vm.key] = max(when, record.prepared.get(vm.key, when))
    elif suffix == Kind.PREPARE_FAILED:
        failure = (when, free_text(data.get("Reason"), 300, stats.capped))
        old_failure = record.prepare_failed.get(vm.key)
        if old_failure is None or failure > old_failure:
            record.prepare_failed[vm.key] = failure
    return FOLDED


def _vm(state: FleetState, event: Mapping[str, Any], data: dict[str, Any], stamp: Stamp, limits: Limits,
        capped: Counter[str], clock: float) -> Vm | None:
    """The reporting VM's record, created (within ``new_vms_per_minute`` of ``clock``) or updated
    from ``data.Vm``."""
    info = data.get("Vm")
    info = info if isinstance(info, dict) else {}
    chars = limits.text_chars
    vm_id, name = identifier(info.get("vmId"), chars, capped), identifier(info.get("name"), chars, capped)
    complete = info.get("complete") is not False and bool(vm_id)
    if not info:  # an older agent: the source says /virtualMachines/<name>, the extension the id
        source, ext = event.get("source"), event.get("vmid")
        if isinstance(source, str) and "/virtualMachines/" in source:
            name = identifier(source.rsplit("/virtualMachines/", 1)[1].split("/")[0], chars, capped)
        complete = isinstance(source, str) and source.startswith("/subscriptions/") and bool(ext)
        vm_id = identifier(ext, chars, capped) if complete else ""
        complete = complete and bool(vm_id)
    if not complete and not name:
        return None
    key = vm_id.lower() if complete else "host:" + name.lower()
    vm = state.vms.get(key)
    if vm is None:
        admit(state, limits, clock)
        vm = state.vms[key] = Vm(key=key, name=name, vm_id=vm_id)
        state.version += 1
    if stamp[0] > vm.last_heard:
        if key in state.retired:
            state.version += 1  # heard from after its Terminate completed: not deleted after all
        vm.last_heard = stamp[0]
    if info and stamp > vm.topology_stamp:
        before = vm.topology()
        vm.topology_stamp = stamp
        vm.name, vm.vm_id, vm.complete = name or vm.name, vm_id, complete
        topology(vm, info, limits, capped)
        azure_topology.after_report(state, vm)  # Azure's topology wins; the agent's is its claim
        if vm.topology() != before:
            state.version += 1
    return vm


def _heartbeat(state: FleetState, vm: Vm, data: dict[str, Any], moment: float, limits: Limits,
               capped: Counter[str]) -> str:
    if vm.last_heartbeat is None or moment > vm.last_heartbeat:
        vm.last_heartbeat = moment
        vm.agent_version = free_text(data.get("AgentVersion"), 40, capped)
    listed = data.get("Events")
    if not isinstance(listed, list):
        return FOLDED
    if len(listed) > limits.events_per_heartbeat:
        capped["heartbeat-events"] += len(listed) - limits.events_per_heartbeat
        listed = listed[:limits.events_per_heartbeat]
    for item in listed:
        if not isinstance(item, dict):
            continue
        event_id, status = item.get("EventId"), item.get("EventStatus")
        rank = _HEARTBEAT_STATUS.get(status) if isinstance(status, str) else None
        if not _is_event_id(event_id) or rank is None or event_id.lower() in state.gone:
            continue
        record = state.events.get(event_id.lower())
        if record is None or not record.reports:  # only heartbeats name it: it stays unknown
            capped["unreported-event"] += 1
            continue
        if not may_report(state, vm.key, record.key, limits):
            capped["vm-events"] += 1
            continue
        if not record.event_type:
            record.event_type = identifier(item.get("EventType"), limits.text_chars, capped)
        _report(state, record, vm.key, rank, moment)
    return FOLDED


def _is_event_id(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= 200 and not has_controls(value)


def _event(state: FleetState, event_id: str) -> EventRecord:
    key = event_id.lower()
    record = state.events.get(key)
    if record is None:
        record = state.events[key] = EventRecord(key=key, event_id=event_id)
    elif event_id < record.event_id:  # one spelling whatever the order (IMDS: upper case)
        record.event_id = event_id
    return record


def _info(record: EventRecord, event: Mapping[str, Any], data: dict[str, Any], stamp: Stamp,
          limits: Limits, capped: Counter[str]) -> None:
    """What the event is, from the newest full report (NotBefore from the newest that has one)."""
    listed, chars = data.get("Resources"), limits.text_chars
    names = (resources(listed, limits, capped)
             if isinstance(listed, list) and stamp > record.info_stamp else None)
    if names is not None:
        if not record.has_resources or names != record.resources:
            record.revision += 1
        record.info_stamp, record.resources, record.has_resources = stamp, names, True
        record.event_type = (identifier(data.get("EventType") or event.get("eventtype"), chars, capped)
                             or record.event_type)
        record.event_source = identifier(data.get("EventSource"), chars, capped)
        record.description = free_text(data.get("Description"), chars, capped)
        duration = data.get("DurationInSeconds")
        record.duration = duration if isinstance(duration, int) and not isinstance(duration, bool) else None
    elif not record.event_type:
        record.event_type = identifier(data.get("EventType") or event.get("eventtype"), chars, capped)
    due = not_before(data)
    if due is not None and stamp > record.not_before_stamp:
        record.not_before, record.not_before_stamp = due, stamp


def _report(state: FleetState, record: EventRecord, vm_key: str, rank: int, moment: float) -> None:
    old = record.reports.get(vm_key, 0)
    if rank > old:
        if old == 0 and record.reports and state.groups.union(vm_key, next(iter(record.reports))):
            state.version += 1
        record.reports[vm_key] = rank
        record.revision += 1
        record.rank = max(record.rank, rank)
    if moment > record.last_report:
        record.last_report = moment
    if rank == SCHEDULED and (record.scheduled_at is None or moment < record.scheduled_at):
        record.scheduled_at = moment
    if rank == STARTED and (record.started_at is None or moment < record.started_at):
        record.started_at = moment
    elif rank >= TERMINAL:
        if rank == COMPLETED:
            if record.completed_at is None or moment > record.completed_at:
                record.completed_at = moment
            record.finished[vm_key] = max(moment, record.finished.get(vm_key, moment))
            state.settling.add(record.key)
        if record.ended_at is None or moment > record.ended_at:
            record.ended_at = moment
    if 0 < record.rank < TERMINAL:
        state.open_events.add(record.key)
    else:
        state.open_events.discard(record.key)
    azure_fold.reconcile(state, record)  # Azure's word on an event it reported wins (azure_fold.py)


def _terminated(state: FleetState, record: EventRecord) -> None:
    """Note a completed Terminate: the VMs it deleted leave the fleet (scopes.py)."""
    if record.event_type == "Terminate" and record.rank == COMPLETED:
        mark = (record.completed_at, record.resources)
        if state.terminated.get(record.key) != mark:
            state.terminated[record.key] = mark
            state.version += 1


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


def _canonical(record: DecisionRecord) -> tuple[float, str]:
    return (record.time, json.dumps(record.data, sort_keys=True, default=str))


def _decision(state: FleetState, record: DecisionRecord, chained: bool = True) -> str:
    """Fold one decision; ``chained=False`` for a snapshot's (switches.py)."""
    known = state.decisions.get(record.id)
    if known is not None:
        if known.kind != record.kind:
            return MALFORMED
        if _canonical(known) <= _canonical(record):
            return FOLDED  # the same decision again (or the other instance's twin: keep one)
    if record.kind in ("pause", "resume", "hold", "release"):
        return _switch(state, record, known is not None, chained)
    event_id = record.data.get("EventId")
    if not _is_event_id(event_id):
        return MALFORMED
    if event_id.lower() in state.gone:
        return LATE
    if record.kind in ("approve", "sent") and not switches.valid(record.attempt):
        return MALFORMED
    state.decisions[record.id] = record
    target = _event(state, event_id)
    if record.kind in ("approve", "sent"):
        table = target.approvals if record.kind == "approve" else target.sends
        old = table.get(record.attempt)
        if old is None or old.id == record.id or (record.time, record.id) < (old.time, old.id):
            table[record.attempt] = record
    elif record.kind == "defer":
        target.defers[record.id] = record
    elif record.kind == "acknowledge":
        azure_fold.fold_acknowledged(state, record)
    else:
        target.breaches[record.id] = record
    return FOLDED


def _switch(state: FleetState, record: DecisionRecord, known: bool, chained: bool) -> str:
    """A pause/resume of ``data.Scope`` or a hold/release of ``data.EventId``, by the sequence rule."""
    table, key, on = state.pauses, record.scope, record.kind == "pause"
    if record.kind in ("hold", "release"):
        event_id = record.data.get("EventId")
        if not _is_event_id(event_id):
            return MALFORMED
        if event_id.lower() in state.gone:
            return LATE
        table, key, on = state.holds, event_id.lower(), record.kind == "hold"
    if not key or not switches.put(table, key, Switch(on, record), chained=chained):
        return FOLDED if known else MALFORMED  # a twin of a superseded switch changes nothing
    state.decisions[record.id] = record
    return FOLDED
