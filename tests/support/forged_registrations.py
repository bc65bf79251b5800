"""Forged registrations, each kind the review built or that the edge refuses, for tests and benches.

Every forgery is an identity event a VM could send to the hub: signed by the key it registers (so
it passes the event's own signature check, as an attacker's would), carrying an attested document
built here instead of by Azure:

- ``chain_bomb``: the review's attack. Claims that pass the cheap checks (its own key's nonce, the
  event's vmId, a fresh life), a signing certificate whose RSA key has a 3071-bit public exponent,
  and two "intermediates" that issue each other, carried in the SignedData;
- ``huge_exponent``: the same signing certificate carried alone;
- ``carried``: an honest-looking signer (RSA 2048, e = 65537) with its own chain carried in the
  SignedData (the edge builds chains only from configured or fetched intermediates);
- ``self_signed``: a sane key and a self-signed certificate for metadata.azure.com (no chain);
- ``wrong_nonce``: the simulator's genuine document for another key (a copy of someone's);
- ``expired``: the simulator's genuine document, long expired.

``honest`` is a VM's genuine registration, signed by the simulator's authority as IMDS signs.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID

from se_forwarder.approvals import signing
from se_forwarder.identity.attested import nonce_for
from se_forwarder.simulator.attestation import TIME_FORMAT, AttestationAuthority

KINDS = ("chain_bomb", "huge_exponent", "carried", "self_signed", "wrong_nonce", "expired")
_KEYS: dict[str, Any] = {}
_CERTS: dict[str, tuple[x509.Certificate, ...]] = {}


def _rsa(bits: int = 2048) -> rsa.RSAPrivateKey:
    key = _KEYS.get(f"rsa{bits}")
    if key is None:
        key = _KEYS[f"rsa{bits}"] = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return key


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _cert(subject: str, issuer: str, public: Any, signer: rsa.RSAPrivateKey, *, ca: bool,
          dns: str | None = None) -> x509.Certificate:
    now = datetime.now(UTC) - timedelta(hours=1)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(public).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(now + timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _huge_exponent_key() -> rsa.RSAPublicKey:
    """An RSA public key of 3072 bits whose public exponent has 3071 bits (odd, so it is accepted
    by a parser): each verification with it costs a full modular exponentiation."""
    cached = _KEYS.get("huge")
    if cached is None:
        modulus = _rsa(3072).public_key().public_numbers().n
        exponent = (1 << 3070) | int.from_bytes(b"\x5a" * 300, "big") | 1
        cached = _KEYS["huge"] = rsa.RSAPublicNumbers(exponent, modulus).public_key()
    return cached


def _signed_data(content: bytes, signer_cert: x509.Certificate, signer_key: rsa.RSAPrivateKey,
                 extra: list[x509.Certificate]) -> bytes:
    """A CMS SignedData in Azure's shape (v1, SHA-256, no signed attributes) carrying ``extra``
    besides the signer's certificate, signed with ``signer_key`` (which need not match)."""
    from asn1crypto import algos, cms, core
    from asn1crypto import x509 as ax509

    certs = [ax509.Certificate.load(c.public_bytes(serialization.Encoding.DER))
             for c in (signer_cert, *extra)]
    signature = signer_key.sign(content, padding.PKCS1v15(), hashes.SHA256())
    info = cms.SignerInfo({
        "version": "v1",
        "sid": cms.SignerIdentifier({"issuer_and_serial_number": cms.IssuerAndSerialNumber(
            {"issuer": certs[0].issuer, "serial_number": certs[0].serial_number})}),
        "digest_algorithm": algos.DigestAlgorithm({"algorithm": "sha256"}),
        "signature_algorithm": algos.SignedDigestAlgorithm({"algorithm": "rsassa_pkcs1v15"}),
        "signature": signature,
    })
    signed = cms.SignedData({
        "version": "v1", "digest_algorithms": [algos.DigestAlgorithm({"algorithm": "sha256"})],
        "encap_content_info": {"content_type": "data", "content": core.OctetString(content)},
        "certificates": [cms.CertificateChoices({"certificate": c}) for c in certs],
        "signer_infos": [info],
    })
    return cms.ContentInfo({"content_type": "signed_data", "content": signed}).dump()


def _claims(vm_id: str, nonce: str, *, created: float | None = None) -> bytes:
    when = datetime.fromtimestamp(time.time() if created is None else created, UTC)
    return json.dumps({
        "licenseType": "", "nonce": nonce, "plan": {"name": "", "product": "", "publisher": ""},
        "sku": "", "subscriptionId": str(uuid.UUID(int=7)),
        "timeStamp": {"createdOn": when.strftime(TIME_FORMAT),
                      "expiresOn": (when + timedelta(hours=6)).strftime(TIME_FORMAT)},
        "vmId": vm_id}, separators=(",", ":")).encode()


def forged_document(kind: str, vm_id: str, nonce: str, authority: AttestationAuthority) -> dict[str, str]:
    """The attested document of one forgery ``kind`` (module docstring)."""
    if kind == "wrong_nonce":
        return authority.document({"vmId": vm_id, "subscriptionId": str(uuid.UUID(int=7))}, "1234567890")
    if kind == "expired":
        return authority.document({"vmId": vm_id, "subscriptionId": str(uuid.UUID(int=7))}, nonce,
                                  now=time.time() - 7 * 3600)
    content, key = _claims(vm_id, nonce), _rsa()
    certs = _CERTS.get(kind)
    if certs is not None:  # the same certificates for every forgery of a kind: quick to make many
        return {"encoding": "pkcs7", "signature": base64.b64encode(
            _signed_data(content, certs[0], key, list(certs[1:]))).decode()}
    if kind == "chain_bomb":
        first, second = _rsa(2048), _rsa(3072)
        ca_a, ca_b = "Azure RSA TLS Issuing CA 99", "Azure RSA TLS Issuing CA 98"  # each issues the other
        a = _cert(ca_a, ca_b, first.public_key(), second, ca=True)
        b = _cert(ca_b, ca_a, second.public_key(), first, ca=True)
        signer = _cert("metadata.azure.com", ca_a, _huge_exponent_key(), first,
                       ca=False, dns="westeurope.metadata.azure.com")
        der = _signed_data(content, signer, key, [a, b])
    elif kind == "huge_exponent":
        signer = _cert("metadata.azure.com", "Azure RSA TLS Issuing CA 99", _huge_exponent_key(), _rsa(),
                       ca=False, dns="westeurope.metadata.azure.com")
        der = _signed_data(content, signer, key, [])
    elif kind == "carried":
        root = _cert("Forged Root", "Forged Root", _rsa(3072).public_key(), _rsa(3072), ca=True)
        inter = _cert("Forged Issuing CA", "Forged Root", _rsa(4096).public_key(), _rsa(3072), ca=True)
        signer = _cert("metadata.azure.com", "Forged Issuing CA", key.public_key(), _rsa(4096), ca=False,
                       dns="westeurope.metadata.azure.com")
        der = _signed_data(content, signer, key, [inter, root])
    elif kind == "self_signed":
        signer = _cert("metadata.azure.com", "metadata.azure.com", key.public_key(), key, ca=False,
                       dns="westeurope.metadata.azure.com")
        der = _signed_data(content, signer, key, [])
    else:
        raise ValueError(f"no forgery called {kind!r} ({', '.join(KINDS)})")
    from asn1crypto import cms

    carried = cms.ContentInfo.load(der)["content"]["certificates"]
    _CERTS[kind] = tuple(x509.load_der_x509_certificate(c.chosen.dump()) for c in carried)
    return {"encoding": "pkcs7", "signature": base64.b64encode(der).decode()}


def identity_event(vm_id: str, key: Ed25519PrivateKey, document: dict[str, str], *,
                   source: str | None = None, t: float | None = None) -> dict[str, Any]:
    """An identity event for ``vm_id`` registering ``key``, signed by it, carrying ``document``."""
    t = time.time() if t is None else t
    public = signing.public_key_line(key)
    event = {
        "specversion": "1.0", "type": "com.azure.scheduledevents.identity",
        "source": source or f"/subscriptions/{uuid.UUID(int=7)}/resourceGroups/rg/providers/"
                            f"Microsoft.Compute/virtualMachines/{vm_id[:8]}",
        "id": f"identity/{vm_id}/{signing.keyid(key)}/{t:.6f}", "subject": vm_id,
        "time": datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json", "vmid": vm_id,
        "data": {"PublicKey": public, "Nonce": nonce_for(signing.raw_public(key)),
                 "AttestedDocument": document, "AgentVersion": "0.1.0"},
    }
    return signing.sign(event, key)


def forged(kind: str, authority: AttestationAuthority, vm_id: str | None = None,
           key: Ed25519PrivateKey | None = None) -> dict[str, Any]:
    """A forged registration of ``kind`` for ``vm_id`` (default: a fresh GUID)."""
    vm_id = vm_id or str(uuid.uuid4())
    key = key or signing.generate_private_key()
    document = forged_document(kind, vm_id, nonce_for(signing.raw_public(key)), authority)
    return identity_event(vm_id, key, document)


def honest(authority: AttestationAuthority, vm_id: str | None = None,
           key: Ed25519PrivateKey | None = None) -> dict[str, Any]:
    """A VM's genuine registration: its document signed by ``authority`` for its key's nonce."""
    vm_id = vm_id or str(uuid.uuid4())
    key = key or signing.generate_private_key()
    document = authority.document({"vmId": vm_id, "subscriptionId": str(uuid.UUID(int=7))},
                                  nonce_for(signing.raw_public(key)))
    return identity_event(vm_id, key, document)
