"""The signing certificate's chain to a configured root, built within bounds and its verdict cached. Pure.

An attested document's signature is checked with the certificate it carries; whether that
certificate is Azure's is this module's question. Its answer never depends on what a document
carries besides that certificate: a chain is built only from the configured intermediates
(``[trust] attestation_intermediates``, Azure's by default) and those fetched from Azure's PKI
paths (input/intermediates.py), never from certificates a sender put in the SignedData. So a
forger cannot hand the path builder two "intermediates" that issue each other and make it walk
until the signature-check limit of ``cryptography``.

Bounds, per document: paths are found by name alone (the issuer's subject and, when both say it,
the key identifiers), without any signature check, at most ``MAX_DEPTH`` certificates below a
root, no certificate twice in a path, at most ``MAX_PATHS`` paths; each path is then checked by
``cryptography``'s verifier (validity, basic constraints, key usage, signatures) with exactly that
path, until ``MAX_SIGNATURE_CHECKS`` signatures were checked. A path costs one signature check per
certificate in it.

Keys: a signing certificate's key must be one Azure uses (``key_problem``): RSA of 2048 to 4096
bits with the public exponent 65537, or ECDSA on P-256 or P-384 (the curves of the Microsoft Azure
ECC TLS Issuing CAs and of Microsoft ECC Root Certificate Authority 2017). A 3071-bit exponent is
refused before anything is computed with it; the answer is kept with the chain's (``Chains``).

``Chains`` remembers, by the signing certificate's SHA-256 (the same few certificates sign every
VM's document in a region), in one LRU of ``ENTRIES``, both verdicts on it: its key's
(``key_problem``: reading the key's size and exponent costs a tenth of the signature check) and
its chain's. A chain's verdict that holds keeps the window in which every certificate of its chain
is valid (outside it the chain is built again); a refusal holds until the intermediates change (a
fetch), so a forger's certificate is looked at once.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509 import verification

from ..config.anchors import Anchors

MAX_DEPTH = 3  # certificates from the signer up to (not counting) the root
MAX_PATHS = 4
MAX_SIGNATURE_CHECKS = 8
ENTRIES = 1024
RSA_BITS = (2048, 4096)
RSA_EXPONENT = 65537
EC_CURVES = (ec.SECP256R1, ec.SECP384R1)


def key_problem(cert: x509.Certificate) -> str | None:
    """Why the certificate's key is not one Azure signs with (one line), or None (``Chains``
    remembers it per signing certificate)."""
    try:
        key = cert.public_key()
    except (ValueError, TypeError) as exc:
        return f"the signing certificate's key cannot be read ({exc})"[:200]
    if isinstance(key, rsa.RSAPublicKey):
        bits, exponent = key.key_size, key.public_numbers().e
        if not RSA_BITS[0] <= bits <= RSA_BITS[1]:
            return f"an RSA key of {bits} bits (Azure's have {RSA_BITS[0]} to {RSA_BITS[1]})"
        if exponent != RSA_EXPONENT:
            return f"an RSA key with the public exponent of {exponent.bit_length()} bits (Azure's is 65537)"
        return None
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, EC_CURVES):
            return f"an EC key on {key.curve.name} (Azure's are on P-256 or P-384)"
        return None
    return f"a {type(key).__name__} (Azure signs with RSA or ECDSA keys)"


@dataclass(frozen=True)
class ChainVerdict:
    """A chain's verdict: the allowed name it carries (``name``), or why not (``reason``, ``detail``),
    and the window in which it holds (epoch seconds)."""

    name: str | None
    reason: str = ""
    detail: str = ""
    valid_from: float = 0.0
    valid_until: float = 0.0
    checks: int = 0  # signatures checked to reach it


def _ski(cert: x509.Certificate) -> bytes | None:
    try:
        return cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except (x509.ExtensionNotFound, ValueError):
        return None


def _aki(cert: x509.Certificate) -> bytes | None:
    try:
        return cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
    except (x509.ExtensionNotFound, ValueError):
        return None


def _issues(issuer: x509.Certificate, cert: x509.Certificate) -> bool:
    """Whether ``issuer`` may have issued ``cert``, by names only (no signature is checked)."""
    if issuer.subject != cert.issuer:
        return False
    aki, ski = _aki(cert), _ski(issuer)
    return aki is None or ski is None or aki == ski


def paths(cert: x509.Certificate, intermediates: Sequence[x509.Certificate],
          roots: Sequence[x509.Certificate]) -> list[tuple[list[x509.Certificate], x509.Certificate]]:
    """Candidate (intermediates, root) paths above ``cert``: by name, bounded (module docstring)."""
    found: list[tuple[list[x509.Certificate], x509.Certificate]] = []

    def walk(current: x509.Certificate, above: list[x509.Certificate]) -> None:
        for root in roots:
            if len(found) < MAX_PATHS and _issues(root, current):
                found.append((list(above), root))
        if len(above) >= MAX_DEPTH - 1:
            return
        for inter in intermediates:
            if len(found) >= MAX_PATHS:
                return
            if inter is not current and inter not in above and inter != cert and _issues(inter, current):
                walk(inter, [*above, inter])

    walk(cert, [])
    return found


class _Signer:
    """What ``Chains`` remembers of one signing certificate."""

    __slots__ = ("key", "generation", "chain")

    def __init__(self, key: str | None) -> None:
        self.key = key  # key_problem's answer
        self.generation = -1  # the intermediates' generation ``chain`` was reached with
        self.chain: ChainVerdict | None = None


class Chains:
    """Verdicts on signing certificates for one set of anchors, cached (module docstring). Not
    thread-safe: one per verifying thread or process."""

    def __init__(self, anchors: Anchors, entries: int = ENTRIES) -> None:
        self.anchors = anchors
        self.entries = entries
        self._cache: OrderedDict[bytes, _Signer] = OrderedDict()
        self._last: tuple[bytes, bytes] = (b"", b"")  # the DER last looked up, its SHA-256
        self._extra: dict[bytes, x509.Certificate] = {}  # fetched intermediates, by their SHA-256
        self.built = self.hits = 0

    def add(self, certificates: Iterable[x509.Certificate]) -> None:
        """Intermediates fetched from Azure's PKI paths: a chain may now be found that was not."""
        for cert in certificates:
            digest = hashlib.sha256(cert.tbs_certificate_bytes).digest()
            self._extra.setdefault(digest, cert)

    @property
    def generation(self) -> int:
        return len(self._extra)

    def _signer(self, cert: x509.Certificate, der: bytes) -> _Signer:
        """What is remembered of the signing certificate ``cert`` (DER ``der``), made the newest."""
        last, digest = self._last
        if der is not last:  # the same object: a signer's documents share their certificate's bytes
            digest = hashlib.sha256(der).digest()
            self._last = (der, digest)
        found = self._cache.get(digest)
        if found is None:
            found = self._cache[digest] = _Signer(key_problem(cert))
            while len(self._cache) > self.entries:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(digest)
        return found

    def key_problem(self, cert: x509.Certificate, der: bytes) -> str | None:
        """``key_problem(cert)``, remembered by the certificate's DER ``der``."""
        return self._signer(cert, der).key

    def verdict(self, cert: x509.Certificate, der: bytes, now: datetime) -> ChainVerdict:
        """The chain verdict of the signing certificate ``cert`` (DER ``der``) at ``now``."""
        signer = self._signer(cert, der)
        known = signer.chain
        if known is not None and signer.generation == self.generation and (
                known.name is None or known.valid_from <= now.timestamp() <= known.valid_until):
            self.hits += 1
            return known
        signer.chain, signer.generation = self._build(cert, now), self.generation
        self.built += 1
        return signer.chain

    def _build(self, cert: x509.Certificate, now: datetime) -> ChainVerdict:
        anchors = self.anchors
        if not anchors.roots:
            return ChainVerdict(None, "untrusted", "no trust anchor is configured")
        intermediates = [*anchors.intermediates, *self._extra.values()]
        candidates = paths(cert, intermediates, anchors.roots)
        checks, last = 0, "no configured or fetched intermediate and no root names its issuer " \
            f"({cert.issuer.rfc4514_string()[:160]})"
        for above, root in candidates:
            if checks + len(above) + 1 > MAX_SIGNATURE_CHECKS:
                last = f"more than {MAX_SIGNATURE_CHECKS} signature checks would be needed"
                break
            checks += len(above) + 1
            try:
                _verifier(root, now).verify(cert, above)
            except (verification.VerificationError, ValueError) as exc:
                last = str(exc)[:200]
                continue
            chain = [cert, *above, root]
            name = _allowed_name(cert, anchors.domains)
            valid_from = max(c.not_valid_before_utc for c in chain).timestamp()
            valid_until = min(c.not_valid_after_utc for c in chain).timestamp()
            if name is None:
                names = ", ".join(_dns_names(cert)) or "no name"
                why = f"the signing certificate is for {names[:200]}, not under {', '.join(anchors.domains)}"
                return ChainVerdict(None, "signer-name", why, valid_from, valid_until, checks)
            return ChainVerdict(name, "", "", valid_from, valid_until, checks)
        subject = cert.subject.rfc4514_string()[:160]
        return ChainVerdict(None, "untrusted", f"the signing certificate {subject} does not chain to a "
                            f"configured root: {last}", checks=checks)


def _verifier(root: x509.Certificate, now: datetime) -> verification.ClientVerifier:
    ee_policy = verification.ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.ExtendedKeyUsage, verification.Criticality.AGNOSTIC, None)  # Azure's is a TLS cert
    return (verification.PolicyBuilder().store(verification.Store([root])).time(now)
            .max_chain_depth(MAX_DEPTH)
            .extension_policies(ca_policy=verification.ExtensionPolicy.webpki_defaults_ca(),
                                ee_policy=ee_policy)
            .build_client_verifier())


def _allowed_name(cert: x509.Certificate, domains: Sequence[str]) -> str | None:
    for name in _dns_names(cert):
        if any(name == d or name.endswith("." + d) for d in domains):
            return name
    return None


def _dns_names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]
    return [n.lower().rstrip(".") for n in names]
