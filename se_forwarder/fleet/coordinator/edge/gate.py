"""The coordinator's edge: each CloudEvent from the hub through trust.py into the fold. Pure.

``Gate.admit(state, event, enqueued)`` asks trust.py for the verdict (the registered keys looked up
in ``state``, the event judged at the hub's ``enqueued`` time) and then:

==========================  =======================================================================
verdict                     what happens
==========================  =======================================================================
a decision, a report        folded (fold/dispatch.py), a report for its sender (verified or not, trust.py)
a registration              bound (fold/identities.py); ``replayed``/``stale`` counted as
                            ``identity-replayed``/``identity-stale``; a new key for a vmId that had
                            one is noted in ``rekeys`` for the service to log. The same key and
                            document as one that bound the VM's current key is ``same`` at once
                            (an agent announces it again after each restart): not verified again
a registration waiting      held with its VM's waiting reports until the intermediate it needs was
for an intermediate         fetched (``fetches``: the URLs for the service to fetch); then admitted
                            again (``fetched``)
``unregistered`` (signed,   held in ``state.waiting`` (at most ``WAIT_PER_VM`` per VM and
names a vmid)               ``WAIT_TOTAL`` in all) until that VM's registration binds, then admitted
                            again; dropped and counted as ``unregistered`` after ``WAIT_SECONDS`` of
                            hub time (``sweep``) or when no room is left. An agent announces its
                            identity before its backlog, but its first events after a start may
                            reach the hub a moment before the registration does
any other refusal           counted in ``refused`` by reason and dropped
==========================  =======================================================================

Held events are part of the fold's state (snapshot.py), so a restart keeps them; ``resume`` admits
them again after a restore (and asks again for the intermediates they wait for).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ....approvals import signing
from ..config.limits import DEFAULT_LIMITS, Limits
from ..config.trust import DEFAULT_SKEW
from ..fold import identities as registrations
from ..fold.dispatch import FOLDED, FoldStats, Sender, fold_event
from ..fold.reports import CLAIMED
from ..fold.state import FleetState, Rekey
from ..schema import DECISION_PREFIX, IDENTITY_TYPE
from . import trust

WAIT_PER_VM = 50
WAIT_TOTAL = 5000
WAIT_SECONDS = 600.0
WAITING, REGISTERED = "waiting", "registered"
_NO_KEYS = signing.VerifyKeys(())  # what a report is checked with: no coordinator key is needed
KNOWN_DOCUMENTS = 50_000  # registrations remembered as verified (a few per VM)


@dataclass
class Edge:
    """What the gate judges by: trust.py's inputs that are not in the fold, and the fold's settings."""

    source: str
    keys: Callable[[], signing.VerifyKeys]  # the coordinator's trusted keys (they may change)
    attested: trust.Attestation | None = None
    require_signed: bool = True
    skew: float = DEFAULT_SKEW
    limits: Limits = DEFAULT_LIMITS


@dataclass
class Gate:
    edge: Edge
    stats: FoldStats = field(default_factory=FoldStats)
    refused: Counter[str] = field(default_factory=Counter)  # trust reason code -> events dropped
    registered: Counter[str] = field(default_factory=Counter)  # registrations.bind outcome -> count
    rekeys: list[Rekey] = field(default_factory=list)  # new keys for known vmIds, for the log
    fetches: set[str] = field(default_factory=set)  # intermediates to fetch before admitting again
    last_refusal: tuple[str, trust.Verdict, Mapping[str, Any]] | None = None
    documents: dict[str, tuple[str, str]] = field(default_factory=dict)  # verified: -> (VM, key id)

    def admit(self, state: FleetState, event: Mapping[str, Any], enqueued: float | None) -> str:
        """Judge and fold (or hold) one event; the outcome: a fold outcome, ``registered``,
        ``waiting`` or the reason code it was refused for."""
        edge = self.edge
        kind = event.get("type")
        if kind == IDENTITY_TYPE and self._known(state, event):
            self.registered[registrations.SAME] += 1
            return REGISTERED
        keys = edge.keys() if isinstance(kind, str) and kind.startswith(DECISION_PREFIX) else _NO_KEYS
        verdict = trust.check(event, source=edge.source, keys=keys,
                              registered=lambda vm: registrations.verifier(state, vm), attested=edge.attested,
                              now=enqueued, require_signed=edge.require_signed)
        if verdict.trusted:
            if verdict.claim is not None:
                return self._register(state, verdict.claim, event)
            sender = (Sender(verdict.sender) if verdict.verified
                      else Sender(None, verified=False) if verdict is trust.UNVERIFIED else CLAIMED)
            return fold_event(state, event, self.stats, edge.limits, enqueued, sender=sender, skew=edge.skew)
        if verdict.fetch is not None:
            self._hold(state, verdict.sender or "", event, enqueued)
            self.fetches.add(verdict.fetch)
            return WAITING
        if verdict.code == trust.UNREGISTERED and verdict.sender and enqueued is not None \
                and self._hold(state, verdict.sender, event, enqueued):
            return WAITING
        return self._refuse(verdict.code or trust.FORGED, verdict, event)

    def _refuse(self, code: str, verdict: trust.Verdict, event: Mapping[str, Any]) -> str:
        self.refused[code] += 1
        self.last_refusal = (code, verdict, event)
        return code

    def _hold(self, state: FleetState, vm: str, event: Mapping[str, Any], enqueued: float | None) -> bool:
        state.note("waiting", vm)
        held = state.waiting.setdefault(vm, [])
        if len(held) >= WAIT_PER_VM or sum(len(v) for v in state.waiting.values()) >= WAIT_TOTAL:
            if not held:
                del state.waiting[vm]
            return False
        held.append((enqueued if enqueued is not None else 0.0, dict(event)))
        return True

    def _known(self, state: FleetState, event: Mapping[str, Any]) -> bool:
        """The same key and attested document as a registration that bound the VM's current key
        (an agent announces it again after a restart, once per Event Hubs sink): nothing to verify
        again, nothing changes."""
        seen = self.documents.get(_fingerprint(event))
        bound = state.identities.get(seen[0]) if seen is not None else None
        return bound is not None and seen is not None and bound.keyid == seen[1]

    def _register(self, state: FleetState, claim: registrations.Claim, event: Mapping[str, Any]) -> str:
        outcome = registrations.bind(state, claim)
        self.registered[outcome] += 1
        if outcome in registrations.REFUSALS:
            self.refused[f"identity-{outcome}"] += 1
            return f"identity-{outcome}"
        if outcome == registrations.REKEYED:
            self.rekeys.append(state.rekeyed[-1])
        if len(self.documents) >= KNOWN_DOCUMENTS:
            self.documents.clear()
        self.documents[_fingerprint(event)] = (claim.vm, claim.identity.keyid)
        self._release(state, claim.vm)
        return REGISTERED

    def _release(self, state: FleetState, vm: str) -> None:
        state.note("waiting", vm)
        for enqueued, event in state.waiting.pop(vm, []):
            self.admit(state, event, enqueued)

    def fetched(self, state: FleetState, url: str) -> None:
        """The intermediate at ``url`` was fetched (or failed): admit again what waited for it."""
        self.fetches.discard(url)
        for vm in [vm for vm, held in state.waiting.items()
                   if any(e.get("type") == IDENTITY_TYPE for _, e in held)]:
            self._release(state, vm)

    def resume(self, state: FleetState) -> None:
        """After a restore: admit again every held event (registrations first, in hub order)."""
        for vm in list(state.waiting):
            self._release(state, vm)

    def sweep(self, state: FleetState, now: float) -> int:
        """Drop what waited longer than WAIT_SECONDS of hub time before ``now``; how many."""
        dropped = 0
        for vm in list(state.waiting):
            state.note("waiting", vm)
            kept = [(t, e) for t, e in state.waiting[vm] if t >= now - WAIT_SECONDS]
            for _ in range(len(state.waiting[vm]) - len(kept)):
                self.refused[trust.UNREGISTERED] += 1
                dropped += 1
            if kept:
                state.waiting[vm] = kept
            else:
                del state.waiting[vm]
        return dropped

    def held(self, state: FleetState) -> int:
        return sum(len(v) for v in state.waiting.values())

    def folded(self, outcome: str) -> bool:
        return outcome in (FOLDED, REGISTERED)


def _fingerprint(event: Mapping[str, Any]) -> str:
    """The registration's key and attested document, as one digest."""
    data = event.get("data")
    if not isinstance(data, Mapping):
        return ""
    document = data.get("AttestedDocument")
    text = document.get("signature") if isinstance(document, Mapping) else None
    return hashlib.sha256(f"{data.get('PublicKey')}\n{text}".encode()).hexdigest()
