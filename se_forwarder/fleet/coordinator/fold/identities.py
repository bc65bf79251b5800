"""Which key speaks for which VM: the binding of a vmId to an agent's identity key. Pure.

trust.py verifies an identity (registration) event: its signature with the key it carries, its
IMDS attested document (attestation.py) with the nonce of that key. What it verified comes here as
a ``Claim``; ``bind`` folds it into ``state.identities`` (VM key -> ``Identity``) by these rules,
the first that applies deciding:

==============  ===========================================================================
outcome         when
==============  ===========================================================================
``conflict``    refused: the vmId is in conflict (below) and this claim is not newer than
                the document in dispute, or carries that very document: it stays in conflict
``settled``     the vmId was in conflict and this claim's document is newer: it binds, and
                the conflict is over
``bound``       the VM has no key yet: this one is its key
``same``        the VM has this key, from this document or a newer one: nothing changes
``refreshed``   the VM has this key and the document is newer: its times are kept
``conflict``    the VM's current document (the same SignedData) comes with another key.
                One document binds one key, and two keys for it means one of them was
                ground to its nonce: which one is not for the coordinator to guess, so
                neither binds. The vmId is put in conflict (``state.conflicts``): its reports
                are not folded, ``decide`` counts it as unavailable in every budget, the
                service alerts and ``status`` shows it, until a newer document with one key
                or an operator (``settle``) ends it
``stale``       refused: another key, with a document not created after the one bound (an
                old document of the VM's, or a copy of the current one made by someone else)
``rekeyed``     another key with a newer document: a reinstall (or a state directory moved
                away). The new key replaces the old one, and the change is kept in the VM's
                re-key history (``state.rekeyed[vm]``, its last ``REKEYS_PER_VM``) for
                ``status`` and the page, and logged by the service
==============  ===========================================================================

So whichever order the identity events are read in, a VM ends with the key of its newest
document (equal ``createdOn`` with two keys: the first read stays; documents are made seconds apart
only by one agent asking twice with one key), or in conflict when one document came with two keys.

What the nonce leaves open (docs/identity.md): an agent that asks IMDS for the 10-digit nonce
(where IMDS refuses the specification's 32 characters) has about 33 bits, so a holder of Listen
on the hub who reads a victim's identity event could grind a key with the same nonce, offline, and
present the victim's document with it. Before, whichever copy folded first won; now the second
copy puts the vmId in conflict, so the grinder gains no vmId, only a VM counted down until it is
settled. With the 32-character nonce (about 190 bits) no key can be ground.

A key registered for several vmIds (an image captured with the agent's state directory, so every
clone has the same key) is allowed: each clone registers its own document. Such clones can speak
for each other; ``shared_keys`` lists them for ``status``.

``verifier`` gives the key to check a VM's reports with, cached per VM: its raw bytes, which a
worker's answer is compared with (trust.py), and the parsed key only when the fold thread verifies
a report itself (then a report costs one Ed25519 verification, not a key parse).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from ....approvals import signing
from .state import Conflict, DecisionRecord, FleetState, Identity, Rekey

REKEYS_PER_VM = 10
SNAPSHOT_HELD_BYTES = 4 << 20  # the held pool in a snapshot at most (its JSON)
HELD_LEFT_OUT = "held-left-out"  # state.cache: held reports a restored snapshot left out
BOUND, SAME, REFRESHED, REKEYED, SETTLED = "bound", "same", "refreshed", "rekeyed", "settled"
CONFLICT, STALE = "conflict", "stale"
REFUSALS = (CONFLICT, STALE)


@dataclass(frozen=True)
class Claim:
    """A verified registration: ``vm`` (VM key) holds ``identity`` (trust.py checked both)."""

    vm: str
    identity: Identity


def document_digest(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def bind(state: FleetState, claim: Claim) -> str:
    """Fold a verified registration by the module's rules; the outcome (one of its table)."""
    new, current = claim.identity, state.identities.get(claim.vm)
    state.note("identities", claim.vm)
    disputed = state.conflicts.get(claim.vm)
    if disputed is not None:
        if new.document == disputed.document or new.created_on <= disputed.created_on:
            if new.document == disputed.document and all(c.keyid != new.keyid for c in disputed.candidates):
                state.conflicts[claim.vm] = replace(disputed, candidates=(*disputed.candidates, new)[:4])
            return CONFLICT
        del state.conflicts[claim.vm]
        state.identities[claim.vm] = new
        state.version += 1
        return SETTLED
    if current is None:
        state.identities[claim.vm] = new
        return BOUND
    if new.keyid == current.keyid:
        if new.created_on <= current.created_on:
            return SAME
        state.identities[claim.vm] = new
        return REFRESHED
    if new.document == current.document:
        del state.identities[claim.vm]
        state.conflicts[claim.vm] = Conflict(current.document, current.created_on, (current, new),
                                             new.registered_at)
        state.version += 1
        return CONFLICT
    if new.created_on <= current.created_on:
        return STALE
    state.identities[claim.vm] = new
    history = state.rekeyed.setdefault(claim.vm, [])
    history.append(Rekey(claim.vm, current.keyid, new.keyid, new.registered_at))
    del history[:-REKEYS_PER_VM]
    return REKEYED


def settle(state: FleetState, vm: str, keyid: str | None) -> Identity | None:
    """An operator's word on a vmId in conflict: bind the candidate with ``keyid``, or none (the
    next registration binds); the identity bound. KeyError: not in conflict; ValueError: no such
    candidate."""
    disputed = state.conflicts[vm]
    chosen = next((c for c in disputed.candidates if c.keyid == keyid), None)
    if keyid is not None and chosen is None:
        raise ValueError(f"{keyid} is not one of the keys in dispute for {vm} "
                         f"({', '.join(c.keyid for c in disputed.candidates)})")
    del state.conflicts[vm]
    state.note("identities", vm)
    if chosen is not None:
        state.identities[vm] = chosen
    state.version += 1
    return chosen


def held_for_snapshot(state: FleetState, budget: int | None = None) -> tuple[dict[str, list[Any]], int]:
    """The held pool as a snapshot keeps it: events in hub order until ``budget`` bytes of compact
    JSON (default SNAPSHOT_HELD_BYTES); and how many were left out (counted as ``unregistered`` when
    the snapshot is restored: gate.resume)."""
    budget = SNAPSHOT_HELD_BYTES if budget is None else budget
    every = sorted(((t, vm, i, e) for vm, held in state.waiting.items() for i, (t, e) in enumerate(held)),
                   key=lambda item: (item[0], item[1], item[2]))
    kept: dict[str, list[Any]] = {}
    used = left = 0
    for t, vm, _, event in every:
        size = len(json.dumps(event, separators=(",", ":"), default=str))
        if used + size > budget:
            left += 1
            continue
        used += size
        kept.setdefault(vm, []).append([t, event])
    return dict(sorted(kept.items())), left


SETTLE_SCOPE = "vm:"  # a settle decision's Scope: vm:<VM key>; its Overrides: ["key:<keyid>"] or []


def fold_settle(state: FleetState, record: DecisionRecord) -> str:
    """Fold an operator's ``settle`` decision (decide/control.settle): the vmId in conflict since
    before the decision gets the key it names, or none; kept in the decision log (the audit trail).
    A decision older than the conflict (a snapshot's log replayed) changes nothing."""
    scope, chosen = record.data.get("Scope"), record.data.get("Overrides")
    if not isinstance(scope, str) or not scope.startswith(SETTLE_SCOPE) or not isinstance(chosen, list) \
            or len(chosen) > 1 or not all(isinstance(k, str) and k.startswith("key:") for k in chosen):
        return "malformed"
    vm, keyid = scope[len(SETTLE_SCOPE):], chosen[0][4:] if chosen else None
    conflict = state.conflicts.get(vm)
    if conflict is not None and conflict.since <= record.time:
        try:
            settle(state, vm, keyid)
        except ValueError:
            return "malformed"
    state.decisions[record.id] = record
    return "folded"


def recent_rekeys(state: FleetState, count: int = 50) -> list[Rekey]:
    """The newest ``count`` key changes of any VM, newest last."""
    every = [r for history in state.rekeyed.values() for r in history]
    return sorted(every, key=lambda r: r.time)[-count:]


def verifier(state: FleetState, vm: str) -> signing.VerifyKeys | None:
    """The key a report of ``vm`` must verify with (None: not registered), read once per key."""
    identity = state.identities.get(vm)
    if identity is None:
        return None
    cache: dict[str, tuple[str, signing.VerifyKeys]] = state.cache.setdefault("verifiers", {})
    known = cache.get(vm)
    if known is not None and known[0] == identity.public_key:
        return known[1]
    keys = Registered(base64.b64decode(identity.public_key))
    cache[vm] = (identity.public_key, keys)
    return keys


class Registered(signing.VerifyKeys):
    """One VM's registered key as its 32 raw bytes (``raw``: what a worker's check is compared
    with, trust.py); the ``cryptography`` key object is made only when the fold thread verifies a
    report itself (``verify_workers = 0``, or a worker's answer not taken)."""

    def __init__(self, raw: bytes) -> None:  # by_id: made when first asked for (__getattr__)
        self.raw, self.keyid = raw, signing.raw_keyid(raw)

    def __len__(self) -> int:
        return 1

    def __contains__(self, kid: object) -> bool:
        return kid == self.keyid

    @property
    def ids(self) -> list[str]:  # a verified report names its key id: no key object for that
        return [self.keyid]

    def __getattr__(self, name: str) -> Any:
        if name != "by_id":
            raise AttributeError(name)
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        self.by_id = signing.VerifyKeys([Ed25519PublicKey.from_public_bytes(self.raw)]).by_id
        return self.by_id


def shared_keys(state: FleetState) -> list[tuple[str, list[str]]]:
    """(key id, VM keys) of every key registered for more than one VM, sorted."""
    by_key: dict[str, list[str]] = {}
    for vm, identity in state.identities.items():
        by_key.setdefault(identity.keyid, []).append(vm)
    return sorted((kid, sorted(vms)) for kid, vms in by_key.items() if len(vms) > 1)


def forget(state: FleetState, vms: set[str]) -> None:
    """Drop the identities of VMs the fold forgot (retention.py)."""
    for vm in vms:
        state.identities.pop(vm, None)
        state.waiting.pop(vm, None)
        state.conflicts.pop(vm, None)
        state.rekeyed.pop(vm, None)
    state.note("identities", *vms)
    state.note("waiting", *vms)
    state.cache.pop("verifiers", None)


def rekeyed_data(state: FleetState) -> list[list[Any]]:
    """The key changes kept, by VM, oldest first."""
    return [[r.vm, r.old, r.new, r.time] for _, v in sorted(state.rekeyed.items()) for r in v]


def conflicts_data(state: FleetState) -> dict[str, Any]:
    """The vmIds in key conflict, each with the keys in dispute (as snapshots and the digest hold them)."""
    return {k: {"document": c.document, "createdOn": c.created_on, "since": c.since,
                "candidates": [identity_data(i) for i in c.candidates]}
            for k, c in sorted(state.conflicts.items())}


def identity_of(i: dict[str, Any]) -> Identity:
    return Identity(str(i["publicKey"]), str(i["keyid"]), float(i["createdOn"]), float(i["expiresOn"]),
                    str(i["document"]), str(i["subscription"]), float(i["registeredAt"]))


def identity_data(i: Identity) -> dict[str, Any]:
    return {"publicKey": i.public_key, "keyid": i.keyid, "createdOn": i.created_on, "expiresOn": i.expires_on,
            "document": i.document, "subscription": i.subscription, "registeredAt": i.registered_at}
