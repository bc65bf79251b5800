"""``coordinator check``'s attestation line tries the chain a registration needs: this VM's attested
document from its IMDS (the simulator's, whose test CA signs like Azure's subordinate CAs and names
its intermediate at a "CA Issuers" URL), the intermediate fetched from there as the service would
fetch it (tests/support/ca_issuer.py's issuer on loopback stands in for Microsoft's and
DigiCert's hosts), and the document verified against the configured roots."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.fleet.coordinator.check.trust import attestation
from se_forwarder.fleet.coordinator.config.service import from_dict
from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.attestation import AttestationAuthority
from se_forwarder.simulator.topology import Topology
from tests.support.ca_issuer import Issuer

TOPOLOGY = Topology.build(availability_sets=[{"name": "db", "vms": 1}])


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    server = Issuer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def imds(issuer: Issuer, tmp_path: Path) -> Iterator[tuple[SimulatorServer, Path]]:
    authority = AttestationAuthority(issuer_url=issuer.url(), directory=tmp_path)
    issuer.body = authority.intermediate_der
    with SimulatorServer(topology=TOPOLOGY) as server:
        server.attestation = authority
        yield server, authority.ca_file


def settings(root: Path, **trust: Any) -> Any:
    return from_dict({
        "eventhub": {"fully_qualified_namespace": "ns.servicebus.windows.net"},
        "storage": {"account_url": "https://a.blob.core.windows.net"},
        "queues": {"account_url": "https://a.queue.core.windows.net"}, "api": {"token_file": "/t"},
        "signing": {"key_file": "/k"}, "trust": {"attestation_roots": [str(root)], **trust}})


def test_the_intermediate_is_fetched_and_this_vms_document_verifies(imds, issuer):
    server, root = imds
    ok, text = attestation(settings(root, intermediate_paths=[issuer.url("/")]), server.vm_url("db-0"))
    assert ok is True and issuer.requests == 1
    assert "this VM's attested document verifies (CN=se-forwarder simulator TLS Issuing CA" in text
    assert f"fetched from {issuer.url()})" in text


def test_an_intermediate_path_out_of_reach_fails_naming_the_egress_to_allow(imds, issuer):
    server, root = imds
    issuer.body = b""  # the host answers, but with no certificate
    ok, text = attestation(settings(root, intermediate_paths=[issuer.url("/")]), server.vm_url("db-0"))
    assert ok is False
    assert f"the intermediate of this VM's attested document cannot be fetched from {issuer.url()}" in text
    host = f"127.0.0.1:{issuer.server_address[1]}"
    assert f"(allow egress to {host}, or give [trust] attestation_intermediates)" in text


def test_a_path_not_allowed_is_not_fetched_from(imds, issuer):
    server, root = imds
    ok, text = attestation(settings(root), server.vm_url("db-0"))
    assert ok is False and issuer.requests == 0 and "is not on an allowed path" in text


def test_intermediates_given_as_files_need_no_fetch(imds, issuer, tmp_path):
    server, root = imds
    given = settings(root, attestation_intermediates=[str(server.attestation.intermediate_file)],
                     fetch_intermediates=False)
    ok, text = attestation(given, server.vm_url("db-0"))
    assert ok is True and issuer.requests == 0
    assert ("1 intermediate(s) given; this VM's attested document verifies (with the intermediates given)"
            in text)


def test_without_an_imds_the_line_warns_that_the_chain_was_not_tried(tmp_path):
    root = tmp_path / "root.pem"
    root.write_bytes(AttestationAuthority(directory=tmp_path).ca_file.read_bytes())
    ok, text = attestation(settings(root), "http://127.0.0.1:9")
    assert ok == "warn" and "the chain was not tried: no attested document from this VM's IMDS" in text
