"""The intermediate Azure leaves out of attested documents, fetched from the signing certificate's
"CA Issuers" URL (intermediates.py) over real HTTP from a server in this process, off the gate:
the registration waits, then binds; a host not allowed, a failing URL or a redirect elsewhere
leaves it untrusted."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs7

from se_forwarder.fleet.coordinator.edge import issuer_urls
from se_forwarder.fleet.coordinator.input import FetchError, Intermediates, parse
from se_forwarder.simulator.attestation import AttestationAuthority
from tests.support.ca_issuer import Issuer, azure_like

from .fleet import AgentVm, heartbeat
from .signed import Coordinator, SignedVm

WEB0 = AgentVm("web-0")


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    server = Issuer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_document_names_where_its_intermediate_is_published(issuer):
    authority = azure_like(issuer)
    assert issuer_urls(SignedVm(WEB0).document(signer=authority)) == (issuer.url(),)
    assert issuer_urls({"encoding": "pkcs7", "signature": "AAAA"}) == ()


def test_a_registration_waits_for_its_intermediate_then_binds_and_the_reports_held_meanwhile_fold(issuer):
    authority = azure_like(issuer)
    done: queue.Queue[str] = queue.Queue()
    fetcher = Intermediates((f"{issuer.url('/')}",), done.put)
    coordinator = Coordinator(signer=authority, fetched=fetcher.lookup)
    agent = SignedVm(WEB0)
    outcomes = coordinator.admit(agent.identity(agent.document(signer=authority)),
                                 agent.sign(heartbeat(WEB0, 1000.0)))
    assert outcomes == ["waiting", "waiting"] and coordinator.gate.fetches == {issuer.url()}
    assert coordinator.state.identities == {} and coordinator.state.vms == {}
    url = done.get(timeout=30)
    coordinator.gate.fetched(coordinator.state, url)
    assert WEB0.vm_id in coordinator.state.identities
    assert coordinator.state.vms[WEB0.vm_id].last_heartbeat == 1000.0
    assert coordinator.state.waiting == {} and issuer.requests == 1
    other = SignedVm(AgentVm("web-1"))  # the intermediate is cached: no second request
    assert coordinator.admit(other.identity(other.document(signer=authority))) == ["registered"]
    assert issuer.requests == 1
    fetcher.close()


@pytest.mark.parametrize("allowed, path", [("http://www.microsoft.com/pkiops/certs/", "/ca.crt"),
                                           ("/certs/", "/ca.crt"), ("/", "/missing.crt")],
                         ids=["host not allowed", "path not allowed", "404"])
def test_without_its_intermediate_a_registration_is_untrusted(issuer, allowed, path):
    authority = azure_like(issuer, path)
    done: queue.Queue[str] = queue.Queue()
    fetcher = Intermediates((allowed if allowed.startswith("http") else issuer.url(allowed),), done.put)
    coordinator = Coordinator(signer=authority, fetched=fetcher.lookup)
    agent = SignedVm(WEB0)
    event = agent.identity(agent.document(signer=authority))
    first = coordinator.admit(event)
    if first == ["waiting"]:
        coordinator.gate.fetched(coordinator.state, done.get(timeout=30))
        assert fetcher.failures == 1
    assert coordinator.gate.refused["identity-untrusted"] == 1 and coordinator.state.identities == {}
    fetcher.close()


def test_a_redirect_to_a_host_not_allowed_is_not_followed(issuer):
    issuer.location = "http://169.254.169.254/metadata/instance"
    with pytest.raises(FetchError, match="not on an allowed path"):
        Intermediates((issuer.url("/"),)).fetch(issuer.url("/moved.crt"))


def test_a_ca_issuers_response_may_be_der_pem_or_pkcs7():
    cert = AttestationAuthority().chain.intermediate
    for body in (cert.public_bytes(serialization.Encoding.DER), cert.public_bytes(serialization.Encoding.PEM),
                 pkcs7.serialize_certificates([cert], serialization.Encoding.DER)):
        assert parse(body) == (cert,)
    with pytest.raises(FetchError):
        parse(b"<html>not a certificate</html>")


@pytest.mark.parametrize("url, ok", [
    ("http://www.microsoft.com/pkiops/certs/Microsoft%20Azure%20RSA%20TLS%20Issuing%20CA%2003.crt", True),
    ("http://www.microsoft.com/pki/certs/Microsoft%20Azure%20ECC%20TLS%20Issuing%20CA%2002.cer", True),
    ("http://cacerts.digicert.com/DigiCertGlobalRootG2.crt", True),
    ("http://www.microsoft.com/en-us/anything.crt", False),  # the host, but not a PKI path
    ("http://www.microsoft.com/pkiops/certs/ca.crt?x=1", False),
    ("http://www.microsoft.com/pkiops/certs/../../x.crt", False),
    ("http://www.microsoft.com/pkiops/certs/page.html", False),
    ("http://user@www.microsoft.com/pkiops/certs/ca.crt", False),
    ("ftp://www.microsoft.com/pkiops/certs/ca.crt", False),
    ("http://www.microsoft.com.evil.example/pkiops/certs/ca.crt", False),
])
def test_only_certificate_files_on_azures_pki_paths_are_fetched(url, ok):
    from se_forwarder.fleet.coordinator.config.trust import DEFAULT_PATHS
    from se_forwarder.fleet.coordinator.input.intermediates import allowed

    assert allowed(url, DEFAULT_PATHS) is ok


def test_the_intermediates_cache_keeps_the_most_recently_used_and_failures_are_bounded(issuer, monkeypatch):
    from se_forwarder.fleet.coordinator.input import intermediates

    monkeypatch.setattr(intermediates, "MAX_URLS", 3)
    monkeypatch.setattr(intermediates, "MAX_FAILED", 2)
    issuer.body = AttestationAuthority().intermediate_der
    done: queue.Queue[str] = queue.Queue()
    fetcher = Intermediates((issuer.url("/"),), done.put)
    for i in range(5):  # ca.crt is served; the others fail (404)
        url = issuer.url("/ca.crt") if i == 0 else issuer.url(f"/forged-{i}.crt")
        assert fetcher.lookup(url) is None
        done.get(timeout=30)
    assert fetcher.failures == 4 and len(fetcher._failed) == 2 and fetcher.missing == 2
    assert fetcher.lookup(issuer.url("/forged-1.crt")) is None  # forgotten: asked again, not remembered
    done.get(timeout=30)
    fetcher.close()
