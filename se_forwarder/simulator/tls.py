"""A throwaway certificate authority for the simulator's HTTPS endpoints.

``TestCa.create()`` makes a CA (EC P-256, valid one day) in memory; ``issue_server(hosts)`` signs a
server certificate for loopback names with it; ``server_context`` turns that into an
``ssl.SSLContext``. Clients trust the CA through ``ca_pem`` (``write_ca(path)`` for a file to give
as ``connection_verify``, ``--ca-file`` or ``REQUESTS_CA_BUNDLE``). Nothing is ever trusted
system-wide, and every run has its own CA. Uses ``cryptography`` (installed with ``azure-identity``),
imported when a CA is made.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServerCert:
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class TestCa:
    """A CA's certificate and key, as PEM."""

    ca_pem: bytes
    key_pem: bytes
    name: str

    @classmethod
    def create(cls, name: str = "se-forwarder simulator test CA") -> TestCa:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        usage = x509.KeyUsage(
            digital_signature=True,
            key_cert_sign=True,
            crl_sign=True,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(usage, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key), name)

    def issue_server(
        self, hosts: Iterable[str] = LOOPBACK_NAMES, common_name: str = "simulator"
    ) -> ServerCert:
        """A server certificate for ``hosts`` (IP addresses or DNS names), signed by this CA."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        ca_cert = x509.load_pem_x509_certificate(self.ca_pem)
        ca_key: Any = serialization.load_pem_private_key(self.key_pem, password=None)
        now = dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        return ServerCert(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def write_ca(self, path: str | Path) -> Path:
        """Write the CA certificate (PEM) to ``path``; returns it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.ca_pem)
        return path


def server_context(server: ServerCert) -> ssl.SSLContext:
    """An ``ssl.SSLContext`` serving ``server`` (TLS 1.2 or later)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="sim-tls-") as tmp:  # the ssl module loads files only
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        Path(cert).write_bytes(server.cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(server.key_pem)
        context.load_cert_chain(cert, key)
    return context


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
