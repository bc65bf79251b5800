"""Verdicts on attested documents remembered by the document's digest, refusals included. Pure.

A registration's document is judged once: the same document presented again (an agent announces
it after every restart, a forger sends its copy again and again) gets the remembered answer
without a parse, a signature check or a chain. What is remembered is what depends on the document
and the anchors alone (attestation.DOCUMENT_REASONS, the chain's ``untrusted`` and
``signer-name`` until an intermediate is fetched); the claims that depend on who presents it and
when (the nonce, the vmId, its life, the subscription) are cheap and checked every time.

``Verdicts`` is an LRU of ``ENTRIES`` digests; ``hits`` and ``misses`` say how well it serves.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Generic, TypeVar

ENTRIES = 100_000  # about 100 bytes each: 10 MB at most
V = TypeVar("V")


def digest(document: Any) -> str | None:
    """The digest a document is remembered by: SHA-256 of its signature text (None: no text)."""
    text = document.get("signature") if isinstance(document, dict) else None
    if not isinstance(text, str):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Verdicts(Generic[V]):
    """An LRU from a document digest (and the anchors' generation) to its verdict."""

    def __init__(self, entries: int = ENTRIES) -> None:
        self.entries = entries
        self._known: OrderedDict[tuple[str, int], V] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: str, generation: int = 0) -> V | None:
        found = self._known.get((key, generation))
        if found is None:
            self.misses += 1
            return None
        self._known.move_to_end((key, generation))
        self.hits += 1
        return found

    def put(self, key: str, verdict: V, generation: int = 0) -> None:
        self._known[(key, generation)] = verdict
        self._known.move_to_end((key, generation))
        while len(self._known) > self.entries:
            self._known.popitem(last=False)

    def __len__(self) -> int:
        return len(self._known)
