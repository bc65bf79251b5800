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

``lines(state)`` is the same fold as lines of JSON, one record each (``["vm", {...}]``,
``["event", {...}]``, ``["decision", [...]]``, ...) in batches, and ``restore_lines`` reads them back
one at a time: how the snapshot blob holds it (ha/snapshot_blob.py), so loading 100,000 VMs never
holds the fold twice. The records view/digest.py keeps encoded (``KEPT``) are written as it keeps
them (``pieces``): a save copies references to them on the service's loop and ``written`` joins
them into lines on another thread. Both forms restore through one ``Restorer``: equal folds.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from ....errors import StateError
from . import azure_state, inventory
from .caps import FOLDED
from .decisions import decision
from .identities import (
    HELD_LEFT_OUT,
    conflicts_data,
    held_for_snapshot,
    identity_data,
    identity_of,
    rekeyed_data,
)
from .reports import track
from .state import (
    COMPLETED,
    NO_STAMP,
    NO_TAGS,
    Conflict,
    DecisionRecord,
    EventRecord,
    FleetState,
    Placement,
    Rekey,
    Stamp,
    Vm,
)

FORMAT = 1


def _num(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


def _stamp(stamp: Stamp) -> list[Any] | None:
    return None if stamp == NO_STAMP else [stamp[0], stamp[1]]


def _unstamp(value: Any) -> Stamp:
    if value is None:
        return NO_STAMP
    return (float(value[0]), str(value[1]))


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


VM_COLUMNS = ("key", "name", "vmId", "complete", "resourceId", "subscription", "resourceGroup", "location",
              "zone", "scaleSet", "faultDomain", "updateDomain", "placementGroup", "tags", "topologyStamp",
              "lastHeartbeat", "lastHeard", "agentVersion", "listed", "polled", "health", "healthReason",
              "placed", "claims")


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
    return [[name, rid, t] for name, rid, t in claims]  # kept sorted


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


def restore(data: Any) -> FleetState:
    """The state a snapshot describes; StateError when ``data`` is not one."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StateError(f"coordinator snapshot: not a snapshot of format {FORMAT}")
    found = Restorer()
    return _restored(found, lambda: [  # members added since the format was made are optional
        (found.azure, [data.get("azure")]), (found.vm, data["vms"]), (found.event, data["events"]),
        (found.groups, [data["groups"]]), (found.gone, [data["gone"]]),
        (found.identity, data.get("identities", {}).items()), (found.rekeyed, [data.get("rekeyed", [])]),
        (found.conflicts, [data.get("conflicts", {})]), (found.left_out, [data.get("waitingLeftOut", 0)]),
        (found.waiting, data.get("waiting", {}).items()),
        (found.confirmed, data.get("confirmed", {}).items()), (found.decision, data["decisions"])])


def _restored(found: Restorer, records: Callable[[], Iterable[tuple[Callable[[Any], None], Iterable[Any]]]],
              ) -> FleetState:
    try:
        for each, items in records():
            for item in items:
                each(item)
        return found.done()
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise StateError(f"coordinator snapshot: damaged ({type(exc).__name__}: {str(exc)[:120]})") from None


BATCH = 1000  # records a line holds: lines of a few hundred kilobytes, encoded and parsed in one call
# The parts whose records view/digest.py keeps encoded exactly as these lines write them, and their tags.
KEPT = {"azure_events": "azure-events", "vms": "vms", "events": "events", "identities": "identities",
        "confirmed": "confirmed", "decisions": "decisions"}


@dataclass(frozen=True)
class Records:
    """A part's records, encoded, by key: written in batches of ``BATCH`` in the order of their keys."""

    tag: str
    texts: dict[str, bytes]


def kept_records(state: FleetState) -> dict[str, tuple[Iterable[str], Callable[[str], Any]]]:
    """Each part of ``KEPT``: its keys, and its record of a key as written (None: no such record)."""
    azure = state.azure

    def get(records: dict[str, Any], form: Callable[[Any], Any]) -> Callable[[str], Any]:
        return lambda key: None if (found := records.get(key)) is None else form(found)

    return {
        "azure_events": (azure.events, get(azure.events, azure_state.event_data)),
        "vms": (state.vms, get(state.vms, vm_row)), "events": (state.events, get(state.events, event_data)),
        "identities": (state.identities, lambda k: None if (i := state.identities.get(k)) is None
                       else [k, identity_data(i)]),
        "confirmed": (state.confirmed,
                      lambda k: [k, confirmed_data(state, k)] if k in state.confirmed else None),
        "decisions": (state.decisions, get(state.decisions, lambda d: [d.id, d.kind, d.time, d.data]))}


def pieces(state: FleetState, kept: dict[str, dict[str, bytes]] | None = None) -> list[bytes | Records]:
    """The fold's lines as they are now (module docstring): ``written`` makes them, also on another
    thread while the fold goes on. ``kept``: the records of the parts of ``KEPT`` as view/digest.py
    keeps them, up to date (copied: the digest replaces its texts as the fold goes on); without it
    they are encoded now."""
    made = kept_records(state)

    def records(part: str) -> Records:
        if kept is not None and part in kept:
            return Records(KEPT[part], dict(kept[part]))
        keys, record = made[part]
        return Records(KEPT[part], {k: encode(record(k), sort=True) for k in keys})

    azure = state.azure
    held, left_out = held_for_snapshot(state)
    return [
        _line("format", FORMAT), _line("columns", {"vm": VM_COLUMNS}),
        _line("azure", azure_state.dump_rest(azure)),
        *_batches("azure-vms", (azure_state.vm_data(azure.vms[k]) for k in sorted(azure.vms))),
        records("azure_events"), records("vms"), records("events"),
        *_batches("groups", iter(state.groups.components())), _line("gone", dict(sorted(state.gone.items()))),
        records("identities"), _line("rekeyed", rekeyed_data(state)),
        _line("conflicts", conflicts_data(state)),
        *_batches("waiting", iter(held.items())), _line("waitingLeftOut", left_out),
        records("confirmed"), records("decisions")]


def lines(state: FleetState, kept: dict[str, dict[str, bytes]] | None = None) -> Iterator[bytes]:
    """The fold as lines of JSON (module docstring), each ending in a newline, in a canonical order:
    records in batches of ``BATCH``, a VM's values in the order of the ``columns`` record."""
    return written(pieces(state, kept))


def written(made: list[bytes | Records]) -> Iterator[bytes]:
    """The lines of ``pieces`` (which hold no reference to the fold: any thread may write them)."""
    for piece in made:
        if isinstance(piece, bytes):
            yield piece
            continue
        head, texts, keys = b"[" + encode(piece.tag) + b",[", piece.texts, sorted(piece.texts)
        for start in range(0, len(keys), BATCH):
            yield b"".join((head, b",".join([texts[k] for k in keys[start:start + BATCH]]), b"]]\n"))


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


def restore_lines(source: Iterable[bytes]) -> FleetState:
    """The state ``lines`` wrote; StateError when they are not such lines."""
    found = Restorer()
    each: dict[str, Callable[[Any], None]] = {
        "azure-vms": found.azure_vm, "azure-events": found.azure_event, "vms": found.vm_row,
        "events": found.event, "identities": found.identity, "waiting": found.waiting,
        "confirmed": found.confirmed, "decisions": found.decision}
    whole: dict[str, Callable[[Any], None]] = {
        "columns": found.columns, "azure": found.azure_rest, "groups": found.groups, "gone": found.gone,
        "rekeyed": found.rekeyed, "conflicts": found.conflicts, "waitingLeftOut": found.left_out}

    def records() -> Iterator[tuple[Callable[[Any], None], Iterable[Any]]]:
        first = True
        for raw in source:
            tag, value = json.loads(raw)
            if first and (tag != "format" or value != FORMAT):
                raise StateError(f"coordinator snapshot: not a snapshot of format {FORMAT}")
            if not first:
                yield (each[tag], value) if tag in each else (whole[tag], [value])
            first = False
        if first:
            raise ValueError("no records")

    return _restored(found, records)


class Restorer:
    """A fold made again from a snapshot's records, one at a time (either form). Strings many
    records repeat (a region, a resource group, a VM's key in every event it reported) are kept once."""

    def __init__(self) -> None:
        self.state = FleetState()
        self.keys: dict[str, str] = {}  # every VM key once (events name their reporters by key)
        self.places: dict[Placement, Placement] = {}  # each placement once (VMs of a group share theirs)
        self.made: list[DecisionRecord] = []
        self.vm_columns: tuple[str, ...] = VM_COLUMNS

    def key(self, value: Any) -> str:
        text = str(value)
        return self.keys.setdefault(text, text)

    def azure(self, data: Any) -> None:
        self.state.azure = azure_state.load(data)

    def columns(self, data: dict[str, Any]) -> None:
        self.vm_columns = tuple(str(c) for c in data["vm"])

    def azure_rest(self, data: dict[str, Any]) -> None:
        azure_state.load_rest(self.state.azure, data)

    def azure_vm(self, item: dict[str, Any]) -> None:
        azure_state.load_vm(self.state.azure, item)

    def azure_event(self, item: dict[str, Any]) -> None:
        azure_state.load_event(self.state.azure, item)

    def vm_row(self, row: list[Any]) -> None:
        self.vm(dict(zip(self.vm_columns, row, strict=True)))

    def vm(self, item: dict[str, Any]) -> None:
        text = sys.intern
        vm = Vm(
            key=self.key(item["key"]), name=item["name"], vm_id=item["vmId"], complete=bool(item["complete"]),
            resource_id=item["resourceId"], subscription=text(item["subscription"]),
            resource_group=text(item["resourceGroup"]), location=text(item["location"]),
            zone=text(item["zone"]),
            scale_set=text(item["scaleSet"]), fault_domain=text(item["faultDomain"]),
            update_domain=text(item["updateDomain"]), placement_group=text(item["placementGroup"]),
            tags={text(k): text(v) for k, v in item["tags"].items()} or NO_TAGS,
            topology_stamp=_unstamp(item["topologyStamp"]), last_heartbeat=item["lastHeartbeat"],
            last_heard=float("-inf") if item["lastHeard"] is None else float(item["lastHeard"]),
            agent_version=text(item["agentVersion"]), listed=tuple(text(e) for e in item.get("listed", ())),
            polled=item.get("polled"), health=text(str(item.get("health") or "")),
            health_reason=str(item.get("healthReason") or ""),
            claims=tuple(sorted((text(str(n)), str(r), float(t)) for n, r, t in item.get("claims", ()))),
        )
        if item.get("placed"):
            where, moment, ident = item["placed"]
            place = inventory.from_data(where)
            vm.placed, vm.placed_stamp = self.places.setdefault(place, place), (float(moment), str(ident))
        elif "placed" not in item and vm.topology_stamp != NO_STAMP:  # written before the inventory was kept
            vm.placed, vm.placed_stamp = inventory.placement(vm), vm.topology_stamp
        self.state.vms[vm.key] = vm

    def event(self, item: dict[str, Any]) -> None:
        key = self.key
        record = EventRecord(
            key=str(item["key"]), event_id=item["eventId"], event_type=item["eventType"],
            event_source=item["eventSource"], description=item["description"], duration=item["duration"],
            resources=tuple(item["resources"]), has_resources=bool(item["hasResources"]),
            info_stamp=_unstamp(item["infoStamp"]), not_before=item["notBefore"],
            not_before_stamp=_unstamp(item["notBeforeStamp"]),
            reports={key(k): int(v) for k, v in item["reports"].items()},
            earliest_not_before=item.get("earliestNotBefore", item["notBefore"]),
            rank=int(item["rank"]), started_at=item["startedAt"], completed_at=item["completedAt"],
            finished={key(k): v for k, v in item["finished"].items()}, ended_at=item["endedAt"],
            last_report=float("-inf") if item["lastReport"] is None else float(item["lastReport"]),
            scheduled_at=item.get("scheduledAt"),  # absent from snapshots written before it was kept
            echoes={key(k): (float(v[0]), str(v[1])) for k, v in item["echoes"].items()},
            prepared={key(k): v for k, v in item["prepared"].items()},
            prepare_failed={key(k): (float(v[0]), str(v[1])) for k, v in item["prepareFailed"].items()},
            rejections={k: (str(v[0]), str(v[1])) for k, v in item["rejections"].items()},
            types=tuple(item.get("types") or ((item["eventType"],) if item["eventType"] else ())),
            doubted=item.get("doubted"),
            recovered={str(k): float(v) for k, v in (item.get("recovered") or {}).items()},
        )
        self.state.events[record.key] = record

    def groups(self, components: list[list[str]]) -> None:
        for members in components:
            first = self.key(members[0])
            for other in members[1:]:
                self.state.groups.union(first, self.key(other))

    def gone(self, data: dict[str, Any]) -> None:
        self.state.gone = {str(k): float(v) for k, v in data.items()}

    def identity(self, pair: list[Any]) -> None:
        key, i = pair
        self.state.identities[self.key(key)] = identity_of(i)

    def rekeyed(self, items: list[list[Any]]) -> None:
        for v, o, n, t in items:
            vm = self.key(v)
            self.state.rekeyed.setdefault(vm, []).append(Rekey(vm, str(o), str(n), float(t)))

    def conflicts(self, data: dict[str, Any]) -> None:
        for key, c in data.items():
            candidates = tuple(identity_of(i) for i in c["candidates"])
            self.state.conflicts[self.key(key)] = Conflict(str(c["document"]), float(c["createdOn"]),
                                                           candidates, float(c["since"]))

    def left_out(self, count: Any) -> None:
        self.state.cache[HELD_LEFT_OUT] = int(count)  # gate.resume counts them

    def waiting(self, pair: list[Any]) -> None:
        key, items = pair
        self.state.waiting[self.key(key)] = [(float(t), dict(e)) for t, e in items]

    def confirmed(self, pair: list[Any]) -> None:
        key, (where, moment, ident) = pair
        self.state.confirmed[self.key(key)] = inventory.from_data(where)
        self.state.confirmed_at[self.key(key)] = (float(moment), str(ident))

    def decision(self, item: list[Any]) -> None:
        ident, kind, moment, payload = item
        self.made.append(DecisionRecord(str(ident), str(kind), float(moment), dict(payload)))

    def done(self) -> FleetState:
        """The state, once every record is in: events tracked, decisions folded again."""
        state = self.state
        for record in state.events.values():
            track(state, record)
            if record.rank == COMPLETED:
                state.settling.add(record.key)
                if record.types == ("Terminate",):
                    state.terminated[record.key] = (record.completed_at, record.resources)
        for made in self.made:
            if decision(state, made, chained=False) != FOLDED:
                raise ValueError(f"decision {made.id[:80]} does not fold")
        return state
