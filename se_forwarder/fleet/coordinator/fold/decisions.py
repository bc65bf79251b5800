"""The fold's part for the coordinator's own decisions (``coordinator.<kind>``, as trust.py let them
through): the decision log, each event's approvals (and the ``sent`` records of their messages,
or the ``acknowledge`` records of what Azure answered an approval through ARM: fold/azure.py),
defers and breaches, the switches, and the operators' inventory confirmations (fold/inventory.py). Pure.

A decision id seen twice keeps one record (the earlier, then the smaller by content), so decisions
published twice or by two instances are harmless. Pause/resume of a scope and hold/release of an
event fold only in sequence (switches.py). A decision about an EventId that ``prune`` removed is
``late``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from ..schema import DECISION_KINDS
from . import azure as azure_fold
from . import identities, inventory, switches
from .caps import FOLDED, LATE, MALFORMED, event_id_ok
from .state import DecisionRecord, FleetState, Switch

MAX_DECISION_BYTES = 64 * 1024  # a real decision's data is ~1 KB (an event with ~100 Resources: ~20 KB)
# orjson refuses what json would take another way (subclasses, dataclasses, dates): then json decides
_PLAIN = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
# json.dumps writes at most 6 characters for each byte orjson writes (an escaped DEL: 1 byte,
# ``\u007f``; a character of two to four bytes: 6 or 12; ", " for ","; 1e-07 for 1e-7)
_WIDEST = 6


def fold_decision(state: FleetState, ident: str, kind: str, when: float, data: Mapping[str, Any]) -> str:
    """Fold one decision CloudEvent's parts (``kind``: the type's suffix after ``coordinator.``)."""
    if kind not in DECISION_KINDS:
        return "skipped"
    if len(ident) > 600 or not sane(data):  # kept as read (the log, snapshots)
        return MALFORMED
    return decision(state, DecisionRecord(ident, kind, when, dict(data)))


def sane(data: Mapping[str, Any]) -> bool:
    """``data`` is strict JSON (no NaN, no infinity, JSON's types only) whose ``json.dumps`` text
    is at most MAX_DECISION_BYTES long. Told by orjson (half of json's time here, the read back
    included) when its text is short enough that json's could not be too long and reads back equal
    to ``data`` (a NaN reads back None, a tuple a list, a UUID a string, an Enum its value: those,
    and whatever orjson refuses, are json's to tell, as before)."""
    try:
        text = orjson.dumps(data, option=_PLAIN)
    except TypeError:  # orjson.JSONEncodeError: not its types, an integer beyond 64 bits, too deep
        pass
    else:
        if len(text) * _WIDEST <= MAX_DECISION_BYTES and orjson.loads(text) == data:
            return True
    try:
        return len(json.dumps(data, allow_nan=False)) <= MAX_DECISION_BYTES
    except (ValueError, TypeError, RecursionError):
        return False


def _canonical(record: DecisionRecord) -> tuple[float, str]:
    return (record.time, json.dumps(record.data, sort_keys=True, default=str))


def decision(state: FleetState, record: DecisionRecord, chained: bool = True) -> str:
    """Fold one decision; ``chained=False`` for a snapshot's (switches.py)."""
    state.note("decisions", record.id)
    known = state.decisions.get(record.id)
    if known is not None:
        if known.kind != record.kind:
            return MALFORMED
        if _canonical(known) <= _canonical(record):
            return FOLDED  # the same decision again (or the other instance's twin: keep one)
    if record.kind in ("pause", "resume", "hold", "release"):
        return _switch(state, record, known is not None, chained)
    if record.kind == "settle":  # an operator's word on a vmId in key conflict (fold/identities.py)
        return identities.fold_settle(state, record)
    if record.kind == "confirm":
        return inventory.fold_confirm(state, record)
    event_id = record.data.get("EventId")
    if not event_id_ok(event_id):
        return MALFORMED
    if event_id.lower() in state.gone:
        return LATE
    if record.kind in ("approve", "sent") and not switches.valid(record.attempt):
        return MALFORMED
    state.decisions[record.id] = record
    target = state.event(event_id)
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
        if not event_id_ok(event_id):
            return MALFORMED
        if event_id.lower() in state.gone:
            return LATE
        table, key, on = state.holds, event_id.lower(), record.kind == "hold"
    if not key or not switches.put(table, key, Switch(on, record), chained=chained):
        return FOLDED if known else MALFORMED  # a twin of a superseded switch changes nothing
    state.decisions[record.id] = record
    return FOLDED
