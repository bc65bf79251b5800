"""The coordinator's edge: each CloudEvent from the hub through trust.py into the fold. Pure.

``Gate.admit(state, event, enqueued)`` asks trust.py for the verdict (the registered keys looked up
in ``state``, the event judged at the hub's ``enqueued`` time) and then:

==========================  =======================================================================
verdict                     what happens
==========================  =======================================================================
a decision, a report        folded (fold/dispatch.py), a report for its sender (verified or not, trust.py)
a registration              first counted against ``[limits] registrations_per_vm`` (per claimed vmId)
                            and ``registrations_per_minute`` (in all), in minutes of hub time:
                            beyond either it is refused as ``identity-rate`` before anything is
                            parsed. The same key and document as one that bound the VM's current
                            key is ``same`` at once (an agent announces it again after each
                            restart, once per Event Hubs sink): not verified again, not counted.
                            A verified one is bound (fold/identities.py); ``stale`` and
                            ``conflict`` are counted as ``identity-stale``/``identity-conflict``
                            (``conflicts``: vmIds newly in conflict, for the service to alert); a
                            new key for a vmId that had one is noted in ``rekeys`` for the service
                            to log
a registration waiting      held with its VM's waiting reports until the intermediate it needs was
for an intermediate         fetched (``fetches``: the URLs for the service to fetch); then admitted
                            again (``fetched``)
``unregistered`` (signed,   held in ``state.waiting`` until that VM's registration binds, then
names a vmid)               admitted again, when the event is at most ``[limits] held_event_bytes``
                            (its compact JSON) and its vmid is GUID-shaped, and there is room: at
                            most ``held_bytes_per_vm`` per vmId and ``held_bytes`` in all. Dropped
                            and counted as ``unregistered`` otherwise, and after ``WAIT_SECONDS``
                            of hub time (``sweep``). An agent announces its identity before its
                            backlog, but its first events after a start may reach the hub a moment
                            before the registration does
any other refusal           counted in ``refused`` by reason and dropped
==========================  =======================================================================

Held events are part of the fold's state, and the snapshot keeps them up to ``SNAPSHOT_HELD_BYTES``
(fold/identities.held_for_snapshot; what it leaves out is dropped at the restore, and counted);
``resume`` admits them again after a restore (and asks again for the intermediates they wait for).
"""

from __future__ import annotations

import hashlib
import json
import re
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

WAIT_SECONDS = 600.0
RATE = trust.IDENTITY_RATE
GUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
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
class Quota:
    """Registrations to verify, counted against ``[limits]`` in minutes of hub time."""

    minute: int | None = None
    counted: Counter[str] = field(default_factory=Counter)  # claimed vmId ("" in all) -> this minute

    def take(self, limits: Limits, event: Mapping[str, Any], enqueued: float | None) -> bool:
        """Count one registration; False when its minute has no room left for it."""
        minute = int(enqueued // 60) if enqueued is not None else -1
        if minute != self.minute:
            self.minute, self.counted = minute, Counter()
        vm = str(event.get("vmid"))[:100].lower()
        if self.counted[""] >= limits.registrations_per_minute or \
                self.counted[vm] >= limits.registrations_per_vm:
            return False
        self.counted[""] += 1
        self.counted[vm] += 1
        return True


RATE_VERDICT = trust.Verdict(False, RATE, "more registrations in this minute of hub time than [limits] "
                                          "allows")


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
    conflicts: list[str] = field(default_factory=list)  # vmIds newly in conflict, for the alert
    held_bytes: dict[str, int] = field(default_factory=dict)  # VM key -> bytes of its held events
    quota: Quota = field(default_factory=lambda: Quota())  # registrations verified on the fold thread

    def admit(self, state: FleetState, event: Mapping[str, Any], enqueued: float | None,
              checked: trust.Checked | None = None) -> str:
        """Judge and fold (or hold) one event; the outcome: a fold outcome, ``registered``,
        ``waiting`` or the reason code it was refused for. ``checked``: the costly part of the
        verdict, done off the fold thread (input/verifier.py, which counted the registration)."""
        edge = self.edge
        kind = event.get("type")
        fingerprint = ""  # a registration's, taken once
        if kind == IDENTITY_TYPE:
            fingerprint = _fingerprint(event)
            if self._known(state, fingerprint):
                self.registered[registrations.SAME] += 1
                return REGISTERED
            if checked is None and not self.quota.take(self.edge.limits, event, enqueued):
                return self._refuse(RATE, RATE_VERDICT, event)
        if checked is not None and checked.verdict is not None and checked.verdict.fetch is not None:
            checked = None  # a worker cannot fetch: judged here, where the intermediates are fetched
        keys = edge.keys() if isinstance(kind, str) and kind.startswith(DECISION_PREFIX) else _NO_KEYS
        verdict = trust.check(event, source=edge.source, keys=keys,
                              registered=lambda vm: registrations.verifier(state, vm), attested=edge.attested,
                              now=enqueued, require_signed=edge.require_signed, bound=state.identities.get,
                              checked=checked)
        if verdict is RATE_VERDICT or verdict.code == RATE:
            return self._refuse(RATE, verdict, event)
        if verdict.trusted:
            if verdict.claim is not None:
                return self._register(state, verdict.claim, event, fingerprint or _fingerprint(event))
            sender = (Sender(verdict.sender) if verdict.verified
                      else Sender(None, verified=False) if verdict is trust.UNVERIFIED else CLAIMED)
            return fold_event(state, event, self.stats, edge.limits, enqueued, sender=sender, skew=edge.skew)
        if verdict.fetch is not None:
            if not self._hold(state, verdict.sender or "", event, enqueued):
                why = f"no room to wait for the intermediate at {verdict.fetch[:200]}"
                untrusted = "identity-untrusted"
                return self._refuse(untrusted, trust.Verdict(False, untrusted, why), event)
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
        """Hold a report until ``vm`` registers, within ``[limits]``' bytes (module docstring)."""
        limits = self.edge.limits
        if not GUID.match(vm):
            return False
        size = _size(event)
        total = sum(self.held_bytes.values())
        if size > limits.held_event_bytes or self.held_bytes.get(vm, 0) + size > limits.held_bytes_per_vm \
                or total + size > limits.held_bytes:
            return False
        state.note("waiting", vm)
        state.waiting.setdefault(vm, []).append((enqueued if enqueued is not None else 0.0, dict(event)))
        self.held_bytes[vm] = self.held_bytes.get(vm, 0) + size
        return True

    def known(self, state: FleetState, event: Mapping[str, Any]) -> bool:
        """The same key and attested document as a registration that bound the VM's current key
        (an agent announces it again after a restart, once per Event Hubs sink): nothing to verify
        again, nothing changes."""
        return self._known(state, _fingerprint(event))

    def _known(self, state: FleetState, fingerprint: str) -> bool:
        seen = self.documents.get(fingerprint)
        bound = state.identities.get(seen[0]) if seen is not None else None
        return bound is not None and seen is not None and bound.keyid == seen[1]

    def _register(self, state: FleetState, claim: registrations.Claim, event: Mapping[str, Any],
                  fingerprint: str) -> str:
        in_conflict = claim.vm in state.conflicts
        outcome = registrations.bind(state, claim)
        self.registered[outcome] += 1
        if outcome == registrations.CONFLICT and not in_conflict:
            self.conflicts.append(claim.vm)
        if outcome in registrations.REFUSALS:
            return self._refuse(f"identity-{outcome}", trust.Verdict(
                False, f"identity-{outcome}", f"{claim.vm}: {outcome} (key {claim.identity.keyid})"), event)
        if outcome == registrations.REKEYED:
            self.rekeys.append(state.rekeyed[claim.vm][-1])
        if len(self.documents) >= KNOWN_DOCUMENTS:
            self.documents.clear()
        self.documents[fingerprint] = (claim.vm, claim.identity.keyid)
        self._release(state, claim.vm)
        return REGISTERED

    def _release(self, state: FleetState, vm: str) -> None:
        state.note("waiting", vm)
        self.held_bytes.pop(vm, None)
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
        self.refused[trust.UNREGISTERED] += state.cache.pop(registrations.HELD_LEFT_OUT, 0)  # not saved
        self.held_bytes = {vm: sum(_size(e) for _, e in held) for vm, held in state.waiting.items()}
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
                self.held_bytes[vm] = sum(_size(e) for _, e in kept)
            else:
                del state.waiting[vm]
                self.held_bytes.pop(vm, None)
        return dropped

    def held(self, state: FleetState) -> int:
        return sum(len(v) for v in state.waiting.values())

    def folded(self, outcome: str) -> bool:
        return outcome in (FOLDED, REGISTERED)


def _size(event: Mapping[str, Any]) -> int:
    """An event's size as held: its compact JSON in bytes."""
    try:
        return len(json.dumps(event, separators=(",", ":"), default=str).encode("utf-8", "replace"))
    except (TypeError, ValueError, RecursionError):
        return 1 << 30


def _fingerprint(event: Mapping[str, Any]) -> str:
    """The registration's key and attested document, as one digest."""
    data = event.get("data")
    if not isinstance(data, Mapping):
        return ""
    document = data.get("AttestedDocument")
    text = document.get("signature") if isinstance(document, Mapping) else None
    return hashlib.sha256(f"{data.get('PublicKey')}\n{text}".encode()).hexdigest()
