"""The agent's nonce against IMDS's two rules, both played by the simulator over real HTTP: the REST
specification's (up to 32 letters and digits: the agent's 32-character nonce is taken) and Azure's
page's ("a 10-digit string": IMDS refuses the 32 characters with a 400 and the agent asks again
with its 10 digits). The coordinator accepts a document for either nonce of the key."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from se_forwarder.fleet.coordinator.config.anchors import anchors
from se_forwarder.fleet.coordinator.edge import verify
from se_forwarder.identity.attested import long_nonce_for, nonce_for, nonces_for, unpack
from se_forwarder.identity.key import load_or_create
from se_forwarder.identity.registration import Registration
from se_forwarder.imds import ImdsClient
from se_forwarder.model import VmIdentity


def _registration(sim, tmp_path: Path) -> tuple[Registration, ImdsClient]:
    key = load_or_create(tmp_path)
    client = ImdsClient(sim.url, timeout=5.0, first_call_timeout=5.0)
    identity = VmIdentity.from_hostname("vm0")
    return Registration(key, lambda: client, lambda: identity), client


@pytest.mark.parametrize("rule, expected", [("spec", 32), ("digits", 10)])
def test_the_agent_asks_with_32_characters_and_falls_back_to_10_digits_only_where_imds_refuses(
        start_sim, tmp_path, rule, expected):
    sim = start_sim(attestation_nonce=rule)
    registration, client = _registration(sim, tmp_path)
    registration.attempt(client)
    event = registration.current()
    assert event is not None
    document = unpack(event.as_dict()["data"]["AttestedDocument"])
    assert document.nonce is not None and len(document.nonce) == expected
    assert document.nonce == (long_nonce_for(registration.key.public_raw) if expected == 32
                              else nonce_for(registration.key.public_raw))
    result = verify(event.as_dict()["data"]["AttestedDocument"],
                    anchors=anchors([sim.attestation.ca_file], [sim.attestation.intermediate_file]),
                    nonce=nonces_for(registration.key.public_raw), now=datetime.now(UTC))
    assert getattr(result, "vm_id", None), result


def test_the_long_nonce_is_32_alphanumeric_characters_the_specification_allows():
    for raw in (bytes(32), bytes(range(32)), b"\xff" * 32):
        assert re.fullmatch(r"[a-z0-9]{32}", long_nonce_for(raw))
        assert long_nonce_for(raw) != nonce_for(raw)


def test_imds_that_keeps_to_azures_page_refuses_anything_but_ten_digits(start_sim, http):
    sim = start_sim(attestation_nonce="digits")
    base = sim.url + "/metadata/attested/document"
    ask = {"api-version": "2021-02-01"}
    headers = {"Metadata": "true"}
    assert http.get(base, params={**ask, "nonce": "a" * 32}, headers=headers, timeout=5).status_code == 400
    digits = http.get(base, params={**ask, "nonce": "0123456789"}, headers=headers, timeout=5)
    assert digits.status_code == 200
