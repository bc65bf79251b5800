"""Which key speaks for which VM: the binding of a vmId to an agent's identity key. Pure.

trust.py verifies an identity (registration) event: its signature with the key it carries, its
IMDS attested document (attestation.py) with the nonce of that key. What it verified comes here as
a ``Claim``; ``bind`` folds it into ``state.identities`` (VM key -> ``Identity``) by these rules,
the first that applies deciding:

==============  ===========================================================================
outcome         when
==============  ===========================================================================
``bound``       the VM has no key yet: this one is its key
``same``        the VM has this key, from this document or a newer one: nothing changes
``refreshed``   the VM has this key and the document is newer: its times are kept
``replayed``    refused: the VM's current document (the same SignedData) came with another
                key. One document binds one key: a second key for it is someone else's
                (its nonce would have to have been ground to match, see below)
``stale``       refused: another key, with a document not created after the one bound (an
                old document of the VM's, or a copy of the current one made by someone else)
``rekeyed``     another key with a newer document: a reinstall (or a state directory moved
                away). The new key replaces the old one, and the change is kept in
                ``state.rekeyed`` (the last ``REKEYS_KEPT``) for ``status`` and the page, and
                logged by the service
==============  ===========================================================================

So whichever order the identity events are read in, a VM ends with the key of its newest
document (equal ``createdOn`` with two keys: the first read stays; documents are made seconds apart
only by one agent asking twice with one key).

What the nonce leaves open (docs/identity.md): it has about 33 bits, so a forger who holds a
victim's fresh document and the hours to grind a key with the same nonce could register that key
for the victim's vmId. It cannot get the document: IMDS answers only on the victim itself, and the
agents' send right on the hub does not let them read it. If it had one anyway, the document would
have to be the victim's newest (``stale`` otherwise) and not yet announced by the victim
(``replayed`` otherwise); the victim's next registration (hourly) then brings a newer document and
takes its vmId back, and each change is shown (``rekeyed``).

A key registered for several vmIds (an image captured with the agent's state directory, so every
clone has the same key) is allowed: each clone registers its own document. Such clones can speak
for each other; ``shared_keys`` lists them for ``status``.

``verifier`` gives the parsed key to check a VM's reports with, cached per VM (a report costs one
Ed25519 verification, not a key parse).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from ....approvals import signing
from .state import FleetState, Identity, Rekey

REKEYS_KEPT = 50
BOUND, SAME, REFRESHED, REKEYED = "bound", "same", "refreshed", "rekeyed"
REPLAYED, STALE = "replayed", "stale"
REFUSALS = (REPLAYED, STALE)


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
    if current is None:
        state.identities[claim.vm] = new
        return BOUND
    if new.keyid == current.keyid:
        if new.created_on <= current.created_on:
            return SAME
        state.identities[claim.vm] = new
        return REFRESHED
    if new.document == current.document:
        return REPLAYED
    if new.created_on <= current.created_on:
        return STALE
    state.identities[claim.vm] = new
    state.rekeyed.append(Rekey(claim.vm, current.keyid, new.keyid, new.registered_at))
    del state.rekeyed[:-REKEYS_KEPT]
    return REKEYED


def verifier(state: FleetState, vm: str) -> signing.VerifyKeys | None:
    """The key a report of ``vm`` must verify with (None: not registered), parsed once per key."""
    identity = state.identities.get(vm)
    if identity is None:
        return None
    cache: dict[str, tuple[str, signing.VerifyKeys]] = state.cache.setdefault("verifiers", {})
    known = cache.get(vm)
    if known is not None and known[0] == identity.public_key:
        return known[1]
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    keys = signing.VerifyKeys([Ed25519PublicKey.from_public_bytes(base64.b64decode(identity.public_key))])
    cache[vm] = (identity.public_key, keys)
    return keys


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
    state.note("identities", *vms)
    state.note("waiting", *vms)
    state.cache.pop("verifiers", None)
