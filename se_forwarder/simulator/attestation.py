"""Azure's attested data, simulated: a per-run CA signs each VM's document as IMDS does.

``GET /metadata/attested/document?api-version=...&nonce=...`` answers
``{"encoding": "pkcs7", "signature": "<base64 DER>"}`` in Azure's shape:

- a CMS SignedData (version 1, SHA-256, RSA PKCS#1 v1.5, no signed attributes) whose content is
  the compact JSON ``{"licenseType", "nonce", "plan", "sku", "subscriptionId", "timeStamp":
  {"createdOn", "expiresOn"}, "vmId"}`` of the VM (from its instance metadata, so a topology's
  VMs differ), times as ``MM/DD/YY hh:mm:ss -0000`` in UTC;
- signed by a certificate for ``metadata.azure.com`` (subject alternative names
  ``<location>.metadata.azure.com`` and ``metadata.azure.com``, a TLS certificate as Azure's is),
  issued by an intermediate CA, issued by a root CA; all made when first needed, new per server;
- carrying the signing certificate alone, as Azure does: a verifier must be given the
  intermediate (``intermediate_file``) beside the root (``ca_file``), or fetch it from the URL the
  signing certificate names as its "CA Issuers" (``issuer_url``, when given: Azure's name one).

The nonce follows the REST specification: up to 32 letters and digits, else 400; without one,
the document carries the time (``20201130-211924``), as IMDS does. ``nonce_rule="digits"`` plays
an IMDS that keeps to Azure's page instead ("a 10-digit string"): anything else is a 400.
Documents live ``lifetime`` real seconds (6 hours by default, as in Azure's examples); the
simulated clock does not apply.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from se_forwarder.simulator.wire import INSTANCE_VERSIONS

ATTESTED_VERSIONS = tuple(v for v in INSTANCE_VERSIONS if v >= "2018-10-01")
DEFAULT_LIFETIME = 6 * 3600.0
NONCE = re.compile(r"^[A-Za-z0-9]{1,32}\Z")
DIGITS = re.compile(r"^[0-9]{10}\Z")
NONCE_RULES = {"spec": (NONCE, "Bad request. The nonce must be 1 to 32 letters and digits."),
               "digits": (DIGITS, "Bad request. The nonce must be a 10-digit string.")}
TIME_FORMAT = "%m/%d/%y %H:%M:%S -0000"
SIGNER_DOMAIN = "metadata.azure.com"
CERT_DAYS = 30


class NonceError(ValueError):
    """The request's nonce is not what IMDS accepts."""


@dataclass(frozen=True)
class _Chain:
    root: x509.Certificate
    intermediate: x509.Certificate
    signer: x509.Certificate
    signer_key: rsa.RSAPrivateKey


class AttestationAuthority:
    """The simulator's signer of attested documents (module docstring)."""

    def __init__(self, *, lifetime: float = DEFAULT_LIFETIME, directory: str | Path | None = None,
                 location: str = "westeurope", signer_names: Sequence[str] = (),
                 issuer_url: str | None = None, nonce_rule: str = "spec") -> None:
        if lifetime <= 0:
            raise ValueError(f"attestation lifetime must be > 0 seconds, got {lifetime}")
        if nonce_rule not in NONCE_RULES:
            raise ValueError(f"nonce_rule must be one of {', '.join(NONCE_RULES)}, got {nonce_rule!r}")
        self.lifetime, self.nonce_rule = lifetime, nonce_rule
        # The signing certificate's DNS names; Azure's: a regional name and metadata.azure.com.
        self.signer_names = tuple(signer_names) or (f"{location}.{SIGNER_DOMAIN}", SIGNER_DOMAIN)
        self.issuer_url = issuer_url  # the signing certificate's "CA Issuers" URL (the intermediate)
        self._directory = Path(directory) if directory is not None else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._chain: _Chain | None = None
        self._lock = threading.Lock()

    # -- the CA files ---------------------------------------------------------------------------
    @property
    def ca_file(self) -> Path:
        """The root CA certificate (PEM), written when first asked for."""
        return self._write("attestation-root.pem", self.chain.root)

    @property
    def intermediate_file(self) -> Path:
        """The intermediate CA certificate (PEM), which Azure's documents do not carry."""
        return self._write("attestation-intermediate.pem", self.chain.intermediate)

    def _write(self, name: str, cert: x509.Certificate) -> Path:
        with self._lock:
            if self._directory is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="se-forwarder-sim-ca-")
                self._directory = Path(self._tmp.name)
            self._directory.mkdir(parents=True, exist_ok=True)
            path = self._directory / name
            data = cert.public_bytes(serialization.Encoding.PEM)
            if not path.exists() or path.read_bytes() != data:
                path.write_bytes(data)
            return path

    @property
    def intermediate_der(self) -> bytes:
        """The intermediate CA certificate as DER: what an issuer URL serves (a ``.crt`` file)."""
        return self.chain.intermediate.public_bytes(serialization.Encoding.DER)

    @property
    def chain(self) -> _Chain:
        with self._lock:
            if self._chain is None:
                self._chain = _make_chain(self.signer_names, self.issuer_url)
            return self._chain

    # -- documents ------------------------------------------------------------------------------
    def document(self, compute: Mapping[str, Any], nonce: str | None,
                 now: float | None = None) -> dict[str, str]:
        """The attested document of the VM whose instance metadata is ``compute``."""
        rule, refusal = NONCE_RULES[self.nonce_rule]
        if nonce is not None and not rule.match(nonce):
            raise NonceError(refusal)
        created = datetime.fromtimestamp(time.time() if now is None else now, UTC)
        expires = created + timedelta(seconds=self.lifetime)
        given = compute.get("plan")
        plan: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        content = {
            "licenseType": str(compute.get("licenseType") or ""),
            "nonce": nonce if nonce is not None else created.strftime("%Y%m%d-%H%M%S"),
            "plan": {k: str(plan.get(k) or "") for k in ("name", "product", "publisher")},
            "sku": str(compute.get("sku") or ""),
            "subscriptionId": str(compute.get("subscriptionId") or ""),
            "timeStamp": {"createdOn": created.strftime(TIME_FORMAT),
                          "expiresOn": expires.strftime(TIME_FORMAT)},
            "vmId": str(compute.get("vmId") or ""),
        }
        return {"encoding": "pkcs7", "signature": base64.b64encode(self.sign(content)).decode()}

    def sign(self, content: Mapping[str, Any]) -> bytes:
        """The DER SignedData of ``content`` (compact JSON), as Azure builds it."""
        chain = self.chain
        body = json.dumps(content, separators=(",", ":")).encode("utf-8")
        return (pkcs7.PKCS7SignatureBuilder().set_data(body)
                .add_signer(chain.signer, chain.signer_key, hashes.SHA256())
                .sign(serialization.Encoding.DER,
                      [pkcs7.PKCS7Options.NoAttributes, pkcs7.PKCS7Options.Binary]))


def _make_chain(names: Sequence[str], issuer_url: str | None = None) -> _Chain:
    now = datetime.now(UTC) - timedelta(minutes=5)
    root_key, inter_key, signer_key = (rsa.generate_private_key(public_exponent=65537, key_size=2048)
                                       for _ in range(3))
    root = _ca("se-forwarder simulator Root CA", root_key, None, root_key, now, path_length=None)
    inter = _ca("se-forwarder simulator TLS Issuing CA", inter_key, root, root_key, now, path_length=0)
    builder = _builder(names[-1], signer_key, inter, inter_key, now)
    if issuer_url is not None:
        builder = builder.add_extension(x509.AuthorityInformationAccess([x509.AccessDescription(
            x509.AuthorityInformationAccessOID.CA_ISSUERS, x509.UniformResourceIdentifier(issuer_url))]),
            critical=False)
    signer = (builder
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(_usage(signing=True), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                    ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
              .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                             critical=False)
              .sign(inter_key, hashes.SHA256()))
    return _Chain(root, inter, signer, signer_key)


def _ca(name: str, key: rsa.RSAPrivateKey, issuer: x509.Certificate | None,
        issuer_key: rsa.RSAPrivateKey, now: datetime, *, path_length: int | None) -> x509.Certificate:
    return (_builder(name, key, issuer, issuer_key, now)
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
            .add_extension(_usage(signing=False), critical=True)
            .sign(issuer_key, hashes.SHA256()))


def _builder(name: str, key: rsa.RSAPrivateKey, issuer: x509.Certificate | None,
             issuer_key: rsa.RSAPrivateKey, now: datetime) -> x509.CertificateBuilder:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    return (x509.CertificateBuilder().subject_name(subject)
            .issuer_name(issuer.subject if issuer is not None else subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + timedelta(days=CERT_DAYS))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                           critical=False))


def _usage(*, signing: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=signing,
                         data_encipherment=False, key_agreement=False, key_cert_sign=not signing,
                         crl_sign=not signing, encipher_only=False, decipher_only=False)
