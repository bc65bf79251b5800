"""Who may change the fold: the verdict on each CloudEvent read from the hub, before it is folded.

Every VM's identity may send to the hub, and Event Hubs does not tell a reader who sent a
message, so nothing read there is taken on its word. ``check`` is a pure function of the event,
this coordinator's ``source`` and the keys it trusts (injected), like
``approvals/messages.validate``. The service folds an event only when the verdict is trusted, and
counts every other verdict by its reason code (``/metrics``:
``se_forwarder_coordinator_refused_total{reason}``; ``coordinator status``; ``/v1/status``
``service.refused``). The checks, in this order; the first that applies decides:

=============  ==================================================================================
``azure``      an event of Azure's own types (``Microsoft.ResourceNotifications.*``, such as the
               ``ScheduledEventEmitted`` of Azure's feed): only the Azure feed hub, which no VM can
               send to, carries those (azure_input.py); on the agents' hub it is a VM's forgery
(trusted)      not a decision: ``type`` does not start with ``com.azure.scheduledevents.
               coordinator.``. An agent's report, folded as sent (reports are not bound to their
               senders yet: docs/coordinator.md says what a VM can still do with that)
``foreign``    a decision whose ``source`` is another coordinator's
               (``urn:se-forwarder:coordinator:<another name>``), such as a shadow coordinator
               under its own name. It is never folded here, so its signature is not looked at
``forged``     a decision whose ``source`` is no coordinator's at all
``forged``     a decision in this coordinator's name that does not verify: no ``signature``, no
               ``keyid``, a ``keyid`` naming no trusted key, a signature that is not base64 of 64
               bytes or does not verify over the canonical bytes (approvals/signing.py)
(trusted)      a decision in this coordinator's name, signed by a trusted key
=============  ==================================================================================

The trusted keys (``VerifyKeys``, by key id): the public key of ``[signing] key_file`` (every one
the file held since the service started, so a key replaced while running still verifies what it
signed) and ``[trust] coordinator_keys``: a previous key, for as long as the hub's retention and
the snapshot hold what it signed, and a standby's key when it signs with another one.

``foreign`` comes before the signature on purpose: another coordinator's decisions are skipped
whatever they carry, and a shadow coordinator may well sign with a key this one does not trust, so
checking first would count an honest shadow as a forger. A forgery in another coordinator's name
changes nothing here either; it is counted as ``foreign``.

``snapshot`` is the same check for the snapshot blob (blobs.py): a snapshot replaces the fold, so
it is taken only when signed by a trusted key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...approvals import signing
from .fold import DECISION_PREFIX

COORDINATOR_SOURCE = "urn:se-forwarder:coordinator:"
FOREIGN, FORGED, AZURE = "foreign", "forged", "azure"
REASON_CODES = (FOREIGN, FORGED, AZURE)
AZURE_TYPES = "microsoft.resourcenotifications."


@dataclass(frozen=True)
class Verdict:
    """Whether an event may be folded; when not, why (``code``: one of REASON_CODES)."""

    trusted: bool
    code: str | None = None
    detail: str = ""
    keyid: str | None = None  # the trusted key that verified it (decisions and snapshots)


REPORT = Verdict(True, None, "a report")


def check(event: Mapping[str, Any], *, source: str, keys: signing.VerifyKeys) -> Verdict:
    """The verdict on one structured-mode CloudEvent read from the hub (module docstring).

    ``source``: this coordinator's (``urn:se-forwarder:coordinator:<name>``); ``keys``: the keys it
    trusts.
    Never raises on any input.
    """
    kind = event.get("type")
    if isinstance(kind, str) and kind.lower().startswith(AZURE_TYPES):
        return Verdict(False, AZURE, f"{kind[:120]} on the agents' hub: Azure's events come only from the "
                       "Azure feed hub")
    if not isinstance(kind, str) or not kind.startswith(DECISION_PREFIX):
        return REPORT
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
