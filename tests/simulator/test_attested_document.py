"""``/metadata/attested/document`` as the simulator serves it over real HTTP: Azure's response
shape, a PKCS#7 SignedData per VM signed by the server's own CA, and IMDS's nonce rules."""

from __future__ import annotations

import base64
import json
import time
from datetime import datetime, timedelta

import pytest
from asn1crypto import cms
from cryptography import x509
from cryptography.x509 import verification

from se_forwarder.identity.attested import nonce_for
from se_forwarder.simulator import vm_id_for
from se_forwarder.simulator.topology import Topology

ATTESTED = "/metadata/attested/document"
HEADERS = {"Metadata": "true"}
CLAIMS = {"licenseType", "nonce", "plan", "sku", "subscriptionId", "timeStamp", "vmId"}


def _get(http, base: str, **query: str):
    return http.get(base + ATTESTED, params={"api-version": "2021-02-01", **query}, headers=HEADERS,
                    timeout=10)


def _signed_data(reply) -> cms.SignedData:
    body = reply.json()
    assert set(body) == {"encoding", "signature"} and body["encoding"] == "pkcs7"
    info = cms.ContentInfo.load(base64.b64decode(body["signature"]))
    assert info["content_type"].native == "signed_data"
    return info["content"]


def _claims(signed: cms.SignedData) -> dict:
    return json.loads(signed["encap_content_info"]["content"].native)


def test_the_document_is_a_signed_data_of_the_vms_claims_like_azures(sim, http):
    nonce = nonce_for(bytes(32))
    signed = _signed_data(_get(http, sim.url, nonce=nonce))
    claims = _claims(signed)
    assert set(claims) == CLAIMS
    compute = http.get(sim.url + "/metadata/instance/compute", params={"api-version": "2021-02-01"},
                       headers=HEADERS, timeout=5).json()
    assert claims["nonce"] == nonce
    assert (claims["vmId"], claims["subscriptionId"], claims["sku"]) == (
        vm_id_for("vm0"), compute["subscriptionId"], compute["sku"])
    assert claims["plan"] == {"name": "", "product": "", "publisher": ""}
    created, expires = (datetime.strptime(claims["timeStamp"][k], "%m/%d/%y %H:%M:%S %z")
                        for k in ("createdOn", "expiresOn"))
    assert expires - created == timedelta(hours=6)
    (info,) = signed["signer_infos"]
    assert info["signed_attrs"].native is None, "Azure signs the content itself"
    assert len(signed["certificates"]) == 1, "Azure carries the signing certificate alone"


def test_the_signing_certificate_is_for_metadata_azure_com_and_chains_to_the_written_ca(sim, http):
    signed = _signed_data(_get(http, sim.url, nonce="1234567890"))
    signer = x509.load_der_x509_certificate(signed["certificates"][0].chosen.dump())
    names = signer.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["westeurope.metadata.azure.com",
                                                        "metadata.azure.com"]
    root = x509.load_pem_x509_certificate(sim.attestation_ca_file.read_bytes())
    intermediate = x509.load_pem_x509_certificate(sim.attestation_intermediate_file.read_bytes())
    assert signer.issuer == intermediate.subject and intermediate.issuer == root.subject
    chain = (verification.PolicyBuilder().store(verification.Store([root]))
             .build_server_verifier(verification.DNSName("metadata.azure.com"))
             .verify(signer, [intermediate]))
    assert chain[-1] == root


def test_the_ca_files_go_where_asked(start_sim, tmp_path):
    server = start_sim(attestation_dir=tmp_path / "ca")
    assert server.attestation_ca_file == tmp_path / "ca" / "attestation-root.pem"
    assert server.attestation_intermediate_file.parent == tmp_path / "ca"
    assert server.attestation_ca_file.read_text().startswith("-----BEGIN CERTIFICATE-----")


def test_each_vm_of_a_topology_gets_its_own_document(start_sim, http):
    server = start_sim(topology=Topology.build(availability_sets=[{"name": "web", "vms": 2}]))
    vm_ids = [_claims(_signed_data(_get(http, server.vm_url(vm), nonce="1")))["vmId"]
              for vm in ("web-0", "web-1")]
    assert vm_ids == [vm_id_for("web-0"), vm_id_for("web-1")]


def test_the_lifetime_option_sets_expires_on(start_sim, http):
    server = start_sim(attestation_lifetime=90)
    stamp = _claims(_signed_data(_get(http, server.url, nonce="1")))["timeStamp"]
    created, expires = (datetime.strptime(stamp[k], "%m/%d/%y %H:%M:%S %z")
                        for k in ("createdOn", "expiresOn"))
    assert expires - created == timedelta(seconds=90)


def test_without_a_nonce_the_document_carries_the_time_instead(sim, http):
    nonce = _claims(_signed_data(_get(http, sim.url)))["nonce"]
    assert datetime.strptime(nonce, "%Y%m%d-%H%M%S")


@pytest.mark.parametrize("nonce", ["12-34", "a" * 33, "nonce with spaces", ""])
def test_a_nonce_the_rest_specification_does_not_allow_is_400(sim, http, nonce):
    reply = _get(http, sim.url, nonce=nonce)
    assert reply.status_code == 400
    assert "nonce" in reply.json()["error"]


def test_api_versions_before_attested_data_existed_are_400(sim, http):
    reply = http.get(sim.url + ATTESTED, params={"api-version": "2018-04-02", "nonce": "1"},
                     headers=HEADERS, timeout=5)
    assert reply.status_code == 400
    assert "api-version" in reply.json()["error"]


def test_attested_data_can_be_made_to_fail_like_any_route(sim, http):
    sim.sim.add_fault({"status": 500, "route": "attested", "count": 1})
    assert _get(http, sim.url, nonce="1").status_code == 500
    assert _get(http, sim.url, nonce="1").status_code == 200
    assert http.get(sim.url + "/metadata/scheduledevents", params={"api-version": "2020-07-01"},
                    headers=HEADERS, timeout=5).status_code == 200


def test_simulate_attestation_dir_writes_the_ca_and_prints_the_paths_documents_chain_to(cli_simulator,
                                                                                        tmp_path, http):
    ca = tmp_path / "ca"
    cli = cli_simulator("--quiet", "--attestation-dir", str(ca))
    root_file, intermediate_file = ca / "attestation-root.pem", ca / "attestation-intermediate.pem"
    deadline = time.monotonic() + 10
    while not any(str(intermediate_file) in line for line in cli.lines):
        assert time.monotonic() < deadline, cli.lines
        time.sleep(0.05)
    lines = [line.rstrip("\n") for line in cli.lines]
    assert "attested documents are signed by a per-run CA:" in lines
    assert f"  root          {root_file}" in lines
    assert f"  intermediate  {intermediate_file}" in lines
    signed = _signed_data(_get(http, cli.url, nonce="1234567890"))
    signer = x509.load_der_x509_certificate(signed["certificates"][0].chosen.dump())
    root = x509.load_pem_x509_certificate(root_file.read_bytes())
    intermediate = x509.load_pem_x509_certificate(intermediate_file.read_bytes())
    chain = (verification.PolicyBuilder().store(verification.Store([root]))
             .build_server_verifier(verification.DNSName("metadata.azure.com"))
             .verify(signer, [intermediate]))
    assert chain[-1] == root
    assert cli.stop() == 0
