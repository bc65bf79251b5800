"""Verifying an IMDS attested document: pure, nothing fetched, cheap checks first.

The document (``{"encoding": "pkcs7", "signature": <base64 DER>}``), the anchors (roots,
intermediates, allowed signer domains), the nonce the registering key implies
(``identity/attested.nonce_for``),
the vmId the registration names, the key change it would make (the bound document's time), the allowed
subscriptions and the time come in; the verified claims (``Attested``) or a ``Refusal`` with a
reason code go out. ``docs/identity.md`` has the research.

The checks run cheapest first, so that a forgery is refused before any signature or chain work
whenever its claims alone give it away: the parse, then the claims (unverified, so a forger
controls them, but a copy of someone else's document or a stale one is stopped here), then the
SignedData's shape and the signer's key, and only then the one signature check and the chain
(chains.py, with its verdict cached per signing certificate). The reason of each refusal:

======================  ========================================================================
reason                  the document ...
======================  ========================================================================
``malformed``           is not ``{"encoding": "pkcs7", "signature": <base64>}`` holding a CMS
                        SignedData (version 1, or 3 with a key-identifier signer; exactly one
                        signer; the digest algorithm list naming just the signer's; no CRLs, no
                        unsigned attributes) whose content is a JSON object
``nonce``               carries another nonce than the registering key's (its 32 characters or,
                        where IMDS refuses those, its 10 digits)
``claims``              lacks ``vmId`` or a readable ``timeStamp.createdOn`` / ``expiresOn``
``vm``                  names another vmId than the registration's
``expired``             has an ``expiresOn`` before ``now``
``future``              has a ``createdOn`` later than ``now`` plus the allowed skew
``subscription``        names a ``subscriptionId`` outside the allowed ones (when some are given)
``stale``               would change the vmId's key but is not created after the document bound
``no-signer-cert``      does not carry the certificate its signer names
``certificates``        carries more than the signing certificate (Azure's carries it alone)
``signer-key``          is signed with a key Azure does not use (chains.key_problem: RSA 2048 to
                        4096 bits with e = 65537, or ECDSA on P-256 or P-384)
``bad-signature``       has a signature that does not verify with that certificate over the
                        content (or over the signed attributes, whose ``messageDigest`` must be
                        the content's digest and ``contentType`` data); an unsupported algorithm
``untrusted``           is signed by a certificate without a valid chain to a configured root at
                        ``now`` through configured or fetched intermediates (chains.py)
``signer-name``         is signed by a certificate naming no DNS name (subject alternative names,
                        else the common name) equal to or under an allowed domain
======================  ========================================================================

``issuer_urls`` reads, without verifying anything, the "CA Issuers" URLs of the signing
certificate's Authority Information Access: where Azure publishes the intermediate its documents
leave out. A verifier that lacks it may fetch it there (input/intermediates.py) and verify again: the
chain is still checked against the roots, so what is fetched needs no trust.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from ....identity.attested import AttestedFormatError, Unpacked, unpack
from ..config.anchors import Anchors
from . import signed_data
from .chains import Chains
from .signed_data import Refusal
from .signed_data import Refused as _Refused
from .signed_data import Signed as _Signed
from .signed_data import read as _read_signed

DEFAULT_SKEW = timedelta(minutes=5)
REASONS = ("malformed", "nonce", "claims", "vm", "expired", "future", "subscription", "stale",
           "no-signer-cert", "certificates", "signer-key", "bad-signature", "untrusted", "signer-name")
#: Reasons that depend on the document alone (and the anchors), never on who presents it or when.
DOCUMENT_REASONS = ("malformed", "no-signer-cert", "certificates", "signer-key", "bad-signature")

_RSA = {"1.2.840.113549.1.1.1", "1.2.840.113549.1.1.11", "1.2.840.113549.1.1.12",
        "1.2.840.113549.1.1.13"}
_ECDSA = {"1.2.840.10045.4.3.2", "1.2.840.10045.4.3.3", "1.2.840.10045.4.3.4"}


@dataclass(frozen=True)
class Attested:
    """The claims of a document that verified."""

    vm_id: str
    subscription_id: str
    nonce: str
    created_on: datetime
    expires_on: datetime
    sku: str
    license_type: str
    plan: dict[str, str] = field(default_factory=dict)
    signer: str = ""  # the certificate's name that matched an allowed domain


def verify(document: Any, *, anchors: Anchors, nonce: str | tuple[str, ...], now: datetime,
           subscriptions: Collection[str] | None = None, skew: timedelta = DEFAULT_SKEW,
           vm_id: str | None = None, newer_than: datetime | None = None,
           chains: Chains | None = None) -> Attested | Refusal:
    """The verified claims of ``document``, or why it is refused (the module's table): ``claims``
    then ``signed``.

    ``vm_id``: the vmId the registration names (None: any); ``newer_than``: the creation time of
    the document that bound another key to that vmId (a key change must be newer); ``chains``: the
    chain verdicts to reuse (default: a fresh cache for ``anchors``)."""
    found = claims(document, nonce=nonce, now=now, subscriptions=subscriptions, skew=skew, vm_id=vm_id,
                   newer_than=newer_than)
    if isinstance(found, Refusal):
        return found
    return signed(*found, chains=chains or Chains(anchors), now=now)


def claims(document: Any, *, nonce: str | tuple[str, ...], now: datetime,
           subscriptions: Collection[str] | None = None,
           skew: timedelta = DEFAULT_SKEW, vm_id: str | None = None,
           newer_than: datetime | None = None) -> tuple[Unpacked, Attested] | Refusal:
    """The cheap checks: the document parsed and its claims read, nothing verified (the table's
    rows from ``malformed`` to ``stale``)."""
    try:
        try:
            unpacked = signed_data.unpack(document)
        except AttestedFormatError as exc:
            raise _Refused("malformed", str(exc)) from None
        return unpacked, _check_claims(unpacked, nonce, now, subscriptions, skew, vm_id, newer_than)
    except _Refused as refused:
        return refused.refusal
    except Exception as exc:  # noqa: BLE001 - hostile input
        return Refusal("malformed", f"a part of the document cannot be read ({type(exc).__name__}: "
                       f"{exc})"[:300])


def signed(unpacked: Unpacked, attested: Attested, *, chains: Chains, now: datetime) -> Attested | Refusal:
    """The costly checks of a document whose claims passed: its shape, its signer's key, the one
    signature check and the chain (the table's rows from ``no-signer-cert``)."""
    try:
        read = _read_signed(unpacked)
        problem = chains.key_problem(read.cert, read.cert_der)
        if problem is not None:
            raise _Refused("signer-key", f"the document is signed with {problem}")
        _verify_with(read)
        chain = chains.verdict(read.cert, read.cert_der, now)
        if chain.name is None:
            raise _Refused(chain.reason, chain.detail)
        return Attested(attested.vm_id, attested.subscription_id, attested.nonce, attested.created_on,
                        attested.expires_on, attested.sku, attested.license_type, attested.plan, chain.name)
    except _Refused as refused:
        return refused.refusal
    except Exception as exc:  # noqa: BLE001 - hostile input: cryptography and asn1crypto parse
        # some parts only when asked for them, and raise their own errors (InvalidVersion...)
        return Refusal("malformed", f"a part of the document cannot be read ({type(exc).__name__}: "
                       f"{exc})"[:300])


def issuer_urls(document: Any) -> tuple[str, ...]:
    """The http(s) "CA Issuers" URLs of the document's signing certificate (unverified); () when
    there are none or the document cannot be read."""
    try:
        cert = _read_signed(unpack(document)).cert
        aia = cert.extensions.get_extension_for_class(x509.AuthorityInformationAccess).value
        urls = [d.access_location.value for d in aia if d.access_method == x509.AuthorityInformationAccessOID
                .CA_ISSUERS and isinstance(d.access_location, x509.UniformResourceIdentifier)]
    except Exception:  # noqa: BLE001 - hostile input; nothing to fetch then
        return ()
    return tuple(u for u in urls[:4] if isinstance(u, str) and u.lower().startswith(("http://", "https://"))
                 and len(u) <= 500)


def _verify_with(signed: _Signed) -> None:
    """The one signature check of a document: its signer's key over what it signed."""
    try:
        key = signed.cert.public_key()
        if signed.algorithm in _RSA and isinstance(key, rsa.RSAPublicKey):
            key.verify(signed.signature, signed.message, padding.PKCS1v15(), signed.hash_type())
        elif signed.algorithm in _ECDSA and isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signed.signature, signed.message, ec.ECDSA(signed.hash_type()))
        else:
            raise _Refused("bad-signature", f"unsupported signature algorithm {signed.algorithm} for "
                           f"a {type(key).__name__}")
    except (InvalidSignature, UnsupportedAlgorithm, ValueError):
        raise _Refused("bad-signature", "the signature does not verify over the content") from None


def _check_claims(unpacked: Unpacked, nonce: str | tuple[str, ...], now: datetime,
                  subscriptions: Collection[str] | None,
                  skew: timedelta, vm_id: str | None, newer_than: datetime | None) -> Attested:
    """The claims, unverified: what gives a forgery away before any signature work."""
    claims, found, vm = unpacked.claims, unpacked.nonce, unpacked.vm_id
    allowed = (nonce,) if isinstance(nonce, str) else nonce
    if found not in allowed:
        raise _Refused("nonce", f"the document's nonce {str(found)[:40]!r} is not the "
                       f"registering key's ({' or '.join(allowed)})")
    created, expires = unpacked.times()
    if vm is None or created is None or expires is None:
        raise _Refused("claims", "vmId, timeStamp.createdOn or timeStamp.expiresOn is missing")
    if vm_id is not None and vm.lower() != vm_id.lower():
        raise _Refused("vm", f"the attested document is {vm[:60]}'s, not {vm_id[:60]}'s")
    if expires < now:
        raise _Refused("expired", f"the document expired at {expires.isoformat()}")
    if created > now + skew:
        raise _Refused("future", f"the document is created at {created.isoformat()}, ahead of "
                       "the coordinator's clock")
    subscription = _text(claims.get("subscriptionId"))
    lowered = subscription.lower()  # found at once in a lowered set (trust.Attestation's), else here
    if subscriptions is not None and lowered not in subscriptions \
            and lowered not in {s.lower() for s in subscriptions}:
        raise _Refused("subscription", f"subscription {subscription[:60]!r} is not allowed")
    if newer_than is not None and created <= newer_than:
        raise _Refused("stale", f"another key is bound to {vm[:60]} by a document created at "
                       f"{newer_than.isoformat()}; this one is not newer")
    plan = claims.get("plan")
    return Attested(
        vm_id=vm, subscription_id=subscription, nonce=str(found), created_on=created,
        expires_on=expires, sku=_text(claims.get("sku")), license_type=_text(claims.get("licenseType")),
        plan={str(k): _text(v) for k, v in plan.items()} if isinstance(plan, Mapping) else {})


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
