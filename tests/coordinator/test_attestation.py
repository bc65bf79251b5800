"""The attested-document verifier (``fleet/coordinator/attestation.verify``): what it accepts and
each reason it refuses, on documents signed by the simulator's per-run CA as IMDS signs them."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime, timedelta

import pytest
from asn1crypto import cms
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.config import default_roots
from se_forwarder.fleet.coordinator.config.anchors import AZURE_ROOTS, anchors
from se_forwarder.fleet.coordinator.edge import Anchors, Attested, attestation, verify
from se_forwarder.fleet.coordinator.edge.attestation import Refusal
from se_forwarder.identity.attested import nonce_for, unpack
from se_forwarder.simulator.attestation import AttestationAuthority
from se_forwarder.simulator.wire import compute_metadata

KEY = bytes(range(32))
NONCE = nonce_for(KEY)
VM = compute_metadata("web-1", 0)

# The example response of Azure's IMDS page ("Attested data", learn.microsoft.com/azure/
# virtual-machines/instance-metadata-service): sha256WithRSAEncryption named as the digest
# algorithm, no signed attributes, a self-signed test certificate (MD5, RSA-1024).
AZURE_EXAMPLE = (
    "MIIEEgYJKoZIhvcNAQcCoIIEAzCCA/8CAQExDzANBgkqhkiG9w0BAQsFADCBugYJKoZIhvcNAQcBoIGsBIGpeyJub25jZSI6"
    "IjEyMzQ1NjY3NjYiLCJwbGFuIjp7Im5hbWUiOiIiLCJwcm9kdWN0IjoiIiwicHVibGlzaGVyIjoiIn0sInRpbWVTdGFtcCI6"
    "eyJjcmVhdGVkT24iOiIxMS8yMC8xOCAyMjowNzozOSAtMDAwMCIsImV4cGlyZXNPbiI6IjExLzIwLzE4IDIyOjA4OjI0IC0w"
    "MDAwIn0sInZtSWQiOiIifaCCAj8wggI7MIIBpKADAgECAhBnxW5Kh8dslEBA0E2mIBJ0MA0GCSqGSIb3DQEBBAUAMCsxKTAn"
    "BgNVBAMTIHRlc3RzdWJkb21haW4ubWV0YWRhdGEuYXp1cmUuY29tMB4XDTE4MTEyMDIxNTc1N1oXDTE4MTIyMDIxNTc1Nlow"
    "KzEpMCcGA1UEAxMgdGVzdHN1YmRvbWFpbi5tZXRhZGF0YS5henVyZS5jb20wgZ8wDQYJKoZIhvcNAQEBBQADgY0AMIGJAoGB"
    "AML/tBo86ENWPzmXZ0kPkX5dY5QZ150mA8lommszE71x2sCLonzv4/UWk4H+jMMWRRwIea2CuQ5RhdWAHvKq6if4okKNt66f"
    "xm+YTVz9z0CTfCLmLT+nsdfOAsG1xZppEapC0Cd9vD6NCKyE8aYI1pliaeOnFjG0WvMY04uWz2MdAgMBAAGjYDBeMFwGA1Ud"
    "AQRVMFOAENnYkHLa04Ut4Mpt7TkJFfyhLTArMSkwJwYDVQQDEyB0ZXN0c3ViZG9tYWluLm1ldGFkYXRhLmF6dXJlLmNvbYIQ"
    "Z8VuSofHbJRAQNBNpiASdDANBgkqhkiG9w0BAQQFAAOBgQCLSM6aX5Bs1KHCJp4VQtxZPzXF71rVKCocHy3N9PTJQ9Fpnd+b"
    "Yw2vSpQHg/AiG82WuDFpPReJvr7Pa938mZqW9HUOGjQKK2FYDTg6fXD8pkPdyghlX5boGWAMMrf7bFkup+lsT+n2tRw2wbNk"
    "nO1tQ0wICtqy2VqzWwLi45RBwTGB6DCB5QIBATA/MCsxKTAnBgNVBAMTIHRlc3RzdWJkb21haW4ubWV0YWRhdGEuYXp1cmUu"
    "Y29tAhBnxW5Kh8dslEBA0E2mIBJ0MA0GCSqGSIb3DQEBCwUAMA0GCSqGSIb3DQEBAQUABIGAld1BM/yYIqqv8SDE4kjQo3Ul"
    "/IKAVR8ETKcve5BAdGSNkTUooUGVniTXeuvDj5NkmazOaKZp9fEtByqqPOyw/nlXaZgOO44HDGiPUJ90xVYmfeK6p9RpJBu6"
    "kiKhnnYTelUk5u75phe5ZbMZfBhuPhXmYAdjc7Nmw97nx8NnprQ="
)


@pytest.fixture(scope="module")
def azure() -> AttestationAuthority:
    """The simulator's signer: root -> intermediate -> a certificate for metadata.azure.com."""
    return AttestationAuthority()


@pytest.fixture(scope="module")
def trusted(azure) -> Anchors:
    return anchors([azure.ca_file], [azure.intermediate_file])


def _now() -> datetime:
    return datetime.now(UTC)


def _refusal(result) -> str:
    assert isinstance(result, Refusal), result
    return result.reason


def test_a_document_signed_by_the_configured_ca_verifies_with_its_claims(azure, trusted):
    result = verify(azure.document(VM, NONCE), anchors=trusted, nonce=NONCE, now=_now(),
                    subscriptions=[VM["subscriptionId"].upper()])
    assert isinstance(result, Attested)
    assert (result.vm_id, result.subscription_id, result.sku) == (VM["vmId"], VM["subscriptionId"],
                                                                  VM["sku"])
    assert result.nonce == NONCE
    assert result.expires_on - result.created_on == timedelta(hours=6)
    assert result.signer == "westeurope.metadata.azure.com"


def test_a_document_signed_by_another_ca_is_untrusted(trusted):
    other = AttestationAuthority()
    result = verify(other.document(VM, NONCE), anchors=trusted, nonce=NONCE, now=_now())
    assert _refusal(result) == "untrusted"


def test_without_the_intermediate_azure_leaves_out_the_chain_is_untrusted(azure):
    result = verify(azure.document(VM, NONCE), anchors=anchors([azure.ca_file]), nonce=NONCE,
                    now=_now())
    assert _refusal(result) == "untrusted"


def test_an_expired_document_is_refused(azure, trusted):
    seven_hours_ago = time.time() - 7 * 3600
    result = verify(azure.document(VM, NONCE, now=seven_hours_ago), anchors=trusted, nonce=NONCE,
                    now=_now())
    assert _refusal(result) == "expired"


def test_a_document_created_ahead_of_the_clock_is_refused(azure, trusted):
    document = azure.document(VM, NONCE, now=time.time() + 3600)
    assert _refusal(verify(document, anchors=trusted, nonce=NONCE, now=_now())) == "future"
    assert isinstance(verify(document, anchors=trusted, nonce=NONCE, now=_now(),
                             skew=timedelta(hours=2)), Attested)


def test_a_document_with_the_nonce_of_another_key_is_refused(azure, trusted):
    theirs = nonce_for(bytes(32))
    result = verify(azure.document(VM, theirs), anchors=trusted, nonce=NONCE, now=_now())
    assert _refusal(result) == "nonce"


def test_a_document_of_a_subscription_not_listed_is_refused(azure, trusted):
    result = verify(azure.document(VM, NONCE), anchors=trusted, nonce=NONCE, now=_now(),
                    subscriptions=["00000000-0000-0000-0000-000000000000"])
    assert _refusal(result) == "subscription"


def test_tampered_content_does_not_verify(azure, trusted):
    der = _der(azure.document(VM, NONCE))
    forged = _replace_content(der, lambda content: content.replace(VM["vmId"].encode(),
                                                                   b"11111111-2222-3333-4444-555555555555"))
    assert _refusal(verify(_document(forged), anchors=trusted, nonce=NONCE, now=_now())) == "bad-signature"


def test_a_signer_certificate_outside_the_allowed_domains_is_refused(azure, trusted):
    for names in (["metadata.azure.com.example.net"], ["evilmetadata.azure.com"]):
        other = AttestationAuthority(signer_names=names)
        mixed = Anchors(roots=(*trusted.roots, *anchors([other.ca_file]).roots),
                        intermediates=(*trusted.intermediates,
                                       *anchors([other.intermediate_file]).roots))
        result = verify(other.document(VM, NONCE), anchors=mixed, nonce=NONCE, now=_now())
        assert _refusal(result) == "signer-name", names
    only_us = Anchors(trusted.roots, trusted.intermediates, domains=("metadata.azure.us",))
    result = verify(azure.document(VM, NONCE), anchors=only_us, nonce=NONCE, now=_now())
    assert _refusal(result) == "signer-name"


@pytest.mark.parametrize("document", [
    None, [], {"encoding": "base64", "signature": "AA=="}, {"encoding": "pkcs7"},
    {"encoding": "pkcs7", "signature": "not base64!"}, {"encoding": "pkcs7", "signature": "AAAA"},
    {"encoding": "pkcs7", "signature": "x" * 70000},
])
def test_what_is_not_an_attested_document_is_malformed(document, trusted):
    assert _refusal(verify(document, anchors=trusted, nonce=NONCE, now=_now())) == "malformed"


def test_a_document_without_its_signers_certificate_is_refused(azure, trusted):
    info = cms.ContentInfo.load(_der(azure.document(VM, NONCE)))
    info["content"]["certificates"] = []
    result = verify(_document(info.dump(force=True)), anchors=trusted, nonce=NONCE, now=_now())
    assert _refusal(result) == "no-signer-cert"


def test_azures_published_example_is_read_and_its_signature_verifies():
    example = {"encoding": "pkcs7", "signature": AZURE_EXAMPLE}
    signed = attestation._read_signed(unpack(example))
    attestation._verify_with(signed)  # raises when the signature does not verify
    assert signed.algorithm == "1.2.840.113549.1.1.1" and signed.hash_type is hashes.SHA256


def test_azures_published_example_is_refused_for_its_claims_before_its_test_key_is_looked_at():
    cert = x509.load_der_x509_certificate(
        cms.ContentInfo.load(base64.b64decode(AZURE_EXAMPLE))["content"]["certificates"][0].chosen.dump())
    result = verify({"encoding": "pkcs7", "signature": AZURE_EXAMPLE}, anchors=Anchors((cert,)),
                    nonce="1234566766", now=datetime(2018, 11, 20, 22, 8, tzinfo=UTC))
    assert _refusal(result) == "claims"  # its vmId is empty; its key (RSA-1024) would be signer-key


def test_the_default_anchors_are_azures_documented_roots():
    roots = default_roots()
    names = {c.subject.rfc4514_string().split(",")[0].removeprefix("CN=") for c in roots}
    assert names and names <= set(AZURE_ROOTS)
    assert "DigiCert Global Root G2" in names, "the root Azure moved attested data to in 2022"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_single_byte_change_of_the_signed_data_verifies(azure, trusted, data):
    der = bytearray(_der(azure.document(VM, NONCE)))
    index = data.draw(st.integers(0, len(der) - 1))
    der[index] = data.draw(st.integers(0, 255).filter(lambda b: b != der[index]))
    result = verify(_document(bytes(der)), anchors=trusted, nonce=NONCE, now=_now())
    assert isinstance(result, Refusal)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_single_byte_change_of_the_content_verifies(azure, trusted, data):
    def change(content: bytes) -> bytes:
        changed = bytearray(content)
        index = data.draw(st.integers(0, len(changed) - 1))
        changed[index] = data.draw(st.integers(0, 255).filter(lambda b: b != changed[index]))
        return bytes(changed)

    forged = _replace_content(_der(azure.document(VM, NONCE)), change)
    assert isinstance(verify(_document(forged), anchors=trusted, nonce=NONCE, now=_now()), Refusal)


def _der(document: dict) -> bytes:
    return base64.b64decode(document["signature"])


def _document(der: bytes) -> dict:
    return {"encoding": "pkcs7", "signature": base64.b64encode(der).decode()}


def _replace_content(der: bytes, change) -> bytes:
    info = cms.ContentInfo.load(der)
    encap = info["content"]["encap_content_info"]
    encap["content"] = change(encap["content"].native)
    return info.dump(force=True)
