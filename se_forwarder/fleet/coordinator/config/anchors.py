"""The trust anchors for attested documents: Azure's documented roots by default, or PEM files.

Azure signs attested data with a TLS certificate for ``metadata.azure.com`` (or a regional name
under it; ``.us``, ``.cn``, ``microsoftazure.de`` in the other clouds) issued by one of its
subordinate CAs, which chain to the public roots listed on "Azure Certificate Authority details"
(https://learn.microsoft.com/azure/security/fundamentals/azure-ca-details). The default roots are
those of that list that Mozilla's store still carries, taken from the ``certifi`` package and
matched by the SHA-1 thumbprints Azure publishes, so no certificate is copied into this project.
Baltimore CyberTrust Root (expired May 2025) is left out; DigiCert Global Root CA (the 21Vianet
cloud's) only counts where certifi still has it.

Azure's SignedData carries the signing certificate alone; its issuer is named by the certificate's
"CA Issuers" URL. The coordinator does not fetch: the subordinate CA certificates (from the same
Azure page) are given as PEM files, with ``load_certificates``, next to the roots. Tests name the
simulator's per-run CA (``SimulatorServer.attestation_ca_file``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from ....errors import ConfigError

#: The signing certificate's domains Azure lists: public cloud, US Government, 21Vianet, Germany.
AZURE_SIGNER_DOMAINS = ("metadata.azure.com", "metadata.azure.us", "metadata.azure.cn",
                        "metadata.microsoftazure.de")

#: Azure's roots (name -> SHA-1 thumbprint, as the Azure CA details page prints them).
AZURE_ROOTS = {
    "DigiCert Global Root G2": "DF3C24F9BFD666761B268073FE06D1CC8D4F82A4",
    "DigiCert Global Root G3": "7E04DE896A3E666D00E687D33FFAD93BE83D349E",
    "DigiCert Global Root CA": "A8985D3A65E5E5C4B2D7D66D40C6DD2FB19C5436",
    "Microsoft RSA Root Certificate Authority 2017": "73A5E64A3BFF8316FF0EDCCC618A906E4EAE4D74",
    "Microsoft ECC Root Certificate Authority 2017": "999A64C37FF47D9FAB95F14769891460EEC4C3C5",
}


@dataclass(frozen=True)
class Anchors:
    """What a document must chain to: roots, intermediates Azure leaves out, allowed domains."""

    roots: tuple[x509.Certificate, ...]
    intermediates: tuple[x509.Certificate, ...] = ()
    domains: tuple[str, ...] = AZURE_SIGNER_DOMAINS


def default_roots(bundle: str | Path | None = None) -> tuple[x509.Certificate, ...]:
    """The roots of ``AZURE_ROOTS`` found in ``bundle`` (default: certifi's Mozilla store)."""
    if bundle is None:
        import certifi

        bundle = certifi.where()
    wanted = set(AZURE_ROOTS.values())
    return tuple(c for c in load_certificates(bundle, "the CA bundle")
                 if c.fingerprint(hashes.SHA1()).hex().upper() in wanted)  # noqa: S303 - Azure's ids


def load_certificates(path: str | Path, where: str) -> tuple[x509.Certificate, ...]:
    """The PEM certificates of ``path``; ConfigError naming ``where`` and the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: {path} cannot be read: {exc.strerror or exc}") from None
    try:
        with warnings.catch_warnings():  # old roots with negative serial numbers, in some bundles
            warnings.simplefilter("ignore")
            certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConfigError(f"{where}: {path} holds no readable PEM certificate") from None
    return tuple(certs)


def anchors(roots: Iterable[str | Path] = (), intermediates: Iterable[str | Path] = (),
            *, where: str = "[trust] attestation_roots") -> Anchors:
    """Anchors from PEM files; no ``roots`` means Azure's documented ones (``default_roots``)."""
    root_files = list(roots)
    found = tuple(c for f in root_files for c in load_certificates(f, where)) if root_files \
        else default_roots()
    if not found:
        raise ConfigError(f"{where}: no root certificate found")
    extra = tuple(c for f in intermediates for c in load_certificates(f, where))
    return Anchors(roots=found, intermediates=extra)
