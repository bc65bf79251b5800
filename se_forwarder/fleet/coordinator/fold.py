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
``coordinator.<kind>`` the coordinator's own decisions (approve, defer, breach, pause, resume,
                       hold, release), so a restarted or standby instance knows what was decided,
                       and its ``sent`` records: when an approval's message was put in its queue
=====================  =========================================================================

Anything else (another type, a missing ``id``/``time``/``type``, a ``data`` that is not an object)
is counted in ``FoldStats`` and skipped; the fold never raises on what it reads. Every report
carries ``data.Vm`` (shared-contracts.md): the VM's identity and topology. Every report of an
EventId by a VM joins that VM to the group of the VMs that reported it before (co-reception:
availability sets and scale-set placement groups receive each other's events).

Merging rules (see state.py): a VM's status for an event is the highest it reported
(scheduled < started < canceled < completed); topology comes from the newest report; a
decision id seen twice keeps one record (the earlier, then the smaller by content), so decisions
published twice or by two instances are harmless. A report of an EventId that ``prune`` removed
is counted as ``late`` and skipped.

The fold updates ``state`` in place in O(1) per report (plus O(number of events a heartbeat
lists)); nothing scans the fleet.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeGuard

from ...model import TYPE_PREFIX, Kind, MalformedDocument, parse_not_before
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
DECISION_KINDS = ("approve", "sent", "defer", "breach", "pause", "resume", "hold", "release")
_TRANSITIONS: dict[str, int] = {Kind.SCHEDULED: SCHEDULED, Kind.STARTED: STARTED, Kind.CANCELED: CANCELED,
                                Kind.COMPLETED: COMPLETED}
_SEEN_SCHEDULED = (Kind.APPROVED, Kind.PREPARED, Kind.PREPARE_FAILED)
AGENT_TYPES = (*_TRANSITIONS, *_SEEN_SCHEDULED, Kind.APPROVAL_REJECTED, Kind.HEARTBEAT)
_HEARTBEAT_STATUS = {"Scheduled": SCHEDULED, "Started": STARTED}

FOLDED, SKIPPED, MALFORMED, LATE = "folded", "skipped", "malformed", "late"
MAX_DECISION_BYTES = 64 * 1024  # a real decision's data is ~1 KB (an event with ~100 Resources: ~20 KB)


@dataclass
class FoldStats:
    """Counters for ``/metrics`` (not part of the state: a restart starts them at zero)."""

    folded: Counter[str] = field(default_factory=Counter)  # by type suffix
    skipped: Counter[str] = field(default_factory=Counter)  # by CloudEvent type
    malformed: int = 0
    late: int = 0

    def count(self, outcome: str, kind: str) -> None:
        if outcome == FOLDED:
            self.folded[kind] += 1
        elif outcome == SKIPPED:
            self.skipped[kind[:200]] += 1
        elif outcome == MALFORMED:
            self.malformed += 1
        else:
            self.late += 1


def fold_json(state: FleetState, text: str | bytes, stats: FoldStats | None = None) -> str:
    """``fold_event`` on a structured-mode CloudEvent's JSON text."""
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        event = None
    if not isinstance(event, dict):
        if stats is not None:
            stats.count(MALFORMED, "")
        return MALFORMED
    return fold_event(state, event, stats)


def fold_event(state: FleetState, event: Mapping[str, Any], stats: FoldStats | None = None) -> str:
    """Fold one CloudEvent; the outcome: ``folded``, ``skipped``, ``malformed`` or ``late``."""
    kind = event.get("type")
    kind = kind if isinstance(kind, str) else ""
    try:
        outcome = _fold(state, event, kind)
    except (TypeError, ValueError, AttributeError, OverflowError, KeyError):
        outcome = MALFORMED  # a report with fields of the wrong shape: counted, never fatal
    if stats is not None:
        stats.count(outcome, kind.removeprefix(PREFIX) if outcome == FOLDED else kind)
    return outcome


def _fold(state: FleetState, event: Mapping[str, Any], kind: str) -> str:
    if kind.startswith(DECISION_PREFIX):
        suffix = kind[len(DECISION_PREFIX):]
        if suffix not in DECISION_KINDS:
            return SKIPPED
    elif not kind.startswith(PREFIX) or kind[len(PREFIX):] not in AGENT_TYPES:
        return SKIPPED
    ident, moment = event.get("id"), _time(event.get("time"))
    data = event.get("data")
    if isinstance(data, str | bytes):
        data = json.loads(data)
    if not isinstance(ident, str) or not ident or moment is None or not isinstance(data, dict):
        return MALFORMED
    if kind.startswith(DECISION_PREFIX):
        try:  # kept as read (the log, snapshots): strict JSON of a sane size only
            size = len(json.dumps(data, allow_nan=False))
        except (ValueError, TypeError, RecursionError):
            return MALFORMED
        if size > MAX_DECISION_BYTES or len(ident) > 600:
            return MALFORMED
        return _decision(state, DecisionRecord(ident, kind[len(DECISION_PREFIX):], moment, data))
    suffix = kind[len(PREFIX):]
    stamp = (moment, ident)
    vm = _vm(state, event, data, stamp)
    if vm is None:
        return MALFORMED
    if suffix == Kind.HEARTBEAT:
        return _heartbeat(state, vm, data, moment)
    event_id = data.get("EventId") or event.get("subject")
    if not _is_event_id(event_id):
        return MALFORMED
    if event_id.lower() in state.gone:
        return LATE
    record = _event(state, event_id)
    if suffix == Kind.APPROVAL_REJECTED:
        return _rejection(record, vm.key, data)
    _info(record, event, data, stamp)
    _report(state, record, vm.key, _TRANSITIONS.get(suffix, SCHEDULED), moment)
    _terminated(state, record)
    if suffix == Kind.APPROVED:
        by = data.get("ApprovedBy")
        echo = (moment, by[:200] if isinstance(by, str) else "")
        old = record.echoes.get(vm.key)
        if old is None or echo < old:
            record.echoes[vm.key] = echo
    elif suffix == Kind.PREPARED:
        record.prepared[vm.key] = max(moment, record.prepared.get(vm.key, moment))
    elif suffix == Kind.PREPARE_FAILED:
        reason = data.get("Reason")
        failure = (moment, reason[:300] if isinstance(reason, str) else "")
        old_failure = record.prepare_failed.get(vm.key)
        if old_failure is None or failure > old_failure:
            record.prepare_failed[vm.key] = failure
    return FOLDED


def _time(value: Any) -> float | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _text(value: Any) -> str:
    return sys.intern(value) if isinstance(value, str) and len(value) <= 300 else ""


def _vm(state: FleetState, event: Mapping[str, Any], data: dict[str, Any], stamp: Stamp) -> Vm | None:
    """The reporting VM's record, created or updated from ``data.Vm``."""
    info = data.get("Vm")
    info = info if isinstance(info, dict) else {}
    vm_id, name = _text(info.get("vmId")), _text(info.get("name"))
    complete = info.get("complete") is not False and bool(vm_id)
    if not info:  # an older agent: the source says /virtualMachines/<name>, the extension the id
        source, ext = event.get("source"), event.get("vmid")
        if isinstance(source, str) and "/virtualMachines/" in source:
            name = _text(source.rsplit("/virtualMachines/", 1)[1].split("/")[0])
        complete = isinstance(source, str) and source.startswith("/subscriptions/") and bool(ext)
        vm_id = _text(ext) if complete else ""
    if not complete and not name:
        return None
    key = vm_id.lower() if complete else "host:" + name.lower()
    vm = state.vms.get(key)
    if vm is None:
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
        vm.resource_id = _text(info.get("resourceId"))
        vm.subscription = _text(info.get("subscriptionId")).lower()
        vm.resource_group = _text(info.get("resourceGroupName")).lower()
        vm.location = _text(info.get("location")).lower()
        vm.zone = _text(str(info.get("zone") or ""))
        vm.scale_set = _text(info.get("vmScaleSetName")).lower()
        vm.fault_domain = _text(str(info.get("platformFaultDomain") or ""))
        vm.update_domain = _text(str(info.get("platformUpdateDomain") or ""))
        vm.placement_group = _text(info.get("placementGroupId"))
        tags = info.get("tags")
        vm.tags = ({_text(str(k).lower()): _text(str(v)) for k, v in tags.items()}
                   if isinstance(tags, dict) else {})
        if vm.topology() != before:
            state.version += 1
    return vm


def _heartbeat(state: FleetState, vm: Vm, data: dict[str, Any], moment: float) -> str:
    if vm.last_heartbeat is None or moment > vm.last_heartbeat:
        vm.last_heartbeat = moment
        version = data.get("AgentVersion")
        vm.agent_version = version[:40] if isinstance(version, str) else ""
    listed = data.get("Events")
    for item in listed if isinstance(listed, list) else ():
        if not isinstance(item, dict):
            continue
        event_id, status = item.get("EventId"), item.get("EventStatus")
        rank = _HEARTBEAT_STATUS.get(status) if isinstance(status, str) else None
        if not _is_event_id(event_id) or rank is None or event_id.lower() in state.gone:
            continue
        record = _event(state, event_id)
        if not record.event_type and isinstance(item.get("EventType"), str):
            record.event_type = _text(item["EventType"])
        _report(state, record, vm.key, rank, moment)
    return FOLDED


def _is_event_id(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= 200


def _event(state: FleetState, event_id: str) -> EventRecord:
    key = event_id.lower()
    record = state.events.get(key)
    if record is None:
        record = state.events[key] = EventRecord(key=key, event_id=event_id)
    elif event_id < record.event_id:  # one spelling whatever the order (IMDS: upper case)
        record.event_id = event_id
    return record


def _info(record: EventRecord, event: Mapping[str, Any], data: dict[str, Any], stamp: Stamp) -> None:
    """What the event is, from the newest full report (NotBefore from the newest that has one)."""
    resources = data.get("Resources")
    if isinstance(resources, list) and stamp > record.info_stamp:
        names = tuple(_text(r) for r in resources if isinstance(r, str) and r)
        if not record.has_resources or names != record.resources:
            record.revision += 1
        record.info_stamp, record.resources, record.has_resources = stamp, names, True
        record.event_type = _text(data.get("EventType") or event.get("eventtype")) or record.event_type
        record.event_source = _text(data.get("EventSource"))
        record.description = _text(data.get("Description"))
        duration = data.get("DurationInSeconds")
        record.duration = duration if isinstance(duration, int) and not isinstance(duration, bool) else None
    elif not record.event_type:
        record.event_type = _text(data.get("EventType") or event.get("eventtype"))
    not_before = _time(data.get("NotBeforeUtc"))
    if not_before is None and data.get("NotBefore"):
        try:
            parsed = parse_not_before(data.get("NotBefore"))
            not_before = parsed.timestamp() if parsed else None
        except MalformedDocument:
            not_before = None
    if not_before is not None and stamp > record.not_before_stamp:
        record.not_before, record.not_before_stamp = not_before, stamp


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


def _terminated(state: FleetState, record: EventRecord) -> None:
    """Note a completed Terminate: the VMs it deleted leave the fleet (scopes.py)."""
    if record.event_type == "Terminate" and record.rank == COMPLETED:
        mark = (record.completed_at, record.resources)
        if state.terminated.get(record.key) != mark:
            state.terminated[record.key] = mark
            state.version += 1


def _rejection(record: EventRecord, vm_key: str, data: dict[str, Any]) -> str:
    message = data.get("Message")
    message_id = message.get("Id") if isinstance(message, dict) else None
    code = data.get("ReasonCode")
    if not isinstance(message_id, str) or not message_id:
        return MALFORMED
    rejection = (vm_key, code[:60] if isinstance(code, str) else "")
    old = record.rejections.get(message_id[:300])
    if old is None or rejection < old:
        record.rejections[message_id[:300]] = rejection
    return FOLDED


def _canonical(record: DecisionRecord) -> tuple[float, str]:
    return (record.time, json.dumps(record.data, sort_keys=True, default=str))


def _decision(state: FleetState, record: DecisionRecord) -> str:
    known = state.decisions.get(record.id)
    if known is not None:
        if known.kind == record.kind and _canonical(known) <= _canonical(record):
            return FOLDED  # the same decision again (or the other instance's twin: keep one)
        if known.kind != record.kind:
            return MALFORMED
    if record.kind in ("pause", "resume"):
        if not record.scope:
            return MALFORMED
        state.decisions[record.id] = record
        _switch(state.pauses, record.scope, Switch(record.kind == "pause", record))
        return FOLDED
    event_id = record.data.get("EventId")
    if not _is_event_id(event_id):
        return MALFORMED
    if event_id.lower() in state.gone:
        return LATE
    if record.kind in ("approve", "sent") and record.attempt < 1:
        return MALFORMED
    state.decisions[record.id] = record
    if record.kind in ("hold", "release"):
        _switch(state.holds, event_id.lower(), Switch(record.kind == "hold", record))
        return FOLDED
    target = _event(state, event_id)
    if record.kind in ("approve", "sent"):
        table = target.approvals if record.kind == "approve" else target.sends
        old = table.get(record.attempt)
        if old is None or old.id == record.id or (record.time, record.id) < (old.time, old.id):
            table[record.attempt] = record
    elif record.kind == "defer":
        target.defers[record.id] = record
    else:
        target.breaches[record.id] = record
    return FOLDED


def _switch(table: dict[str, Switch], key: str, switch: Switch) -> None:
    old = table.get(key)
    if old is None or old.record.id == switch.record.id or switch.order() > old.order():
        table[key] = switch
