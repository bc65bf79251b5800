"""The fold's digest (``/v1/state``): equal folds give equal digests, kept up to date as it folds. Pure.

Two instances that folded the same events, in any order, hold equal states (fold/state.py); their
digests say so without sending the fold. The digest is a SHA-256 over one sum per part of the fold
(VMs with their health verdicts, events with their ``recovered`` reports, decisions, registered keys,
held reports, confirmed placements, co-reception sets, Azure's VMs, events and Resource Health)
and the small rest (gone events, key changes, keys in conflict, Azure's freshness). A part's sum is
the sum, modulo 2^128, of a BLAKE2b hash of each of its records as the snapshot writes it
(fold/snapshot.py): it does not depend on the order in which the records came.

So it is kept, not made: the fold notes each record it changes (``FleetState.journal``), and
``Digest.of`` hashes again only those, adding the new hash and taking away the old. The first look
at a fold (a new state: a start, a restore) hashes everything once (about a second for 100,000
VMs); after that a look costs what changed since the last one, and the service looks at every pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from ..fold import azure_state
from ..fold.identities import conflicts_data, identity_data, rekeyed_data
from ..fold.snapshot import confirmed_data, encode, event_data, vm_row
from ..fold.state import FleetState, Journal

MOD = 1 << 128
CACHED = "digest"  # FleetState.cache's key of the fold's Kept
PARTS = ("vms", "events", "decisions", "identities", "waiting", "azure_vms", "azure_events", "confirmed",
         "azure_health", "groups")


def _hash(text: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(text, digest_size=16).digest(), "big")


def _first(pair: tuple[float, Any]) -> float:
    return pair[0]


def _canonical(value: Any) -> bytes:
    return encode(value, sort=True)


def _records(state: FleetState) -> dict[str, Callable[[str], Any]]:
    """Each part's record of a key as the snapshot writes it (None: no such record)."""
    azure = state.azure

    def vm(key: str) -> Any:
        found = state.vms.get(key)
        return None if found is None else vm_row(found)

    def event(key: str) -> Any:
        found = state.events.get(key)
        return None if found is None else event_data(found)

    def decision(ident: str) -> Any:
        d = state.decisions.get(ident)
        return None if d is None else [d.id, d.kind, d.time, d.data]

    def identity(key: str) -> Any:
        found = state.identities.get(key)
        return None if found is None else [key, identity_data(found)]

    def waiting(key: str) -> Any:
        held = state.waiting.get(key)
        return [key, [[t, e] for t, e in sorted(held, key=_first)]] if held else None  # hub order, as saved

    def azure_vm(key: str) -> Any:
        facts, claim = azure.vms.get(key), azure.claims.get(key)
        return None if facts is None and claim is None else [
            key, None if facts is None else azure_state.vm_data(facts), claim]

    def azure_event(key: str) -> Any:
        found = azure.events.get(key)
        return None if found is None else azure_state.event_data(found)

    def confirmed(key: str) -> Any:
        return [key, confirmed_data(state, key)] if key in state.confirmed else None

    def health(rid: str) -> Any:
        found = azure.health.get(rid)
        return None if found is None else [rid, azure_state.health_data(found)]

    def group(root: str) -> Any:
        members = state.groups.sets.get(root)
        return sorted(members) if members and state.groups.find(root) == root else None

    return {"vms": vm, "events": event, "decisions": decision, "identities": identity, "waiting": waiting,
            "azure_vms": azure_vm, "azure_events": azure_event, "confirmed": confirmed,
            "azure_health": health, "groups": group}


class Kept:
    """A fold's records' hashes and each part's sum, kept on the fold itself (``FleetState.cache``),
    so whoever made them (a restore, on its own thread: ha/keeper.py) hands them on with it."""

    __slots__ = ("hashes", "sums")

    def __init__(self) -> None:
        self.hashes: dict[str, dict[str, int]] = {part: {} for part in PARTS}
        self.sums: dict[str, int] = dict.fromkeys(PARTS, 0)


class Digest:
    """The digest of a fold, kept (module docstring)."""

    def of(self, state: FleetState) -> str:
        """The digest of ``state`` now (hex)."""
        kept = state.cache.get(CACHED)
        if not isinstance(kept, Kept) or state.journal is None or state.groups.dirty is None:
            kept = self._everything(state)
        else:
            self._changed(state, kept)
        rest = _canonical([sorted(state.gone.items()), rekeyed_data(state), conflicts_data(state),
                           azure_state.freshness(state.azure)])
        top = hashlib.sha256(rest)
        for part in PARTS:
            top.update(f"\n{part}:{kept.sums[part]:032x}".encode("ascii"))
        return top.hexdigest()

    def _everything(self, state: FleetState) -> Kept:
        kept = state.cache[CACHED] = Kept()
        keys: dict[str, Iterable[str]] = {
            "vms": state.vms, "events": state.events, "decisions": state.decisions,
            "identities": state.identities, "waiting": state.waiting,
            "azure_vms": set(state.azure.vms) | set(state.azure.claims), "azure_events": state.azure.events,
            "confirmed": state.confirmed, "azure_health": state.azure.health,
            "groups": list(state.groups.sets)}
        records = _records(state)
        for part in PARTS:
            self._again(kept, part, list(keys[part]), records[part])
        state.journal = Journal()
        state.groups.dirty = set()
        return kept

    def _changed(self, state: FleetState, kept: Kept) -> None:
        journal, records = state.journal, _records(state)
        assert journal is not None and state.groups.dirty is not None
        for part in PARTS[:-1]:
            changed: set[str] = getattr(journal, part)
            if changed:
                self._again(kept, part, changed, records[part])
                changed.clear()
        if state.groups.dirty:
            self._again(kept, "groups", state.groups.dirty, records["groups"])
            state.groups.dirty.clear()

    def _again(self, kept: Kept, part: str, keys: Iterable[str], record: Callable[[str], Any]) -> None:
        """A record's hash is replaced where it is, not taken out and put back: a dict's entries
        are never reused, so 100,000 VMs hashed again and again would keep doubling its table."""
        hashes, total = kept.hashes[part], kept.sums[part]
        for key in keys:
            old = hashes.get(key)
            if old is not None:
                total -= old
            value = record(key)
            if value is not None:
                new = hashes[key] = _hash(_canonical(value))
                total += new
            elif old is not None:
                del hashes[key]
        kept.sums[part] = total % MOD
