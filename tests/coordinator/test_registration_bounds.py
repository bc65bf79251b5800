"""A registration cannot stall the fold: each forgery the review built, refused at the cheapest check
that gives it away, its work bounded and its verdict remembered (edge/attestation.py, chains.py,
verdicts.py, gate.py). Documents are forged here (tests/support/forged_registrations.py) or signed
by the simulator's authority as IMDS signs them."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator.config.anchors import Anchors, anchors
from se_forwarder.fleet.coordinator.config.limits import DEFAULT_LIMITS
from se_forwarder.fleet.coordinator.edge import Edge, Gate, chains, trust
from se_forwarder.fleet.coordinator.fold import FleetState
from tests.support.forged_registrations import forged, honest

from .fleet import SOURCE, AgentVm, heartbeat
from .signed import Coordinator, SignedVm, authority


def _attestation() -> trust.Attestation:
    auth = authority()
    return trust.Attestation(anchors([auth.ca_file], [auth.intermediate_file]))


def _gate(**limits) -> Gate:
    keys = signing.VerifyKeys([signing.generate_private_key().public_key()])
    return Gate(Edge(SOURCE, lambda: keys, _attestation(), limits=replace(DEFAULT_LIMITS, **limits)))


@pytest.mark.parametrize("kind, reason", [
    ("chain_bomb", "identity-certificates"),  # the review's: a 3071-bit exponent, two CAs issuing each other
    ("huge_exponent", "identity-signer-key"),
    ("carried", "identity-certificates"),
    ("self_signed", "identity-untrusted"),
    ("wrong_nonce", "identity-nonce"),
    ("expired", "identity-expired"),
])
def test_each_forged_registration_is_refused_for_what_gives_it_away(kind, reason):
    verdict = trust.registration(forged(kind, authority()), _attestation(), time.time())
    assert (verdict.trusted, verdict.code) == (False, reason), verdict.detail


def test_an_honest_registration_verifies():
    verdict = trust.registration(honest(authority()), _attestation(), time.time())
    assert verdict.trusted and verdict.claim is not None


def test_claims_are_checked_before_the_signers_key_is_looked_at():
    bomb = forged("chain_bomb", authority())
    verdict = trust.registration(bomb, _attestation(), time.time() + 7 * 3600)  # read after it expired
    assert verdict.code == "identity-expired"


def test_a_document_for_another_vm_is_refused_before_any_signature_work():
    auth, key = authority(), signing.generate_private_key()
    theirs = honest(auth, key=key)
    theirs["vmid"] = str(uuid.uuid4())
    verdict = trust.registration(signing.sign(theirs, key), _attestation(), time.time())
    assert verdict.code == "identity-vm"


def test_a_key_change_must_bring_a_newer_document_than_the_bound_one_before_it_is_verified():
    now = time.time()
    coordinator, vm = Coordinator(), SignedVm(AgentVm("web-0"))
    coordinator.admit(vm.identity(vm.document(created=now)), t=now)
    other = SignedVm(vm.vm)
    older = other.identity(other.document(created=now - 60))
    verdict = trust.check(older, source=SOURCE, keys=signing.VerifyKeys([]), attested=_attestation(), now=now,
                          bound=coordinator.state.identities.get)
    assert verdict.code == "identity-stale" and "not newer" in verdict.detail


def test_a_forged_document_sent_again_is_refused_from_memory():
    attested, bomb = _attestation(), forged("carried", authority())
    first = trust.registration(bomb, attested, time.time())
    hits = attested.verdicts.hits
    again = trust.registration(bomb, attested, time.time())
    assert first.code == again.code == "identity-certificates" and attested.verdicts.hits == hits + 1


def test_the_signing_certificates_chain_is_built_once_for_every_vms_document():
    attested = _attestation()
    verdicts = [trust.registration(honest(authority()), attested, time.time()) for _ in range(20)]
    assert all(v.trusted for v in verdicts)
    assert (attested.chains.built, attested.chains.hits) == (1, 19)


def test_a_remembered_verdict_is_only_ever_its_own_certificates():
    """The chain's, the signing key's and the SignedData's shared parts are kept per certificate (by
    its bytes): forgeries read between honest documents of a signer whose verdicts are kept get
    their own refusals, and the honest ones stay trusted."""
    attested, azure = _attestation(), authority()
    reasons = {"huge_exponent": "identity-signer-key", "carried": "identity-certificates",
               "self_signed": "identity-untrusted", "chain_bomb": "identity-certificates"}
    assert trust.registration(honest(azure), attested, time.time()).trusted
    for kind, reason in reasons.items():
        assert trust.registration(forged(kind, azure), attested, time.time()).code == reason
        assert trust.registration(honest(azure), attested, time.time()).trusted
    again = trust.registration(forged("self_signed", azure), attested, time.time())
    assert again.code == "identity-untrusted"


def _ca(name: str, issuer: str, key: rsa.RSAPrivateKey, signer: rsa.RSAPrivateKey) -> x509.Certificate:
    now = datetime.now(UTC)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(signer, hashes.SHA256()))


_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@settings(max_examples=40, deadline=None)
@given(edges=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=20))
def test_paths_are_bounded_whatever_the_intermediates_issue_each_other(edges):
    """Even configured intermediates that issue each other in any graph (a misconfiguration) give a
    bounded number of short paths without any certificate twice, so at most MAX_SIGNATURE_CHECKS."""
    pool = [_ca(f"CA {a}", f"CA {b}", _KEY, _KEY) for a, b in edges]
    leaf = _ca("leaf", "CA 0", _KEY, _KEY)
    root = _ca("CA 5", "CA 5", _KEY, _KEY)
    found = chains.paths(leaf, pool, [root])
    assert len(found) <= chains.MAX_PATHS
    for above, _ in found:
        fingerprints = {c.fingerprint(hashes.SHA256()) for c in above}
        assert len(above) < chains.MAX_DEPTH and len(fingerprints) == len(above)
    verdict = chains.Chains(Anchors((root,), tuple(pool))).verdict(leaf, b"leaf", datetime.now(UTC))
    assert verdict.checks <= chains.MAX_SIGNATURE_CHECKS


@pytest.mark.parametrize("key, problem", [
    (rsa.generate_private_key(public_exponent=65537, key_size=2048), None),
    (rsa.generate_private_key(public_exponent=3, key_size=2048), "exponent"),
    (rsa.generate_private_key(public_exponent=65537, key_size=1024), "1024 bits"),
    (ec.generate_private_key(ec.SECP256R1()), None),
    (ec.generate_private_key(ec.SECP384R1()), None),
    (ec.generate_private_key(ec.SECP521R1()), "secp521r1"),
])
def test_only_the_signer_keys_azure_uses_are_accepted(key, problem):
    now = datetime.now(UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "metadata.azure.com")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + timedelta(days=1))
            .sign(_KEY, hashes.SHA256()))
    found = chains.key_problem(cert)
    assert (found is None) if problem is None else (problem in str(found))


def test_registrations_beyond_the_per_vm_limit_are_refused_in_a_minute_of_hub_time():
    now = time.time()
    gate, state, vm_id = _gate(registrations_per_vm=2), FleetState(), str(uuid.uuid4())
    outcomes = [gate.admit(state, forged("self_signed", authority(), vm_id=vm_id), now) for _ in range(3)]
    assert outcomes == ["identity-untrusted", "identity-untrusted", "identity-rate"]
    next_minute = gate.admit(state, forged("self_signed", authority(), vm_id=vm_id), now + 60)
    assert next_minute == "identity-untrusted"


def test_registrations_beyond_the_overall_limit_are_refused_in_a_minute_of_hub_time():
    now = time.time()
    gate, state = _gate(registrations_per_minute=3), FleetState()
    outcomes = [gate.admit(state, forged("wrong_nonce", authority()), now) for _ in range(4)]
    assert outcomes[-1] == "identity-rate" and gate.refused["identity-rate"] == 1


def test_an_agent_announcing_its_registration_again_is_not_counted_against_the_limits():
    now = time.time()
    gate, state = _gate(registrations_per_vm=1), FleetState()
    event = honest(authority())
    assert [gate.admit(state, event, now) for _ in range(5)] == ["registered"] * 5


def test_a_verified_vm_is_admitted_at_once_whatever_the_new_vm_cap():
    now = time.time()
    coordinator = Coordinator()
    coordinator.gate.edge.limits = replace(DEFAULT_LIMITS, new_vms_per_minute=1)
    vms = [SignedVm(AgentVm(f"web-{i}")) for i in range(5)]
    coordinator.register(*vms)
    outcomes = coordinator.admit(*(vm.sign(heartbeat(vm.vm, now)) for vm in vms), t=now)
    assert outcomes == ["folded"] * 5 and coordinator.gate.stats.capped["new-vm"] == 0


def test_a_report_whose_data_is_not_an_object_is_refused_before_the_trust_checks():
    now = time.time()
    coordinator, vm = Coordinator(), SignedVm(AgentVm("web-0"))
    coordinator.register(vm)
    event = heartbeat(vm.vm, now)
    event["data"] = "a string claims nothing about its VM"
    assert coordinator.admit(vm.sign(event), t=now) == ["bad-data"]
    assert coordinator.gate.refused["bad-data"] == 1


def test_a_verified_vms_record_takes_its_vm_id_from_the_registration():
    now = time.time()
    coordinator, vm = Coordinator(), SignedVm(AgentVm("web-0"))
    coordinator.register(vm)
    event = heartbeat(vm.vm, now)
    del event["data"]["Vm"]  # nothing about itself: the registration still names it
    assert coordinator.admit(vm.sign(event), t=now) == ["folded"]
    assert coordinator.state.vms[vm.vm.vm_id.lower()].vm_id == vm.vm.vm_id.lower()


def test_only_reports_with_a_guid_shaped_vmid_are_held():
    now = time.time()
    gate, state, key = _gate(), FleetState(), signing.generate_private_key()
    report = signing.sign({**heartbeat(AgentVm("web-0"), now), "vmid": "not-a-guid"}, key)
    assert gate.admit(state, report, now) == "unregistered" and state.waiting == {}


def test_only_small_reports_are_held():
    now = time.time()
    gate, state, vm = _gate(held_event_bytes=4096), FleetState(), SignedVm(AgentVm("web-0"))
    big = heartbeat(vm.vm, now)
    big["data"]["Padding"] = "x" * 5000
    assert gate.admit(state, vm.sign(big), now) == "unregistered"
    assert gate.admit(state, vm.sign(heartbeat(vm.vm, now)), now) == "waiting"


def test_the_held_pool_is_bounded_in_bytes_overall():
    now = time.time()
    gate, state = _gate(held_bytes=8192), FleetState()
    vms = [SignedVm(AgentVm(f"web-{i}")) for i in range(40)]
    outcomes = [gate.admit(state, vm.sign(heartbeat(vm.vm, now)), now) for vm in vms]
    assert 0 < outcomes.count("waiting") < 40
    assert sum(gate.held_bytes.values()) <= 8192
    assert gate.refused["unregistered"] == outcomes.count("unregistered")
