"""Verifying an IMDS attested document: the coordinator's check of an agent's registration.

Pure, like ``approvals/messages.validate``: the document (the JSON object IMDS answered), the trust
anchors, the nonce the registering key implies (``identity/attested.nonce_for``), the allowed
subscriptions and the time come in; the verified claims (``Attested``) or a ``Refusal`` with a
reason code go out. Nothing is fetched: the intermediates Azure does not put in the SignedData come
with the anchors (``config/anchors.py`` loads them). ``docs/identity.md`` has the research.

The checks, in order, and the reason of each refusal:

======================  ========================================================================
reason                  the document ...
======================  ========================================================================
``malformed``           is not ``{"encoding": "pkcs7", "signature": <base64>}`` holding a CMS
                        SignedData (version 1, or 3 with a key-identifier signer; exactly one
                        signer; the digest algorithm list naming just the signer's; no CRLs, no
                        unsigned attributes) whose content is a JSON object
``no-signer-cert``      does not carry the certificate its signer names
``bad-signature``       has a signature that does not verify with that certificate over the
                        content (or over the signed attributes, whose ``messageDigest`` must be
                        the content's digest and ``contentType`` data); an unsupported algorithm
``untrusted``           is signed by a certificate without a valid chain to a configured root at
                        ``now`` (through configured intermediates and the SignedData's own)
``signer-name``         is signed by a certificate naming no DNS name (subject alternative names,
                        else the common name) equal to or under an allowed domain
``nonce``               carries another nonce than the registering key's
``claims``              lacks ``vmId`` or a readable ``timeStamp.createdOn`` / ``expiresOn``
``expired``             has an ``expiresOn`` before ``now``
``future``              has a ``createdOn`` later than ``now`` plus the allowed skew
``subscription``        names a ``subscriptionId`` outside the allowed ones (when some are given)
======================  ========================================================================

``issuer_urls`` reads, without verifying anything, the "CA Issuers" URLs of the signing
certificate's Authority Information Access: where Azure publishes the intermediate its documents
leave out. A verifier that lacks it may fetch it there (input/intermediates.py) and verify again: the
chain is still checked against the roots, so what is fetched needs no trust.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509 import verification

from ....identity.attested import AttestedFormatError, Unpacked, unpack
from ..config.anchors import Anchors

DEFAULT_SKEW = timedelta(minutes=5)
REASONS = ("malformed", "no-signer-cert", "bad-signature", "untrusted", "signer-name", "nonce",
           "claims", "expired", "future", "subscription")

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "2.16.840.1.101.3.4.2.1": hashes.SHA256, "2.16.840.1.101.3.4.2.2": hashes.SHA384,
    "2.16.840.1.101.3.4.2.3": hashes.SHA512,
    # Azure names the digest algorithm by sha256WithRSAEncryption's identifier.
    "1.2.840.113549.1.1.11": hashes.SHA256, "1.2.840.113549.1.1.12": hashes.SHA384,
    "1.2.840.113549.1.1.13": hashes.SHA512,
}
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


@dataclass(frozen=True)
class Refusal:
    """Why a document was refused: ``reason`` (one of ``REASONS``) and one line of detail."""

    reason: str
    detail: str


class _Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.refusal = Refusal(reason, detail[:300])


def verify(document: Any, *, anchors: Anchors, nonce: str, now: datetime,
           subscriptions: Collection[str] | None = None,
           skew: timedelta = DEFAULT_SKEW) -> Attested | Refusal:
    """The verified claims of ``document``, or why it is refused (the module's table)."""
    try:
        try:
            unpacked = unpack(document)
        except AttestedFormatError as exc:
            raise _Refused("malformed", str(exc)) from None
        signer_cert, extra = _check_signature(unpacked)
        signer = _check_chain(signer_cert, extra, anchors, now)
        return _check_claims(unpacked, signer, nonce, now, subscriptions, skew)
    except _Refused as refused:
        return refused.refusal
    except Exception as exc:  # noqa: BLE001 - hostile input: cryptography and asn1crypto parse
        # some parts only when asked for them, and raise their own errors (InvalidVersion...)
        return Refusal("malformed", f"a part of the document cannot be read ({type(exc).__name__}: "
                       f"{exc})"[:300])


def issuer_urls(document: Any) -> tuple[str, ...]:
    """The http(s) "CA Issuers" URLs of the document's signing certificate (unverified); () when
    there are none or the document cannot be read."""
    from asn1crypto import cms, core

    try:
        signed = cms.ContentInfo.load(unpack(document).der, strict=True)["content"]
        sid = signed["signer_infos"][0]["sid"]
        certificates = signed["certificates"]
        carried = [] if isinstance(certificates, core.Void) else [
            c.chosen for c in certificates if c.name == "certificate"]
        cert = next((c for c in carried if _names(c, sid)), None)
        if cert is None:
            return ()
        aia = x509.load_der_x509_certificate(cert.dump()).extensions.get_extension_for_class(
            x509.AuthorityInformationAccess).value
        urls = [d.access_location.value for d in aia if d.access_method == x509.AuthorityInformationAccessOID
                .CA_ISSUERS and isinstance(d.access_location, x509.UniformResourceIdentifier)]
    except Exception:  # noqa: BLE001 - hostile input; nothing to fetch then
        return ()
    return tuple(u for u in urls[:4] if isinstance(u, str) and u.lower().startswith(("http://", "https://"))
                 and len(u) <= 500)


def _check_signature(unpacked: Unpacked) -> tuple[x509.Certificate, list[x509.Certificate]]:
    """The signer's certificate (and the others carried) once the signature verified."""
    from asn1crypto import cms, core

    try:
        signed = cms.ContentInfo.load(unpacked.der, strict=True)["content"]
        infos = signed["signer_infos"]
        if len(infos) != 1:
            raise _Refused("malformed", f"{len(infos)} signers; an attested document has one")
        info = infos[0]
        digest_oid = info["digest_algorithm"]["algorithm"].dotted
        listed = [a["algorithm"].dotted for a in signed["digest_algorithms"]]
        sid = info["sid"]
        version = signed["version"].native
        certificates = signed["certificates"]
        carried = [] if isinstance(certificates, core.Void) else [
            c.chosen for c in certificates if c.name == "certificate"]
        if (version, sid.name) not in (("v1", "issuer_and_serial_number"),
                                       ("v3", "subject_key_identifier")):
            raise _Refused("malformed", f"SignedData {version} with a {sid.name} signer")
        if listed != [digest_oid] or signed["crls"].native or info["unsigned_attrs"].native:
            raise _Refused("malformed", "digest algorithms, CRLs or unsigned attributes out of place")
        if info["version"].native != version or not all(
                a["parameters"].dump() in (b"", b"\x05\x00") for a in (
                    *signed["digest_algorithms"], info["digest_algorithm"], info["signature_algorithm"])):
            raise _Refused("malformed", "a signer version or algorithm parameters out of place")
        cert = next((c for c in carried if _names(c, sid)), None)
        if cert is None:
            raise _Refused("no-signer-cert", "the SignedData lacks the signer's certificate")
        if cert["signature_value"].contents[:1] != b"\x00":
            raise _Refused("malformed", "the signer's certificate has a padded signature")
        signed_attrs = info["signed_attrs"]
        attrs = {a["type"].native: a["values"] for a in signed_attrs} if signed_attrs.native else None
        signature = info["signature"].native
        algorithm = info["signature_algorithm"]["algorithm"].dotted
        chosen = x509.load_der_x509_certificate(cert.dump())
        others = [x509.load_der_x509_certificate(c.dump()) for c in carried if c is not cert]
    except _Refused:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise _Refused("malformed", f"the SignedData cannot be read ({exc})") from None
    hash_type = _HASHES.get(digest_oid)
    if hash_type is None:
        raise _Refused("bad-signature", f"unsupported digest algorithm {digest_oid}")
    message = unpacked.content
    if attrs is not None:
        hasher = hashes.Hash(hash_type())
        hasher.update(unpacked.content)
        digest = hasher.finalize()
        if [v.native for v in attrs.get("message_digest", [])] != [digest]:
            raise _Refused("bad-signature", "messageDigest is not the content's digest")
        if [v.native for v in attrs.get("content_type", [])] != ["data"]:
            raise _Refused("bad-signature", "the signed contentType is not data")
        message = b"\x31" + signed_attrs.dump()[1:]  # signed as a SET OF, not as [0]
    _verify_with(chosen, algorithm, hash_type(), signature, message)
    return chosen, others


def _names(cert: Any, sid: Any) -> bool:
    """Whether the asn1crypto certificate ``cert`` is the one the signer identifier names."""
    if sid.name == "issuer_and_serial_number":
        return bool(cert.issuer == sid.chosen["issuer"]
                    and cert.serial_number == sid.chosen["serial_number"].native)
    return bool(cert.key_identifier == sid.chosen.native)


def _verify_with(cert: x509.Certificate, algorithm: str, hash_algo: hashes.HashAlgorithm,
                 signature: bytes, message: bytes) -> None:
    try:
        key = cert.public_key()
        if algorithm in _RSA and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, message, padding.PKCS1v15(), hash_algo)
        elif algorithm in _ECDSA and isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, message, ec.ECDSA(hash_algo))
        else:
            raise _Refused("bad-signature", f"unsupported signature algorithm {algorithm} for "
                           f"a {type(key).__name__}")
    except (InvalidSignature, UnsupportedAlgorithm, ValueError):
        raise _Refused("bad-signature", "the signature does not verify over the content") from None


def _check_chain(cert: x509.Certificate, carried: Sequence[x509.Certificate], anchors: Anchors,
                 now: datetime) -> str:
    """The allowed name ``cert`` carries, once it chains to a root at ``now``."""
    if not anchors.roots:
        raise _Refused("untrusted", "no trust anchor is configured")
    ee_policy = verification.ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.ExtendedKeyUsage, verification.Criticality.AGNOSTIC, None)  # Azure's is a TLS cert
    verifier = (verification.PolicyBuilder().store(verification.Store(list(anchors.roots)))
                .time(now).extension_policies(
                    ca_policy=verification.ExtensionPolicy.webpki_defaults_ca(), ee_policy=ee_policy)
                .build_client_verifier())
    try:
        verifier.verify(cert, [*anchors.intermediates, *carried])
    except (verification.VerificationError, ValueError) as exc:
        raise _Refused("untrusted", f"the signing certificate {cert.subject.rfc4514_string()} "
                       f"does not chain to a configured root: {exc}") from None
    names = _dns_names(cert)
    for name in names:
        if any(name == d or name.endswith("." + d) for d in anchors.domains):
            return name
    raise _Refused("signer-name", f"the signing certificate is for {', '.join(names) or 'no name'}, "
                   f"not under {', '.join(anchors.domains)}")


def _dns_names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]
    return [n.lower().rstrip(".") for n in names]


def _check_claims(unpacked: Unpacked, signer: str, nonce: str, now: datetime,
                  subscriptions: Collection[str] | None, skew: timedelta) -> Attested:
    claims = unpacked.claims
    if unpacked.nonce != nonce:
        raise _Refused("nonce", f"the document's nonce {str(unpacked.nonce)[:40]!r} is not the "
                       f"registering key's {nonce}")
    created, expires = unpacked.times()
    if unpacked.vm_id is None or created is None or expires is None:
        raise _Refused("claims", "vmId, timeStamp.createdOn or timeStamp.expiresOn is missing")
    if expires < now:
        raise _Refused("expired", f"the document expired at {expires.isoformat()}")
    if created > now + skew:
        raise _Refused("future", f"the document is created at {created.isoformat()}, ahead of "
                       "the coordinator's clock")
    subscription = _text(claims.get("subscriptionId"))
    if subscriptions is not None and subscription.lower() not in {s.lower() for s in subscriptions}:
        raise _Refused("subscription", f"subscription {subscription[:60]!r} is not allowed")
    plan = claims.get("plan")
    return Attested(
        vm_id=unpacked.vm_id, subscription_id=subscription, nonce=nonce, created_on=created,
        expires_on=expires, sku=_text(claims.get("sku")), license_type=_text(claims.get("licenseType")),
        plan={str(k): _text(v) for k, v in plan.items()} if isinstance(plan, Mapping) else {},
        signer=signer)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
