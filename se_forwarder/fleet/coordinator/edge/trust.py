"""Who may change the fold: the verdict on each CloudEvent read from the hub, before it is folded.

Every VM's identity may send to the hub, and Event Hubs does not tell a reader who sent a
message, so nothing read there is taken on its word. ``check`` is a pure function of the event,
this coordinator's ``source``, the keys it trusts, the agents' registered keys (injected: a lookup
by VM key, fold/identities.py), the attestation trust anchors (with a lookup of fetched
intermediates) and the hub's enqueued time of the event, like ``approvals/messages.validate``.
gate.py folds an event only when the verdict is trusted, and counts every other verdict by its
reason code (``/metrics``: ``se_forwarder_coordinator_refused_total{reason}``; ``coordinator
status``; ``/v1/status`` ``service.refused``). The checks, by kind of event; the first that applies
decides:

Azure's own events (``type`` starting ``Microsoft.ResourceNotifications.``, such as the
``ScheduledEventEmitted`` of Azure's feed) are refused as ``azure``, whatever they carry: only the
Azure feed hub, which no VM can send to, carries those (input/azure.py reads it apart from this
hub, never through ``check``); on the agents' hub such an event is a VM's forgery.

Decisions (``type`` starting ``com.azure.scheduledevents.coordinator.``):

=========================  ========================================================================
``foreign``                ``source`` is another coordinator's (``urn:se-forwarder:coordinator:<another
                           name>``), such as a shadow coordinator under its own name. It is never
                           folded here, so its signature is not looked at
``forged``                 ``source`` is no coordinator's at all
``forged``                 in this coordinator's name but it does not verify: no ``signature``, no
                           ``keyid``, a ``keyid`` naming no trusted key, a signature that is not
                           base64 of 64 bytes or does not verify over the canonical bytes
(trusted)                  in this coordinator's name, signed by a trusted key
=========================  ========================================================================

Registrations (``com.azure.scheduledevents.identity``, docs/identity.md), cheapest check first:
nothing costly is done for a registration whose claims alone give it away:

=========================  ========================================================================
``identity-rate``          beyond ``[limits] registrations_per_vm`` or ``registrations_per_minute``
                           in its minute of hub time (gate.py and input/verifier.py count them)
``identity-malformed``     ``data`` is not an object whose ``PublicKey`` is base64 of 32 bytes, or
                           ``vmid`` names no vmId
``identity-<reason>``      its attested document was refused before (edge/verdicts.py: the same
                           document text; only reasons that depend on the document alone)
``identity-<reason>``      the document's claims, parsed only (attestation.claims): ``malformed``,
                           ``nonce``: not the registering key's, ``claims``, ``vm``: another vmId
                           than the event's, ``expired`` or ``future`` at the hub's enqueued time,
                           ``subscription``: not in ``[trust] subscriptions``, ``stale``: a key
                           change whose document is not newer than the bound one's
``identity-signature``     the event is not signed (``keyid``, ``signature``) by the key it carries:
                           the sender does not hold the key it registers
``identity-<reason>``      the document's signature and chain (attestation.signed, chains.py):
                           ``no-signer-cert``, ``certificates``, ``signer-key``, ``bad-signature``,
                           ``untrusted``, ``signer-name``
(waits)                    ``untrusted`` for want of an intermediate named by the signing
                           certificate's "CA Issuers" URL that has not been fetched yet: the verdict
                           names the URL (``fetch``) and gate.py asks again once it was fetched
(trusted)                  otherwise: a ``Claim`` that the document's vmId holds this key, which
                           fold/identities.py binds (``identity-stale``,
                           ``identity-conflict`` there)
=========================  ========================================================================

Reports (an agent's CloudEvent of a type the fold reads: ``scheduled``, ..., ``heartbeat``; other
types pass, the fold skips them):

=========================  ========================================================================
``bad-data``               its ``data`` is not a JSON object (checked first: a report whose data
                           is a string would otherwise carry no ``Vm`` to check)
``unregistered``           signed, but its ``vmid`` names no VM with a registered key (gate.py holds
                           it a while: a registration may follow)
``bad-signature``          signed, and it does not verify with the key registered for its ``vmid``
                           (another key, another content, a signature that is not base64 of 64 bytes)
``wrong-vm``               its ``data.Vm.vmId`` is not its ``vmid``
``unsigned``               no ``signature`` while ``[trust] require_signed_reports`` (default), or
                           for a ``vmid`` with a registered key (that VM signs)
(trusted)                  signed and verified: folded for its sender, the registered vmId
(trusted, unverified)      unsigned, with ``require_signed_reports = false``, for a VM without a
                           registered key: folded with only the effects fold/reports.py allows an
                           unverified report (it can make the coordinator more careful, never less)
=========================  ========================================================================

``foreign`` comes before a decision's signature on purpose: another coordinator's decisions are
skipped whatever they carry, and a shadow coordinator may well sign with a key this one does not
trust, so checking first would count an honest shadow as a forger.

Times: a registration is judged at the hub's enqueued time of its event, never at the clock of the
instance that reads it, so every instance, and a restart replaying the hub, reaches the same
verdict. ``snapshot`` is the decisions' check for the snapshot blob (ha/snapshot_blob.py): a
snapshot replaces the fold, so it is taken only when signed by a trusted key.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography import x509

from ....approvals import signing
from ....identity.attested import nonces_for
from ..fold.identities import REFUSALS, Claim, document_digest
from ..fold.state import Identity
from ..schema import AZURE_TYPES, COORDINATOR_SOURCE, DECISION_PREFIX, IDENTITY_TYPE, REPORT_TYPES
from . import attestation, ed25519, verdicts
from .chains import Chains
from .verdicts import Verdicts

FOREIGN, FORGED, AZURE = "foreign", "forged", "azure"
UNREGISTERED, BAD_SIGNATURE, WRONG_VM, UNSIGNED = "unregistered", "bad-signature", "wrong-vm", "unsigned"
BAD_DATA = "bad-data"
IDENTITY_MALFORMED, IDENTITY_SIGNATURE = "identity-malformed", "identity-signature"
IDENTITY_VM, IDENTITY_RATE = "identity-vm", "identity-rate"
REASON_CODES = tuple(dict.fromkeys((
    FOREIGN, FORGED, AZURE, BAD_DATA, UNREGISTERED, BAD_SIGNATURE, WRONG_VM, UNSIGNED, IDENTITY_RATE,
    IDENTITY_MALFORMED,
    IDENTITY_SIGNATURE, *(f"identity-{r}" for r in attestation.REASONS), IDENTITY_VM,
    *(f"identity-{r}" for r in REFUSALS))))
#: Document refusals remembered by digest (verdicts.py): they depend on the document and anchors alone.
REMEMBERED = (*attestation.DOCUMENT_REASONS, "untrusted", "signer-name")

#: The VM key -> the key its reports must verify with (None: not registered); registrations.verifier.
Registered = Callable[[str], signing.VerifyKeys | None]
#: The VM key -> the identity bound to it (None: none); a key change is checked against its document.
Bound = Callable[[str], Identity | None]
#: A "CA Issuers" URL -> the certificates fetched there; None while not fetched (input/intermediates.py).
Fetched = Callable[[str], tuple[x509.Certificate, ...] | None]


@dataclass(frozen=True)
class Attestation:
    """What registrations are checked against: anchors, allowed subscriptions (None: any), and
    the intermediates fetched from "CA Issuers" URLs (None: fetching is off)."""

    anchors: attestation.Anchors
    subscriptions: Collection[str] | None = None
    fetched: Fetched | None = None
    chains: Chains = field(default=None)  # type: ignore[assignment]  # default: made for the anchors
    verdicts: Verdicts[attestation.Refusal] = field(default_factory=Verdicts)

    def __post_init__(self) -> None:
        if self.chains is None:
            object.__setattr__(self, "chains", Chains(self.anchors))
        if self.subscriptions is not None:  # as a document's is compared: lower case, found at once
            object.__setattr__(self, "subscriptions", frozenset(s.lower() for s in self.subscriptions))


@dataclass(frozen=True)
class Verdict:
    """Whether an event may be folded; when not, why (``code``: one of REASON_CODES)."""

    trusted: bool
    code: str | None = None
    detail: str = ""
    keyid: str | None = None  # the key that verified it
    sender: str | None = None  # a report's VM key (None: as the report says, when unverified)
    verified: bool = False  # a report whose signature verified with its VM's registered key
    claim: Claim | None = None  # a registration that verified: to bind
    fetch: str | None = None  # a registration waiting for the intermediate at this URL


@dataclass(frozen=True)
class Checked:
    """What a worker found off the fold thread (edge/offload.py): for a report, the raw key its
    signature verified with (None: none of ``tried``); for a registration, the verdict itself."""

    key: bytes | None = None
    tried: tuple[bytes, ...] = ()
    verdict: Verdict | None = None


PASS = Verdict(True, None, "not a type the fold reads")
UNVERIFIED = Verdict(True, None, "an unsigned report of a VM without a registered key")


def _nobody(_vm: str) -> signing.VerifyKeys | None:
    return None


def _unbound(_vm: str) -> Identity | None:
    return None


def check(event: Mapping[str, Any], *, source: str, keys: signing.VerifyKeys,
          registered: Registered = _nobody, attested: Attestation | None = None, now: float | None = None,
          require_signed: bool = True, bound: Bound = _unbound, checked: Checked | None = None) -> Verdict:
    """The verdict on one structured-mode CloudEvent read from the hub (module docstring).

    ``source``: this coordinator's (``urn:se-forwarder:coordinator:<name>``); ``keys``: the keys it
    trusts for decisions; ``registered``: the agents' keys; ``attested``: for registrations;
    ``now``: the hub's enqueued time of the event (epoch seconds); ``bound``: the identities bound
    (a registration's key change is checked against them); ``checked``: the costly part, done
    off the fold thread (edge/offload.py). Never raises on any input.
    """
    kind = event.get("type")
    if not isinstance(kind, str):
        return PASS
    if kind.lower().startswith(AZURE_TYPES):
        return Verdict(False, AZURE, f"{kind[:120]} on the agents' hub: Azure's events come only from the "
                       "Azure feed hub")
    if kind.startswith(DECISION_PREFIX):
        return _decision(event, source, keys)
    if kind == IDENTITY_TYPE:
        if checked is not None and checked.verdict is not None:
            return checked.verdict
        return registration(event, attested, now, bound)
    if kind in REPORT_TYPES:
        return report(event, registered, require_signed, checked)
    return PASS


def _decision(event: Mapping[str, Any], source: str, keys: signing.VerifyKeys) -> Verdict:
    claimed = event.get("source")
    if claimed != source:
        if isinstance(claimed, str) and claimed.startswith(COORDINATOR_SOURCE):
            return Verdict(False, FOREIGN, f"a decision of another coordinator ({claimed[:100]})")
        return Verdict(False, FORGED, f"source {str(claimed)[:100]!r} is no coordinator's")
    return _signed(event, keys, "decision")


def snapshot(document: Mapping[str, Any], keys: signing.VerifyKeys) -> Verdict:
    """The verdict on a snapshot blob's document: signed by a trusted key, or ``forged``."""
    return _signed(document, keys, "snapshot")


def _signed(document: Mapping[str, Any], keys: signing.VerifyKeys, what: str) -> Verdict:
    problem = signing.problem(document, keys)
    if problem is not None:
        return Verdict(False, FORGED, f"the {what} does not verify ({problem})")
    kid = document.get(signing.KEYID_ATTRIBUTE)
    return Verdict(True, None, f"signed with key {kid}", kid if isinstance(kid, str) else None)


def _vm_id(event: Mapping[str, Any]) -> str | None:
    value = event.get("vmid")
    return value if isinstance(value, str) and 0 < len(value) <= 100 and value.isprintable() else None


def report(event: Mapping[str, Any], registered: Registered, require_signed: bool,
           checked: Checked | None = None) -> Verdict:
    """The verdict on an agent's report (module docstring, "Reports"); ``checked``: its signature
    checked off the fold thread, taken only for the key registered now (edge/offload.py)."""
    vm_id = _vm_id(event)
    data = event.get("data")
    if not isinstance(data, Mapping):
        return Verdict(False, BAD_DATA, f"data is {type(data).__name__}, not a JSON object")
    info = data.get("Vm")
    claimed = info.get("vmId") if isinstance(info, Mapping) else None
    if signing.SIGNATURE_ATTRIBUTE not in event:
        if require_signed:
            return Verdict(False, UNSIGNED, "an unsigned report ([trust] require_signed_reports)")
        if vm_id is not None and registered(vm_id.lower()) is not None:
            return Verdict(False, UNSIGNED, f"an unsigned report for {vm_id}, which has a registered key")
        if claimed and (vm_id is None or str(claimed).lower() != vm_id.lower()):
            return Verdict(False, WRONG_VM, f"data.Vm.vmId {str(claimed)[:60]!r} is not its vmid")
        return UNVERIFIED
    if vm_id is None:
        return Verdict(False, UNREGISTERED, "a signed report that names no vmid")
    key = vm_id.lower()
    keys = registered(key)
    if keys is None:
        return Verdict(False, UNREGISTERED, f"no key is registered for vmId {vm_id}", sender=key)
    problem = _signature(event, keys, checked)
    if problem is not None:
        return Verdict(False, BAD_SIGNATURE, f"the report of {vm_id} does not verify ({problem})", sender=key)
    if claimed and str(claimed).lower() != key:
        return Verdict(False, WRONG_VM, f"{vm_id} signed a report whose data.Vm.vmId is "
                       f"{str(claimed)[:60]!r}", sender=key)
    return Verdict(True, None, "signed by its VM", keys.ids[0], sender=key, verified=True)


def registration(event: Mapping[str, Any], attested: Attestation | None, now: float | None,
                 bound: Bound = _unbound, plain: bool = False) -> Verdict:
    """The verdict on an identity (registration) event (module docstring, "Registrations"): the
    cheap checks (the event's shape, a document refused before, the document's claims), then the
    event's own signature, then the document's signature and chain; ``plain``: canonical.read
    found the event plain (its canonical form is then made without looking again)."""
    data = event.get("data")
    vm_id = _vm_id(event)
    raw = _public_key(data.get("PublicKey") if isinstance(data, Mapping) else None)
    if raw is None or vm_id is None or not isinstance(data, Mapping):
        return Verdict(False, IDENTITY_MALFORMED, "not an identity event with a vmid and a PublicKey "
                       "of 32 bytes (base64)")
    if attested is None or now is None:
        return Verdict(False, "identity-untrusted", "no attestation anchors or hub time to judge it by")
    document = data.get("AttestedDocument")
    key = verdicts.digest(document)
    remembered = attested.verdicts.get(key, attested.chains.generation) if key is not None else None
    if remembered is not None:
        return _refused_document(vm_id, remembered)
    kid = signing.raw_keyid(raw)
    current = bound(vm_id.lower())
    newer_than = (datetime.fromtimestamp(current.created_on, UTC)  # a key change needs a newer document,
                  if current is not None and current.keyid != kid  # unless it is the very one bound:
                  and current.document != _der_digest(document) else None)  # a conflict (identities.py)
    when = datetime.fromtimestamp(now, UTC)
    found = attestation.claims(document, nonce=nonces_for(raw), now=when,
                               subscriptions=attested.subscriptions,
                               vm_id=vm_id, newer_than=newer_than)
    if isinstance(found, attestation.Refusal):
        return _refused_document(vm_id, found)
    problem = ed25519.problem(event, raw, kid, plain)
    if problem is not None:
        return Verdict(False, IDENTITY_SIGNATURE, f"the registration of {vm_id} is not signed by the key "
                       f"it registers ({problem})")
    result = attestation.signed(*found, chains=attested.chains, now=when)
    if isinstance(result, attestation.Refusal) and result.reason == "untrusted" and attested.fetched:
        for url in attestation.issuer_urls(document):
            got = attested.fetched(url)
            if got is None:
                return Verdict(False, None, f"waiting for the intermediate at {url}", sender=vm_id.lower(),
                               fetch=url)
            attested.chains.add(got)
        result = attestation.signed(*found, chains=attested.chains, now=when)
    if isinstance(result, attestation.Refusal):
        if key is not None and result.reason in REMEMBERED:
            attested.verdicts.put(key, result, attested.chains.generation)
        return _refused_document(vm_id, result)
    identity = Identity(
        public_key=base64.b64encode(raw).decode("ascii"), keyid=kid,
        created_on=result.created_on.timestamp(), expires_on=result.expires_on.timestamp(),
        document=document_digest(found[0].der), subscription=result.subscription_id.lower(),
        registered_at=now)
    return Verdict(True, None, f"{vm_id} registers key {kid}", kid, sender=vm_id.lower(),
                   verified=True, claim=Claim(vm_id.lower(), identity))


def _der_digest(document: Any) -> str:
    """The digest fold/identities.py knows a document by, from its text alone ("" if unreadable)."""
    text = document.get("signature") if isinstance(document, Mapping) else None
    if not isinstance(text, str) or len(text) > 64 * 1024:
        return ""
    try:
        return document_digest(base64.b64decode("".join(text.split()), validate=True))
    except (binascii.Error, ValueError):
        return ""


def _refused_document(vm_id: str, refusal: attestation.Refusal) -> Verdict:
    return Verdict(False, f"identity-{refusal.reason}", f"the attested document of {vm_id}: {refusal.detail}")


def _signature(event: Mapping[str, Any], keys: signing.VerifyKeys, checked: Checked | None) -> str | None:
    """signing.problem, or what a worker found for the key registered now."""
    if checked is not None and len(keys) == 1:
        raw = getattr(keys, "raw", None) or signing.raw_public(next(iter(keys.by_id.values())))
        if checked.key == raw:
            return None
        if checked.key is None and raw in checked.tried:
            return "its signature does not verify with the key registered for it"
    return signing.problem(event, keys)


def _public_key(value: Any) -> bytes | None:
    if not isinstance(value, str) or len(value) > 100:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == signing.PUBLIC_KEY_BYTES else None
