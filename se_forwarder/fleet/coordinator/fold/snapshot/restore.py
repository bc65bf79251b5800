"""The fold read back from a snapshot (either form: fold/snapshot), one record at a time."""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .....errors import StateError
from .. import azure_state, inventory
from ..caps import FOLDED
from ..decisions import decision
from ..identities import HELD_LEFT_OUT, identity_of
from ..reports import track
from ..state import (
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
from .columns import shared_of, vms_of

FORMAT = 2  # 2: VMs as columns (fold/snapshot/columns.py); 1: VMs as rows, still read
READ = (1, FORMAT)
_NOT_READ = f"coordinator snapshot: not a snapshot of format {' or '.join(map(str, READ))}"


def _unstamp(value: Any) -> Stamp:
    if value is None:
        return NO_STAMP
    return (float(value[0]), str(value[1]))


_ABSENT = object()  # a VM's ``placed`` in a snapshot written before the inventory was kept
_OPTIONAL = {"listed": (), "polled": None, "health": "", "healthReason": "", "placed": _ABSENT, "claims": ()}
VM_COLUMNS = ("key", "name", "vmId", "complete", "resourceId", "subscription", "resourceGroup", "location",
              "zone", "scaleSet", "faultDomain", "updateDomain", "placementGroup", "tags", "topologyStamp",
              "lastHeartbeat", "lastHeard", "agentVersion", "listed", "polled", "health", "healthReason",
              "placed", "claims")


def restore(data: Any) -> FleetState:
    """The state a snapshot describes; StateError when ``data`` is not one."""
    if not isinstance(data, dict) or data.get("format") not in READ:
        raise StateError(_NOT_READ)
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
    """The fold ``records`` make, with the collector paused: 100,000 VMs' records are millions of
    objects, and the passes their allocations trigger walked them again and again (more than half
    of a load's CPU); the records hold no cycle, and whoever holds the fold freezes it after
    (ha/keeper.py), which walks them once."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        for each, items in records():
            for item in items:
                each(item)
        return found.done()
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise StateError(f"coordinator snapshot: damaged ({type(exc).__name__}: {str(exc)[:120]})") from None
    finally:
        if enabled:
            gc.enable()


def restore_lines(source: Iterable[bytes]) -> FleetState:
    """The state ``lines`` wrote; StateError when they are not such lines."""
    found = Restorer()
    each: dict[str, Callable[[Any], None]] = {
        "azure-vms": found.azure_vm, "azure-events": found.azure_event, "vms": found.vm_row,
        "events": found.event, "identities": found.identity, "waiting": found.waiting,
        "confirmed": found.confirmed, "decisions": found.decision}
    whole: dict[str, Callable[[Any], None]] = {
        "columns": found.columns, "azure": found.azure_rest, "groups": found.groups, "gone": found.gone,
        "rekeyed": found.rekeyed, "conflicts": found.conflicts, "waitingLeftOut": found.left_out,
        "vm-shared": found.vm_shared, "vm-places": found.vm_places, "vm-columns": found.vm_batch}

    def records() -> Iterator[tuple[Callable[[Any], None], Iterable[Any]]]:
        first = True
        for raw in source:
            tag, value = json.loads(raw)
            if first and (tag != "format" or value not in READ):
                raise StateError(_NOT_READ)
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
        self.bare: dict[tuple[Any, ...], Placement] = {}  # placements without tags, by their values read
        self.shared: dict[tuple[Any, ...], tuple[str, ...]] = {}  # the values VMs share, kept once
        self.made: list[DecisionRecord] = []
        self.vm_columns: tuple[str, ...] = VM_COLUMNS  # the order of a VM's values in rows (format 1)
        self.shared_table: list[tuple[str, ...]] = []  # format 2's tables (fold/snapshot/columns.py)
        self.places_table: list[Placement] = []

    def key(self, value: Any) -> str:
        found = self.keys.get(value) if isinstance(value, str) else None
        if found is None:
            text = str(value)
            found = self.keys.setdefault(text, text)
        return found

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

    def vm_shared(self, rows: list[Any]) -> None:
        self.shared_table += shared_of(rows)

    def vm_places(self, rows: list[Any]) -> None:
        for at in rows:
            place = inventory.from_data(at)
            self.places_table.append(self.places.setdefault(place, place))

    def vm_batch(self, cols: dict[str, Any]) -> None:
        vms = self.state.vms
        for vm in vms_of(cols, self.shared_table, self.places_table, self.keys):
            vms[vm.key] = vm

    def vm_row(self, row: list[Any]) -> None:
        if self.vm_columns == VM_COLUMNS:
            self._vm(row)
        else:  # written by another version: read by name
            self.vm(dict(zip(self.vm_columns, row, strict=True)))

    def vm(self, item: dict[str, Any]) -> None:
        self._vm([item[c] if c not in _OPTIONAL else item.get(c, _OPTIONAL[c]) for c in VM_COLUMNS])

    def _vm(self, row: list[Any]) -> None:
        """A VM's record from its values in the order of ``VM_COLUMNS``: the strings VMs share (where
        they are, their agent's version) kept once, its claim's name its own name."""
        (key, name, vm_id, complete, resource_id, *at, tags, stamp, heartbeat, heard, version, listed,
         polled, health, reason, placed, claims) = row
        shared = self.shared.get(values := (*at, version, str(health or ""))) or self.share(values)
        key, text = self.key(key), sys.intern
        if len(claims) == 1 and claims[0][0] == name:  # almost every VM's: its own name, once
            claims = ((name, str(claims[0][1]), float(claims[0][2])),)
        else:
            claims = tuple(sorted((text(str(n)), str(r), float(t)) for n, r, t in claims))
        sub, group, location, zone, scale_set, fault, update, placement_group, version, health = shared
        vm = Vm(key, name, key if vm_id == key else vm_id, bool(complete), resource_id, sub, group, location,
                zone, scale_set, fault, update, placement_group,
                {text(k): text(v) for k, v in tags.items()} if tags else NO_TAGS, _unstamp(stamp), heartbeat,
                float("-inf") if heard is None else float(heard), version,
                tuple(map(text, listed)) if listed else (), polled, health, str(reason or ""), claims=claims)
        if placed is _ABSENT:  # written before the inventory was kept
            if vm.topology_stamp != NO_STAMP:
                vm.placed, vm.placed_stamp = inventory.placement(vm), vm.topology_stamp
        elif placed:
            at, moment, ident = placed
            vm.placed, vm.placed_stamp = self.placement(at), (float(moment), str(ident))
        self.state.vms[key] = vm

    def share(self, values: tuple[Any, ...]) -> tuple[str, ...]:
        """Where a VM is, its agent's version and health (``_vm``), each string kept once."""
        if not all(isinstance(v, str) for v in values):
            raise TypeError("a VM's placement, agent version or health is not text")
        texts = tuple(map(sys.intern, values))
        return self.shared.setdefault(texts, texts)

    def placement(self, at: Any) -> Placement:
        """A placement read (its tuple shared by every VM placed there)."""
        bare = tuple(at[:7]) if isinstance(at, list) and len(at) == 8 and at[7] == [] else None
        found = self.bare.get(bare) if bare is not None else None
        if found is None:
            place = inventory.from_data(at)
            found = self.places.setdefault(place, place)
            if bare is not None:
                self.bare[bare] = found
        return found

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
        key, groups = self.key, self.state.groups
        for members in components:
            groups.add([key(m) for m in members])

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
