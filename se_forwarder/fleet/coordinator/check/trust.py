"""The check's ``attestation`` part: the chain every registration needs, tried for real (check/__init__.py).

Azure's attested documents carry the signing certificate alone; the coordinator completes the
chain with the intermediates of ``[trust] attestation_intermediates`` or, with
``fetch_intermediates``, with the one the certificate's "CA Issuers" URL names (on an
``intermediate_paths`` URL prefix), and verifies it against the roots. The coordinator's own VM is an
Azure VM too, so the check asks its IMDS for an attested document, fetches what it leaves out as a
registration would make the service fetch it (input/intermediates.py), and verifies it against
the configured anchors: the egress to the certificate hosts, the roots and the intermediates,
tried as a registration needs them. Where no IMDS answers (not an Azure VM), it says so in a
``warn`` line with what it could check: the anchors and the intermediates given.
"""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, datetime
from urllib.parse import urlsplit

from ....imds import DEFAULT_URL, ImdsClient, ImdsError
from ..config.service import ServiceSettings
from ..config.trust import TrustSettings
from ..edge.attestation import Attested, issuer_urls, verify
from ..input.intermediates import FetchError, Intermediates
from .services import WARN, Result

IMDS_TIMEOUT = 3.0


def attestation(settings: ServiceSettings, imds_url: str | None = None) -> Result:
    ts = settings.trust
    anchors = ts.anchors()
    roots = "the roots Azure documents" if not ts.attestation_roots else ", ".join(ts.attestation_roots)
    head = f"{len(anchors.roots)} root(s) ({roots}), {len(anchors.intermediates)} intermediate(s) given"
    tail = f"; subscriptions {', '.join(ts.subscriptions)}" if ts.subscriptions else "; any subscription"
    if not ts.require_signed_reports:
        tail += ("; unsigned reports of VMs without a registered key are folded (require_signed_reports = "
                 "false: they can only make the coordinator more careful)")
    try:
        nonce = f"{secrets.randbelow(10**10):010d}"
        document = ImdsClient(imds_url or DEFAULT_URL, timeout=IMDS_TIMEOUT, connect_timeout=IMDS_TIMEOUT,
                              first_call_timeout=IMDS_TIMEOUT).get_attested(nonce)
    except (ImdsError, OSError) as exc:
        fetching = f", fetched from {_hosts(ts)} when missing" if ts.fetch_intermediates else ""
        return WARN, (f"{head}{fetching}{tail}; the chain was not tried: no attested document from this "
                      f"VM's IMDS ({str(exc)[:120]}; not an Azure VM?)")
    ok, said = _chain(document, ts, nonce)
    if ok and not ts.require_signed_reports:
        return WARN, f"{head}; {said}{tail}"
    signed = "; reports must be signed with their VM's registered key" if ok else ""
    return ok, f"{head}; {said}{tail}{signed}"


def _hosts(ts: TrustSettings) -> str:
    """The hosts of ``[trust] intermediate_paths``, once each (their paths alone are allowed)."""
    return ", ".join(dict.fromkeys(urlsplit(p).netloc for p in ts.intermediate_paths))


def _chain(document: dict[str, object], ts: TrustSettings, nonce: str) -> tuple[bool, str]:
    """Whether this VM's attested document verifies against ``ts``'s anchors, with its missing
    intermediate fetched as the service fetches it; what was done, in words."""
    anchors, fetched = ts.anchors(), []
    if ts.fetch_intermediates:
        fetcher = Intermediates(ts.intermediate_paths)
        for url in issuer_urls(document):
            try:
                certs = fetcher.fetch(url)
            except FetchError as exc:
                if anchors.intermediates:
                    continue  # the ones given may do
                return False, (f"the intermediate of this VM's attested document cannot be fetched from "
                               f"{url}: {exc} (allow egress to {_hosts(ts)}, or give "
                               "[trust] attestation_intermediates)")
            fetched.append(f"{', '.join(c.subject.rfc4514_string()[:80] for c in certs)} fetched from {url}")
            anchors = dataclasses.replace(anchors, intermediates=(*anchors.intermediates, *certs))
    result = verify(document, anchors=anchors, nonce=nonce, now=datetime.now(UTC))
    if not isinstance(result, Attested):
        return False, (f"this VM's attested document does not verify against the anchors ({result.reason}: "
                       f"{result.detail[:200]})")
    how = "; ".join(fetched) or "with the intermediates given"
    return True, f"this VM's attested document verifies ({how})"
