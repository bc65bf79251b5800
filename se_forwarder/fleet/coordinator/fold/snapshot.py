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
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ....errors import StateError
from . import azure_state, inventory
from .caps import FOLDED
from .decisions import decision
from .identities import HELD_LEFT_OUT, held_for_snapshot
from .reports import track
from .state import (
    COMPLETED,
    NO_STAMP,
    Conflict,
    DecisionRecord,
    EventRecord,
    FleetState,
    Identity,
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
        "events": [_event(state.events[k]) for k in sorted(state.events)],
        "groups": state.groups.components(),
        "decisions": [[d.id, d.kind, d.time, d.data] for _, d in sorted(state.decisions.items())],
        "gone": dict(sorted(state.gone.items())),
        "identities": {k: _identity(i) for k, i in sorted(state.identities.items())},
        "rekeyed": [[r.vm, r.old, r.new, r.time] for _, v in sorted(state.rekeyed.items()) for r in v],
        "conflicts": {k: {"document": c.document, "createdOn": c.created_on, "since": c.since,
                          "candidates": [_identity(i) for i in c.candidates]}
                      for k, c in sorted(state.conflicts.items())},
        **dict(zip(("waiting", "waitingLeftOut"), held_for_snapshot(state), strict=True)),
        "azure": azure_state.dump(state.azure),
        "confirmed": {k: [inventory.as_data(p), *state.confirmed_at[k]]
                      for k, p in sorted(state.confirmed.items())},
    }


def digest(state: FleetState) -> str:
    """The SHA-256 of the snapshot's canonical JSON: equal on instances whose folds are equal."""
    text = json.dumps(snapshot(state), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _identity_of(i: dict[str, Any]) -> Identity:
    return Identity(str(i["publicKey"]), str(i["keyid"]), float(i["createdOn"]), float(i["expiresOn"]),
                    str(i["document"]), str(i["subscription"]), float(i["registeredAt"]))


def _identity(i: Identity) -> dict[str, Any]:
    return {"publicKey": i.public_key, "keyid": i.keyid, "createdOn": i.created_on, "expiresOn": i.expires_on,
            "document": i.document, "subscription": i.subscription, "registeredAt": i.registered_at}


def _vm(vm: Vm) -> dict[str, Any]:
    return {
        "key": vm.key, "name": vm.name, "vmId": vm.vm_id, "complete": vm.complete,
        "resourceId": vm.resource_id, "subscription": vm.subscription, "resourceGroup": vm.resource_group,
        "location": vm.location, "zone": vm.zone, "scaleSet": vm.scale_set, "faultDomain": vm.fault_domain,
        "updateDomain": vm.update_domain, "placementGroup": vm.placement_group,
        "tags": dict(sorted(vm.tags.items())),
        "topologyStamp": _stamp(vm.topology_stamp), "lastHeartbeat": vm.last_heartbeat,
        "lastHeard": _num(vm.last_heard), "agentVersion": vm.agent_version,
        "listed": list(vm.listed), "polled": vm.polled, "health": vm.health,
        "healthReason": vm.health_reason,
        "placed": None if vm.placed is None else [inventory.as_data(vm.placed), *vm.placed_stamp],
        "claims": sorted([name, rid, t] for (name, rid), t in vm.claims.items()),
    }


def _event(e: EventRecord) -> dict[str, Any]:
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
    try:
        return _restore(data)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise StateError(f"coordinator snapshot: damaged ({type(exc).__name__}: {str(exc)[:120]})") from None


def _restore(data: dict[str, Any]) -> FleetState:
    state = FleetState()
    state.azure = azure_state.load(data.get("azure"))  # absent from snapshots written before it was kept
    for item in data["vms"]:
        vm = Vm(
            key=str(item["key"]), name=item["name"], vm_id=item["vmId"], complete=bool(item["complete"]),
            resource_id=item["resourceId"], subscription=item["subscription"],
            resource_group=item["resourceGroup"], location=item["location"], zone=item["zone"],
            scale_set=item["scaleSet"], fault_domain=item["faultDomain"], update_domain=item["updateDomain"],
            placement_group=item["placementGroup"], tags=dict(item["tags"]),
            topology_stamp=_unstamp(item["topologyStamp"]), last_heartbeat=item["lastHeartbeat"],
            last_heard=float("-inf") if item["lastHeard"] is None else float(item["lastHeard"]),
            agent_version=item["agentVersion"], listed=tuple(item.get("listed", ())),
            polled=item.get("polled"), health=str(item.get("health") or ""),
            health_reason=str(item.get("healthReason") or ""),
            claims={(str(n), str(r)): float(t) for n, r, t in item.get("claims", ())},
        )
        if item.get("placed"):
            where, moment, ident = item["placed"]
            vm.placed, vm.placed_stamp = inventory.from_data(where), (float(moment), str(ident))
        elif "placed" not in item and vm.topology_stamp != NO_STAMP:  # written before the inventory was kept
            vm.placed, vm.placed_stamp = inventory.placement(vm), vm.topology_stamp
        state.vms[vm.key] = vm
    for item in data["events"]:
        record = EventRecord(
            key=str(item["key"]), event_id=item["eventId"], event_type=item["eventType"],
            event_source=item["eventSource"], description=item["description"], duration=item["duration"],
            resources=tuple(item["resources"]), has_resources=bool(item["hasResources"]),
            info_stamp=_unstamp(item["infoStamp"]), not_before=item["notBefore"],
            not_before_stamp=_unstamp(item["notBeforeStamp"]), reports=dict(item["reports"]),
            earliest_not_before=item.get("earliestNotBefore", item["notBefore"]),
            rank=int(item["rank"]), started_at=item["startedAt"], completed_at=item["completedAt"],
            finished=dict(item["finished"]), ended_at=item["endedAt"],
            last_report=float("-inf") if item["lastReport"] is None else float(item["lastReport"]),
            scheduled_at=item.get("scheduledAt"),  # absent from snapshots written before it was kept
            echoes={k: (float(v[0]), str(v[1])) for k, v in item["echoes"].items()},
            prepared=dict(item["prepared"]),
            prepare_failed={k: (float(v[0]), str(v[1])) for k, v in item["prepareFailed"].items()},
            rejections={k: (str(v[0]), str(v[1])) for k, v in item["rejections"].items()},
            types=tuple(item.get("types") or ((item["eventType"],) if item["eventType"] else ())),
            doubted=item.get("doubted"),
            recovered={str(k): float(v) for k, v in (item.get("recovered") or {}).items()},
        )
        state.events[record.key] = record
        track(state, record)
        if record.rank == COMPLETED:
            state.settling.add(record.key)
            if record.types == ("Terminate",):
                state.terminated[record.key] = (record.completed_at, record.resources)
    for members in data["groups"]:
        for other in members[1:]:
            state.groups.union(members[0], other)
    state.gone = {str(k): float(v) for k, v in data["gone"].items()}
    for key, i in data.get("identities", {}).items():
        state.identities[str(key)] = _identity_of(i)
    for v, o, n, t in data.get("rekeyed", []):
        state.rekeyed.setdefault(str(v), []).append(Rekey(str(v), str(o), str(n), float(t)))
    for key, c in data.get("conflicts", {}).items():
        candidates = tuple(_identity_of(i) for i in c["candidates"])
        state.conflicts[str(key)] = Conflict(str(c["document"]), float(c["createdOn"]), candidates,
                                             float(c["since"]))
    state.waiting = {str(k): [(float(t), dict(e)) for t, e in v] for k, v in data.get("waiting", {}).items()}
    state.cache[HELD_LEFT_OUT] = int(data.get("waitingLeftOut", 0))  # gate.resume counts them
    for key, (where, moment, ident) in data.get("confirmed", {}).items():
        state.confirmed[str(key)], state.confirmed_at[str(key)] = inventory.from_data(where), (float(moment),
                                                                                            str(ident))
    for ident, kind, moment, payload in data["decisions"]:
        made = DecisionRecord(str(ident), str(kind), float(moment), dict(payload))
        if decision(state, made, chained=False) != FOLDED:
            raise ValueError(f"decision {str(ident)[:80]} does not fold")
    return state
