"""The VMs of a snapshot as columns (format 2): written from the values a save took, read back into
records with few steps a VM.

A VM's record has 25 fields, most of them shared with many other VMs (where it is, its agent's
version) or said again in another field (its vmId is its key, its resourceId the one its name and
resource group make, its claim its own name and resourceId). So the VMs are written as:

- ``vm-shared`` lines: the distinct ``SHARED`` values of VMs (subscription, resource group, location,
  zone, scale set, fault and update domain, placement group, agent version, health), in batches;
- ``vm-places`` lines: the distinct placements VMs were first placed at (fold/inventory.py), in
  batches;
- ``vm-columns`` lines: ``BATCH`` VMs each, in key order, as an object of ``COLUMNS``, one list
  each: ``at`` and ``placed`` are positions in those tables; ``vmId`` and ``resourceId`` are null
  where they are what the key, or the VM's subscription, resource group and name, make; ``claims``
  is the time alone where the VM claims only its own name and resourceId.

Each column is then made by one comprehension (or none), and the records by one ``map``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

from .. import inventory
from ..inventory import Claim
from ..state import NO_STAMP, NO_TAGS, Placement, Vm

BATCH = 1000  # records a line holds: lines of a few hundred kilobytes, encoded and parsed in one call
SHARED = ("subscription", "resource_group", "location", "zone", "scale_set", "fault_domain", "update_domain",
          "placement_group", "agent_version", "health")
COLUMNS = ("key", "name", "vmId", "complete", "resourceId", "at", "tags", "stampTime", "stampId",
           "lastHeartbeat", "lastHeard", "listed", "polled", "healthReason", "placed", "placedTime",
           "placedId", "claims")
UNPLACED = (float("inf"), "")  # Vm.placed_stamp of a VM no verified report placed
NEVER = float("-inf")  # Vm.last_heard of a VM never heard from
_shared = itemgetter(*map(Vm.__slots__.index, SHARED))  # of a VM's values taken (fold/snapshot.pieces)
_PLACED = Vm.__slots__.index("placed")


def _resource_id(sub: str, group: str, name: str) -> str:
    """The resourceId a VM of that name has in that resource group (written as null)."""
    return f"/subscriptions/{sub}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines/{name}"


def vm_records(items: list[tuple[Any, ...]]) -> Iterator[tuple[str, Any]]:
    """The records (tag, value) of VMs taken as their values in the order of ``Vm.__slots__``,
    sorted by key: the tables first, then the columns (module docstring)."""
    shared: dict[tuple[Any, ...], int] = {}
    places: dict[Placement, int] = {}
    for values in items:
        shared.setdefault(_shared(values), len(shared))
        if values[_PLACED] is not None:
            places.setdefault(values[_PLACED], len(places))
    yield from _batches("vm-shared", [list(s) for s in shared])
    yield from _batches("vm-places", [inventory.as_data(p) for p in places])
    for start in range(0, len(items), BATCH):
        yield "vm-columns", _columns(items[start:start + BATCH], shared, places)


def _batches(tag: str, values: list[Any]) -> Iterator[tuple[str, Any]]:
    for start in range(0, len(values), BATCH):
        yield tag, values[start:start + BATCH]


def _columns(batch: list[tuple[Any, ...]], shared: dict[tuple[Any, ...], int],
             places: dict[Placement, int]) -> dict[str, Any]:
    (keys, names, vm_ids, complete, rids, subs, groups, *_where, tags, stamps, heartbeats, heard, _version,
     listed, polled, _health, reasons, placed, placed_stamps, claims, _seen) = zip(*batch, strict=True)
    return {
        "key": keys, "name": names,
        "vmId": [None if v == k else v for k, v in zip(keys, vm_ids, strict=True)],
        "complete": complete,
        "resourceId": [None if r == _resource_id(s, g, n) else r
                       for r, s, g, n in zip(rids, subs, groups, names, strict=True)],
        "at": [shared[_shared(values)] for values in batch],
        "tags": [dict(sorted(t.items())) if t else {} for t in tags],
        "stampTime": [None if s == NO_STAMP else s[0] for s in stamps],
        "stampId": [s[1] for s in stamps],
        "lastHeartbeat": heartbeats,
        "lastHeard": [None if h is None or math.isinf(h) else h for h in heard],
        "listed": listed, "polled": polled, "healthReason": reasons,
        "placed": [None if p is None else places[p] for p in placed],
        "placedTime": [None if p is None else s[0] for p, s in zip(placed, placed_stamps, strict=True)],
        "placedId": [None if p is None else s[1] for p, s in zip(placed, placed_stamps, strict=True)],
        "claims": [_claims(c, n, r) for c, n, r in zip(claims, names, rids, strict=True)],
    }


def _claims(claims: tuple[Claim, ...], name: str, rid: str) -> Any:
    """A VM's claims as written: the time alone where it claims only its own name and resourceId,
    else each with its resourceId in lower case (fold/inventory.Claim)."""
    if len(claims) == 1 and claims[0][0] == name:
        own = claims[0][1]
        if own is rid or own.lower() == rid.lower():
            return claims[0][2]
    return tuple(sorted((n, r.lower(), t) for n, r, t in claims))


def shared_of(rows: list[Any]) -> Iterator[tuple[str, ...]]:
    """A ``vm-shared`` line's values, each string kept once."""
    for row in rows:
        if len(row) != len(SHARED) or not all(isinstance(v, str) for v in row):
            raise ValueError("not a VM's shared values")
        yield tuple(map(sys.intern, row))


def vms_of(cols: dict[str, Any], shared: list[tuple[str, ...]], places: list[Placement],
           keys: dict[str, str]) -> Iterator[Vm]:
    """The records of a ``vm-columns`` line (``shared`` and ``places``: the tables read before it);
    each key is noted in ``keys`` (every VM key once)."""
    if not isinstance(cols, dict) or any(len(cols[c]) != len(cols["key"]) for c in COLUMNS):
        raise ValueError("VM columns of unequal lengths")
    key, name, placed, text = cols["key"], cols["name"], cols["placed"], sys.intern
    keys.update(zip(key, key, strict=True))
    subs, groups, location, zone, scale_set, fd, ud, pg, version, health = (
        zip(*map(shared.__getitem__, cols["at"]), strict=True) if key else ((),) * len(SHARED))
    rids = [_resource_id(s, g, n) if r is None else r
            for r, s, g, n in zip(cols["resourceId"], subs, groups, name, strict=True)]
    return map(
        Vm, key, name, [k if v is None else v for k, v in zip(key, cols["vmId"], strict=True)],
        cols["complete"], rids, subs, groups, location, zone, scale_set, fd, ud, pg,
        [{text(k): text(v) for k, v in t.items()} if t else NO_TAGS for t in cols["tags"]],
        [NO_STAMP if t is None else (t, i) for t, i in zip(cols["stampTime"], cols["stampId"], strict=True)],
        cols["lastHeartbeat"], [NEVER if h is None else h for h in cols["lastHeard"]], version,
        [tuple(map(text, x)) if x else () for x in cols["listed"]], cols["polled"], health,
        cols["healthReason"], [None if p is None else places[p] for p in placed],
        [UNPLACED if p is None else (t, i) for p, t, i in zip(placed, cols["placedTime"], cols["placedId"],
                                                              strict=True)],
        [((n, r, c),) if not isinstance(c, list) else tuple(sorted((text(x), y, z) for x, y, z in c))
         for c, n, r in zip(cols["claims"], name, rids, strict=True)])
