"""A registration judged with everything a worker remembers (its signer's parts and frame, the
signing certificate's key and chain verdicts, refused documents) gets the verdict the plain path
gives: a fresh attestation that remembers nothing, every SignedData read whole by asn1crypto.
Honest documents of two signers (one not trusted), each kind of forgery and honest documents with
a byte changed, in any order."""

from __future__ import annotations

import base64
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator.config.anchors import anchors
from se_forwarder.fleet.coordinator.edge import signed_data, trust
from se_forwarder.identity.attested import unpack as unpack_whole
from se_forwarder.simulator.attestation import AttestationAuthority
from tests.support.forged_registrations import KINDS, forged, honest, identity_event

from .signed import authority

NOW = time.time()


def _attestation() -> trust.Attestation:
    azure = authority()
    return trust.Attestation(anchors([azure.ca_file], [azure.intermediate_file]))


def _plain(event: dict) -> tuple[bool, str | None]:
    """trust.registration remembering nothing, the SignedData read whole (asn1crypto's classes)."""
    split, unpack = signed_data._split, signed_data.unpack
    signed_data._split = lambda _der: None  # type: ignore[assignment]
    signed_data.unpack = unpack_whole  # type: ignore[assignment]
    try:
        verdict = trust.registration(event, _attestation(), NOW)
    finally:
        signed_data._split, signed_data.unpack = split, unpack  # type: ignore[assignment]
    return verdict.trusted, verdict.code


def _changed(event: dict, index: int, value: int) -> dict:
    """``event`` with one byte of its attested document's DER changed, signed again by its key."""
    der = bytearray(base64.b64decode(event["data"]["AttestedDocument"]["signature"]))
    der[index % len(der)] = value
    document = {"encoding": "pkcs7", "signature": base64.b64encode(bytes(der)).decode()}
    return identity_event(event["vmid"], _KEYS[event["keyid"]], document)


_KEYS: dict[str, signing.Ed25519PrivateKey] = {}


@pytest.fixture(scope="module")
def pool() -> list[dict]:
    azure, other = authority(), AttestationAuthority()
    events = []
    for _ in range(4):
        key = signing.generate_private_key()
        _KEYS[signing.keyid(key)] = key
        events.append(honest(azure, key=key))
    events += [honest(other), honest(other)]
    events += [forged(kind, azure) for kind in KINDS]
    return events


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_workers_remembered_path_gives_the_plain_paths_verdict(pool, data):
    attested = _attestation()  # remembers from the first event on, as a worker's does
    order = data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=3, max_size=8))
    for n in order:
        event = pool[n]
        if n < 4 and data.draw(st.booleans()):
            event = _changed(event, data.draw(st.integers(0, 5000)), data.draw(st.integers(0, 255)))
        verdict = trust.registration(event, attested, NOW)
        assert (verdict.trusted, verdict.code) == _plain(event)
