"""The fold as JSON and back: what the service stores in a blob with the offsets it covers.

``snapshot(state)`` is a JSON-serialisable dict in a canonical order (equal states give equal
snapshots, so ``snapshot(a) == snapshot(b)`` is how states are compared). ``restore(data)`` gives
a state that folds on exactly as the original would: restoring a snapshot and folding the events
after it gives the same state as folding everything. Derived data (indexes, caches) is not stored;
decisions are stored as their CloudEvent data and folded again on restore. So are the registered
identity keys (fold/identities.py), the key changes kept to be shown, the vmIds in key conflict, the
reports waiting for their sender's registration (gate.py), up to 4 MiB of them (how many were left
out is kept, and counted when restored), and the inventory (each VM's first placement and the
placements operators confirmed: fold/inventory.py). ``restore`` raises ``StateError`` (one line) for anything
that is not a snapshot of this format; members added since the format was made are optional.

``lines(state)`` is the same fold as lines of JSON, one record each (``["events", [{...}, ...]]``,
``["decisions", [[...], ...]]``, ...) in batches, VMs as columns (fold/snapshot/columns.py), and
``restore_lines`` reads them back one at a time: how the snapshot blob holds it (ha/snapshot_blob.py),
so loading 100,000 VMs never holds the fold twice; lines of format 1 (VMs as rows) still load. A
save takes the fold on the service's loop (``pieces``: the small parts encoded, the large ones
copied, a VM's values as a tuple) and ``written`` encodes the copies into lines on another thread.
Both forms restore through one ``Restorer``: equal folds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter
from typing import Any

import orjson

from .. import azure_state, inventory
from ..identities import conflicts_data, held_for_snapshot, identity_data, rekeyed_data
from ..state import NO_STAMP, EventRecord, FleetState, Stamp, Vm
from .columns import BATCH, vm_records
from .restore import FORMAT, VM_COLUMNS, Restorer, restore, restore_lines

__all__ = ["BATCH", "FORMAT", "VM_COLUMNS", "Records", "Restorer", "confirmed_data", "encode", "event_data",
           "lines", "pieces", "restore", "restore_lines", "snapshot", "vm_row", "written"]


def _num(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


def _stamp(stamp: Stamp) -> list[Any] | None:
    return None if stamp == NO_STAMP else [stamp[0], stamp[1]]


def snapshot(state: FleetState) -> dict[str, Any]:
    """The state as a JSON-serialisable dict (module docstring)."""
    return {
        "format": FORMAT,
        "vms": [_vm(state.vms[k]) for k in sorted(state.vms)],
        "events": [event_data(state.events[k]) for k in sorted(state.events)],
        "groups": state.groups.components(),
        "decisions": [[d.id, d.kind, d.time, d.data] for _, d in sorted(state.decisions.items())],
        "gone": dict(sorted(state.gone.items())),
        "identities": {k: identity_data(i) for k, i in sorted(state.identities.items())},
        "rekeyed": rekeyed_data(state),
        "conflicts": conflicts_data(state),
        **dict(zip(("waiting", "waitingLeftOut"), held_for_snapshot(state), strict=True)),
        "azure": azure_state.dump(state.azure),
        "confirmed": {k: confirmed_data(state, k) for k in sorted(state.confirmed)},
    }


def confirmed_data(state: FleetState, key: str) -> list[Any]:
    """The placement an operator confirmed for a VM, and its decision's stamp."""
    return [inventory.as_data(state.confirmed[key]), *state.confirmed_at[key]]


def _vm(vm: Vm) -> dict[str, Any]:
    return dict(zip(VM_COLUMNS, vm_row(vm), strict=True))


def vm_row(vm: Vm) -> list[Any]:
    """A VM's values in the order of ``VM_COLUMNS`` (``lines`` writes them so: no names repeated)."""
    return [vm.key, vm.name, vm.vm_id, vm.complete, vm.resource_id, vm.subscription, vm.resource_group,
            vm.location, vm.zone, vm.scale_set, vm.fault_domain, vm.update_domain, vm.placement_group,
            dict(sorted(vm.tags.items())) if vm.tags else {}, _stamp(vm.topology_stamp), vm.last_heartbeat,
            _num(vm.last_heard), vm.agent_version, list(vm.listed), vm.polled, vm.health, vm.health_reason,
            None if vm.placed is None else [inventory.as_data(vm.placed), *vm.placed_stamp],
            _claims(vm.claims)]


def _claims(claims: tuple[tuple[str, str, float], ...]) -> list[list[Any]]:
    return sorted([name, rid.lower(), t] for name, rid, t in claims)  # as they count (fold/inventory.Claim)


def event_data(e: EventRecord) -> dict[str, Any]:
    return {
        "key": e.key, "eventId": e.event_id, "eventType": e.event_type, "eventSource": e.event_source,
        "description": e.description, "duration": e.duration, "resources": list(e.resources),
        "hasResources": e.has_resources, "infoStamp": _stamp(e.info_stamp), "notBefore": e.not_before,
        "notBeforeStamp": _stamp(e.not_before_stamp), "earliestNotBefore": e.earliest_not_before,
        "reports": dict(sorted(e.reports.items())),
        "rank": e.rank, "startedAt": e.started_at, "completedAt": e.completed_at,
        "finished": dict(sorted(e.finished.items())), "endedAt": e.ended_at,
        "lastReport": _num(e.last_report), "scheduledAt": e.scheduled_at,
        "echoes": {k: list(v) for k, v in sorted(e.echoes.items())},
        "prepared": dict(sorted(e.prepared.items())),
        "prepareFailed": {k: list(v) for k, v in sorted(e.prepare_failed.items())},
        "rejections": {k: list(v) for k, v in sorted(e.rejections.items())},
        "types": list(e.types), "doubted": e.doubted, "recovered": dict(sorted(e.recovered.items())),
    }


_TAKEN = attrgetter(*Vm.__slots__)  # a VM's values: what it is then, whatever the fold does after


@dataclass(frozen=True)
class Records:
    """A part's records as the fold held them when taken: ``items`` that the fold no longer changes,
    each beginning with its key, made into the records of lines (tag, value) by ``write`` when
    written, in key order."""

    items: list[tuple[Any, ...]]
    write: Callable[[list[tuple[Any, ...]]], Iterator[tuple[str, Any]]]


def pieces(state: FleetState) -> list[bytes | Records]:
    """The fold's lines as they are now (module docstring), taken cheaply on the service's loop:
    the small parts encoded, the large ones copied (a VM's values as a tuple, an event's record made
    anew), so that ``written`` makes them into lines on another thread while the fold goes on."""
    azure = state.azure
    held, left_out = held_for_snapshot(state)
    return [
        _line("format", FORMAT), _line("azure", azure_state.dump_rest(azure)),
        Records([(k, azure_state.vm_data(v)) for k, v in azure.vms.items()], _each("azure-vms")),
        Records([(k, azure_state.event_data(e)) for k, e in azure.events.items()], _each("azure-events")),
        Records(list(map(_TAKEN, state.vms.values())), vm_records),  # a VM's key is its first value
        Records([(k, event_data(e)) for k, e in state.events.items()], _each("events")),
        *_batches("groups", iter(state.groups.components())), _line("gone", dict(sorted(state.gone.items()))),
        Records([(k, [k, identity_data(i)]) for k, i in state.identities.items()], _each("identities")),
        _line("rekeyed", rekeyed_data(state)), _line("conflicts", conflicts_data(state)),
        *_batches("waiting", iter(held.items())), _line("waitingLeftOut", left_out),
        Records([(k, [k, confirmed_data(state, k)]) for k in state.confirmed], _each("confirmed")),
        Records([(k, [d.id, d.kind, d.time, d.data]) for k, d in state.decisions.items()],
                _each("decisions"))]


def _each(tag: str) -> Callable[[list[tuple[Any, ...]]], Iterator[tuple[str, Any]]]:
    """Records of ``tag`` whose items are (key, value): the values in batches of ``BATCH``."""
    def write(items: list[tuple[Any, ...]]) -> Iterator[tuple[str, Any]]:
        for start in range(0, len(items), BATCH):
            yield tag, [item[1] for item in items[start:start + BATCH]]
    return write


def _key(item: tuple[Any, ...]) -> Any:
    return item[0]


def lines(state: FleetState) -> Iterator[bytes]:
    """The fold as lines of JSON (module docstring), each ending in a newline, in a canonical order:
    records in batches of ``BATCH``, VMs as columns (fold/snapshot/columns.py)."""
    return written(pieces(state))


def written(made: list[bytes | Records]) -> Iterator[bytes]:
    """The lines of ``pieces`` (which hold nothing the fold changes: any thread may write them)."""
    for piece in made:
        if isinstance(piece, bytes):
            yield piece
            continue
        for tag, value in piece.write(sorted(piece.items, key=_key)):
            yield _line(tag, value)


def _batches(tag: str, records: Iterator[Any]) -> Iterator[bytes]:
    while batch := list(islice(records, BATCH)):
        yield _line(tag, batch)


def _line(tag: str, value: Any) -> bytes:
    return encode([tag, value]) + b"\n"


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_SORTED_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=str, sort_keys=True)


def encode(value: Any, sort: bool = False) -> bytes:
    """``value`` as compact JSON in UTF-8 (``sort``: members of objects sorted and anything else
    written as text, a canonical form for view/digest.py): by orjson, five to eight times the
    standard library's speed here; by the standard library for what orjson does not take (an
    integer beyond 64 bits, which a held report may carry), so equal values give equal bytes."""
    try:
        if sort:
            return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return (_SORTED_ENCODER if sort else _ENCODER).encode(value).encode("utf-8")


