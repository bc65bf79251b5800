"""The trust boundary, pure: who may change the fold, decided before anything is folded.

``trust`` gives the verdict on each CloudEvent read from the agents' hub (decisions signed by a
trusted key, registrations with an attested document, reports signed by their VM's registered
key) and on the snapshot; ``gate.Gate`` applies it to one event, holding reports until their VM's
registration, and hands what passes to the fold with the sender it found. ``attestation`` verifies
an IMDS attested document; ``azure_facts`` reads Azure's feed events and Resource Graph rows as
facts; ``shard`` drops what claims another shard's subscription before any of that. Each refusal
has a reason code, a counter and a test; no I/O, no threads, no SDK here.
"""

from __future__ import annotations

from .attestation import Anchors, Attested, issuer_urls, verify
from .azure_facts import domains, vm_row
from .gate import Edge, Gate

__all__ = [
    "Anchors", "Attested", "Edge", "Gate", "domains", "issuer_urls", "verify", "vm_row"
]
