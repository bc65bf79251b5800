"""The costly part of trust.py's verdicts, as pure functions a worker process runs off the fold thread.

input/verifier.py hands each worker chunks of work; what comes back is a ``trust.Checked`` per
event, which gate.py passes to trust.check so that the fold thread does only the cheap part:

- a report: ``reports`` checks its signature with the keys it is given (the key bound to its
  vmid when it was read, and the keys the last identity events for that vmid carried), exactly
  as ``signing.problem`` does (a ``keyid`` of 16 hex characters naming the key, a signature of 64
  bytes in base64, over the canonical form), and says which raw key it verified with, if any, and
  which were tried. trust.report takes that only when the key that verified is the one bound
  when the report folds, and a failure only when that key was among those tried; anything else is
  verified again on the fold thread, so a change of binding in between never lets a report through;
- a registration (its JSON text, read as the hub reader read it): ``registration`` is
  trust.registration itself, with the anchors, the allowed subscriptions and the intermediates
  fetched so far (``Job``), and the identity bound to the vmId when it was read (a key change
  must bring a newer document; fold/identities.bind decides again when it folds). Its verdict
  crosses back as plain values (``Answer``), which ``answered`` makes into the ``trust.Checked``
  again.

Ed25519 is verified with libsodium (PyNaCl) where it is installed, else ``cryptography``
(edge/ed25519.py); a report's text is read and its canonical form made by edge/canonical.py.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from ....approvals import signing
from ..config.anchors import AZURE_SIGNER_DOMAINS, Anchors
from ..fold.identities import Claim
from ..fold.state import Identity
from . import trust
from .canonical import canonical, read
from .ed25519 import verifier

_ATTESTED: dict[bytes, trust.Attestation] = {}
_IDENTITY = attrgetter(*(f.name for f in fields(Identity)))  # its values in order: Identity(*values)
ed25519 = verifier  # the reports' verifier per raw key (edge/ed25519.py)


def report(event: Mapping[str, Any], keys: Sequence[bytes], plain: bool = False) -> trust.Checked:
    """Which of ``keys`` the report's signature verifies with (signing.problem's rules); ``plain``:
    canonical.read found the event plain."""
    tried = tuple(keys)
    claimed, kid = event.get(signing.SIGNATURE_ATTRIBUTE), event.get(signing.KEYID_ATTRIBUTE)
    if not isinstance(kid, str) or not signing.KEYID.match(kid) or not isinstance(claimed, str) \
            or len(claimed) > 100:
        return trust.Checked(None, tried)
    try:
        signature = base64.b64decode(claimed, validate=True)
        body = canonical(event, plain)
    except (binascii.Error, ValueError, TypeError, RecursionError):
        return trust.Checked(None, tried)
    if len(signature) != signing.SIGNATURE_BYTES:
        return trust.Checked(None, tried)
    for raw in tried:
        if signing.raw_keyid(raw) == kid and ed25519(raw)(signature, body):
            return trust.Checked(raw, tried)
    return trust.Checked(None, tried)


def ready() -> None:
    """Nothing: what a worker is first sent, so that it starts (and imports this) before any work."""


NOT_READ, NONE = -2, -1  # ``reports``' answers besides the index of the key that verified


def reports(items: Sequence[tuple[bytes | str | Mapping[str, Any], Sequence[bytes]]]) -> list[int]:
    """``report`` for each (event as its JSON text or parsed, keys), as small as it crosses back to
    the service: the index in its keys of the one it verified with, NONE, or NOT_READ (not a JSON
    object: the fold thread judges it itself). ``checked`` makes the ``trust.Checked`` of each."""
    out: list[int] = []
    for text, keys in items:
        try:
            event, plain = read(text) if isinstance(text, bytes | str) else (text, False)
        except (ValueError, UnicodeDecodeError, RecursionError):
            out.append(NOT_READ)
            continue
        if not isinstance(event, Mapping):
            out.append(NOT_READ)
            continue
        found = report(event, keys, plain).key
        out.append(NONE if found is None else list(keys).index(found))
    return out


def checked(answer: int, keys: tuple[bytes, ...]) -> trust.Checked | None:
    """The ``trust.Checked`` of one of ``reports``' answers for a report tried with ``keys``."""
    if answer == NOT_READ:
        return None
    return trust.Checked(keys[answer] if answer >= 0 else None, keys)


@dataclass(frozen=True)
class Job:
    """What a worker judges registrations by: the anchors as PEM (certificates do not pickle), the
    allowed subscriptions, the intermediates fetched so far by URL (as DER)."""

    roots: tuple[bytes, ...]
    intermediates: tuple[bytes, ...] = ()
    domains: tuple[str, ...] = AZURE_SIGNER_DOMAINS
    subscriptions: tuple[str, ...] | None = None
    fetched: dict[str, tuple[bytes, ...]] = field(default_factory=dict)

    @staticmethod
    def of(anchors: Anchors, subscriptions: Sequence[str] | None,
           fetched: Mapping[str, tuple[bytes, ...]] | None = None) -> Job:
        from cryptography.hazmat.primitives.serialization import Encoding

        return Job(tuple(c.public_bytes(Encoding.DER) for c in anchors.roots),
                   tuple(c.public_bytes(Encoding.DER) for c in anchors.intermediates), anchors.domains,
                   tuple(subscriptions) if subscriptions is not None else None, dict(fetched or {}))

    def attestation(self) -> trust.Attestation:
        """The Attestation these stand for, kept per worker (its chain and document caches with it)."""
        from cryptography import x509

        digest = hashlib.sha256(repr((self.roots, self.intermediates, self.domains, self.subscriptions))
                                .encode()).digest()
        known = _ATTESTED.get(digest)
        if known is None:
            load = x509.load_der_x509_certificate
            anchors = Anchors(tuple(load(d) for d in self.roots), tuple(load(d) for d in self.intermediates),
                              self.domains)
            known = _ATTESTED[digest] = trust.Attestation(anchors, self.subscriptions, _FetchedSoFar())
        fetched = known.fetched
        assert isinstance(fetched, _FetchedSoFar)
        fetched.update(self.fetched)
        return known


class _FetchedSoFar:
    """The intermediates the service fetched, by URL: None (to fetch, on the service's side) otherwise."""

    def __init__(self) -> None:
        self._certs: dict[str, Any] = {}

    def update(self, given: Mapping[str, tuple[bytes, ...]]) -> None:
        from cryptography import x509

        for url, ders in given.items():
            if url not in self._certs:
                self._certs[url] = tuple(x509.load_der_x509_certificate(d) for d in ders)

    def __call__(self, url: str) -> Any:
        return self._certs.get(url)


def registration(job: Job, event: Mapping[str, Any], now: float | None,
                 bound: Identity | None) -> trust.Checked:
    """trust.registration's verdict, reached in a worker."""
    return _registration(job.attestation(), event, now, bound)


def _registration(attested: trust.Attestation, event: Mapping[str, Any], now: float | None,
                  bound: Identity | None, plain: bool = False) -> trust.Checked:
    return trust.Checked(verdict=trust.registration(event, attested, now, lambda _vm: bound, plain))


#: A registration's verdict as it crosses back to the service: ``Verdict``'s fields in order, its
#: ``claim`` as (vm, the Identity's fields in order) or None. Plain values unpickle in a tenth of the
#: time of the dataclasses they stand for (the service's collector unpickles one per registration).
Answer = tuple[Any, ...]


def registrations(job: Job, items: Sequence[tuple[bytes | str | Mapping[str, Any], float | None,
                                                  Identity | None]]) -> list[Answer | None]:
    """``registration`` for each (event as its JSON text or parsed, hub time, identity bound to its
    vmId when it was read), the job's attestation found once, each as its ``Answer`` (``answered``
    makes its ``Checked``); None for a text that is not a JSON object (the fold thread judges it)."""
    attested = job.attestation()
    out: list[Answer | None] = []
    for text, now, bound in items:
        try:
            event, plain = read(text) if isinstance(text, bytes | str) else (text, False)
        except (ValueError, UnicodeDecodeError, RecursionError):
            event, plain = None, False
        out.append(answer(_registration(attested, event, now, bound, plain)) if isinstance(event, Mapping)
                   else None)
    return out


def answer(checked: trust.Checked) -> Answer:
    """A registration's ``Checked`` as its ``Answer``."""
    v = checked.verdict
    assert v is not None
    c = v.claim
    claim = None if c is None else (c.vm, *_IDENTITY(c.identity))
    return (v.trusted, v.code, v.detail, v.keyid, v.sender, v.verified, claim, v.fetch)


def answered(given: Answer) -> trust.Checked:
    """The ``Checked`` an ``Answer`` stands for."""
    trusted, code, detail, keyid, sender, verified, claim, fetch = given
    made = None if claim is None else Claim(claim[0], Identity(*claim[1:]))
    return trust.Checked(verdict=trust.Verdict(trusted, code, detail, keyid, sender, verified, made, fetch))
