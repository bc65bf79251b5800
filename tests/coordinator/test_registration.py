"""Registrations at the coordinator's edge: an agent's identity event, its IMDS attested document
(PKCS#7, signed here by the simulator's per-run CA as IMDS signs it) and the binding of its vmId to
its key. One test per reason of trust.py's "Registrations" table and registrations.py's rules, each
through trust.check and through the gate's counters (what /metrics and status show)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator import restore, status
from se_forwarder.fleet.coordinator.config.anchors import anchors
from se_forwarder.fleet.coordinator.edge import trust
from se_forwarder.fleet.coordinator.fold import Claim, FleetState, Identity
from se_forwarder.fleet.coordinator.fold import identities as registrations
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot
from se_forwarder.simulator.attestation import AttestationAuthority

from .fleet import SUB, AgentVm, heartbeat
from .signed import Coordinator, SignedVm, authority

WEB0, WEB1 = AgentVm("web-0"), AgentVm("web-1")


def refused(coordinator: Coordinator, event: dict, code: str) -> trust.Verdict:
    """``event`` is refused for ``code``, counted once, and binds nothing."""
    assert coordinator.admit(event) == [code]
    assert coordinator.gate.refused[code] == 1
    assert coordinator.state.identities == {}
    assert coordinator.gate.last_refusal is not None
    return coordinator.gate.last_refusal[1]


def test_an_agent_registers_its_key_for_the_vm_id_its_attested_document_names():
    agent, coordinator = SignedVm(WEB0), Coordinator()
    assert coordinator.admit(agent.identity()) == ["registered"]
    bound = coordinator.state.identities[WEB0.vm_id]
    assert (bound.public_key, bound.keyid) == (agent.public, signing.keyid(agent.key))
    assert bound.subscription == SUB
    assert bound.expires_on - bound.created_on == 6 * 3600
    assert coordinator.gate.registered == {"bound": 1}


def test_a_document_signed_by_another_ca_is_refused_as_untrusted():
    agent = SignedVm(WEB0)
    verdict = refused(Coordinator(), agent.identity(agent.document(signer=AttestationAuthority())),
                      "identity-untrusted")
    assert "does not chain to a configured root" in verdict.detail


def test_an_expired_document_is_refused():
    agent = SignedVm(WEB0)
    old = agent.document(created=time.time() - 7 * 3600)
    refused(Coordinator(), agent.identity(old), "identity-expired")


def test_a_document_is_judged_at_the_hubs_enqueued_time_not_at_the_readers_clock():
    short = AttestationAuthority(lifetime=60)  # its certificates are valid from 5 minutes ago
    agent = SignedVm(WEB0)
    event = agent.identity(agent.document(created=time.time() - 150, signer=short))  # expired 90 s ago
    fresh, late = Coordinator(), Coordinator()
    for coordinator in (fresh, late):
        coordinator.gate.edge.attested = trust.Attestation(anchors([short.ca_file],
                                                                   [short.intermediate_file]))
    assert fresh.admit(event, t=time.time() - 120) == ["registered"]  # enqueued while fresh
    assert late.admit(event) == ["identity-expired"]  # enqueued now


def test_a_registration_announced_again_is_not_verified_again():
    agent, coordinator = SignedVm(WEB0), Coordinator()
    event = agent.identity(agent.document(created=time.time() - 60))
    coordinator.admit(event)
    coordinator.gate.edge.attested = None  # nothing could be verified now
    assert coordinator.admit(event) == ["registered"]
    assert coordinator.gate.registered == {"bound": 1, "same": 1}
    newer = SignedVm(WEB0)
    assert coordinator.admit(newer.identity()) == ["identity-untrusted"]  # a new one is verified


def test_a_document_with_the_nonce_of_another_key_is_refused():
    agent, other = SignedVm(WEB0), SignedVm(WEB0)
    verdict = refused(Coordinator(), agent.identity(agent.document(nonce=other.nonce)), "identity-nonce")
    assert agent.nonce in verdict.detail


def test_a_document_of_a_subscription_not_listed_is_refused():
    agent = SignedVm(WEB0)
    coordinator = Coordinator(subscriptions=("00000000-0000-0000-0000-000000000000",))
    refused(coordinator, agent.identity(), "identity-subscription")
    assert Coordinator(subscriptions=(SUB,)).admit(agent.identity()) == ["registered"]


def test_a_registration_not_signed_by_the_key_it_registers_is_refused():
    agent = SignedVm(WEB0)
    refused(Coordinator(), agent.identity(key=signing.generate_private_key()), "identity-signature")
    unsigned = {k: v for k, v in agent.identity().items() if k not in ("keyid", "signature")}
    refused(Coordinator(), unsigned, "identity-signature")


def test_a_registration_whose_document_names_another_vm_is_refused():
    agent = SignedVm(WEB0)
    refused(Coordinator(), agent.identity(agent.document(vm_id=WEB1.vm_id)), "identity-vm")


@pytest.mark.parametrize("data", [None, {}, {"PublicKey": "AAAA"}, {"PublicKey": 7}])
def test_a_registration_without_a_public_key_of_32_bytes_is_malformed(data):
    event = SignedVm(WEB0).identity()
    event["data"] = data
    refused(Coordinator(), event, "identity-malformed")


def test_a_document_that_is_not_pkcs7_is_refused_for_what_attestation_finds():
    agent = SignedVm(WEB0)
    refused(Coordinator(), agent.identity({"encoding": "pkcs7", "signature": "AAAA"}), "identity-malformed")


def test_the_same_registration_read_twice_changes_nothing():
    agent, coordinator = SignedVm(WEB0), Coordinator()
    event = agent.identity()
    assert coordinator.admit(event, event) == ["registered", "registered"]
    assert coordinator.gate.registered == {"bound": 1, "same": 1}


def test_a_newer_document_for_the_same_key_refreshes_the_binding():
    agent, coordinator = SignedVm(WEB0), Coordinator()
    coordinator.admit(agent.identity(agent.document(created=time.time() - 60)))
    coordinator.admit(agent.identity())
    assert coordinator.gate.registered == {"bound": 1, "refreshed": 1}
    assert coordinator.state.identities[WEB0.vm_id].created_on > time.time() - 30


def test_a_reinstall_with_a_newer_document_replaces_the_key_and_is_shown():
    old, new, coordinator = SignedVm(WEB0), SignedVm(WEB0), Coordinator()
    coordinator.admit(old.identity(old.document(created=time.time() - 60)),
                      old.sign(heartbeat(WEB0, time.time())))
    assert coordinator.admit(new.identity()) == ["registered"]
    assert coordinator.state.identities[WEB0.vm_id].public_key == new.public
    (rekey,) = coordinator.gate.rekeys
    assert (rekey.vm, rekey.old, rekey.new) == (WEB0.vm_id, signing.keyid(old.key), signing.keyid(new.key))
    shown = status(coordinator.state, coordinator.policy, time.time())["identities"]
    assert [(r["name"], r["old"], r["new"]) for r in shown["rekeyed"]] == [
        ("web-0", signing.keyid(old.key), signing.keyid(new.key))]


def test_a_new_key_with_an_older_document_is_refused_as_stale_in_any_order():
    old, new = SignedVm(WEB0), SignedVm(WEB0)
    older, newer = old.identity(old.document(created=time.time() - 60)), new.identity()
    for first, second in ((newer, older), (older, newer)):
        coordinator = Coordinator()
        coordinator.admit(first, second)
        assert coordinator.state.identities[WEB0.vm_id].public_key == new.public
    coordinator = Coordinator()
    assert coordinator.admit(newer, older) == ["registered", "identity-stale"]
    assert coordinator.gate.refused["identity-stale"] == 1


def _ground_race() -> tuple[FleetState, Identity, Identity]:
    state = FleetState()
    bound = Identity("a" * 44, "1" * 16, 100.0, 200.0, "digest", SUB)
    assert registrations.bind(state, Claim("vm", bound)) == "bound"
    # only a key ground to the same nonce could verify with the same document
    ground = Identity("b" * 44, "2" * 16, 100.0, 200.0, "digest", SUB)
    return state, bound, ground


def test_one_document_presented_with_a_second_key_binds_neither_and_puts_the_vm_in_conflict():
    state, bound, ground = _ground_race()
    assert registrations.bind(state, Claim("vm", ground)) == "conflict"
    assert "vm" not in state.identities and registrations.verifier(state, "vm") is None
    assert [c.keyid for c in state.conflicts["vm"].candidates] == [bound.keyid, ground.keyid]


@given(first=st.booleans())
def test_a_ground_key_gains_nothing_in_either_order(first):
    state = FleetState()
    honest = Identity("a" * 44, "1" * 16, 100.0, 200.0, "digest", SUB)
    ground = Identity("b" * 44, "2" * 16, 100.0, 200.0, "digest", SUB)
    for identity in ((ground, honest) if first else (honest, ground)):
        registrations.bind(state, Claim("vm", identity))
    assert "vm" not in state.identities and "vm" in state.conflicts


def test_a_conflict_stays_for_the_disputed_document_and_older_ones():
    state, bound, ground = _ground_race()
    registrations.bind(state, Claim("vm", ground))
    assert registrations.bind(state, Claim("vm", bound)) == "conflict"
    older = Identity("a" * 44, "1" * 16, 50.0, 200.0, "older", SUB)
    assert registrations.bind(state, Claim("vm", older)) == "conflict" and "vm" not in state.identities


def test_a_newer_document_settles_a_conflict():
    state, bound, ground = _ground_race()
    registrations.bind(state, Claim("vm", ground))
    newer = Identity("a" * 44, "1" * 16, 160.0, 400.0, "newer", SUB)
    assert registrations.bind(state, Claim("vm", newer)) == "settled"
    assert state.identities["vm"] == newer and state.conflicts == {}


def test_an_operator_settles_a_conflict_with_one_of_the_keys_in_dispute_or_none():
    state, bound, ground = _ground_race()
    registrations.bind(state, Claim("vm", ground))
    with pytest.raises(ValueError):
        registrations.settle(state, "vm", "f" * 16)
    assert registrations.settle(state, "vm", bound.keyid) == bound and state.identities["vm"] == bound
    registrations.bind(state, Claim("vm", ground))
    assert registrations.settle(state, "vm", None) is None and "vm" not in state.identities
    assert state.conflicts == {}


def test_a_conflict_is_kept_in_the_snapshot():
    state, _, ground = _ground_race()
    registrations.bind(state, Claim("vm", ground))
    assert restore(snapshot(state)).conflicts == state.conflicts


def test_rekeys_are_kept_per_vm_not_in_one_list_for_the_fleet():
    state = FleetState()
    for vm in ("a", "b"):
        for n in range(registrations.REKEYS_PER_VM + 3):
            identity = Identity(str(n) * 44, f"{n:016x}", 100.0 + n, 900.0, f"d{n}", SUB)
            registrations.bind(state, Claim(vm, identity))
    assert {vm: len(h) for vm, h in state.rekeyed.items()} == {"a": registrations.REKEYS_PER_VM,
                                                              "b": registrations.REKEYS_PER_VM}


def test_a_key_registered_for_several_vms_is_listed_as_shared():
    image = signing.generate_private_key()  # a state directory captured in a VM image
    coordinator = Coordinator()
    coordinator.register(SignedVm(WEB0, image), SignedVm(WEB1, image))
    shared = status(coordinator.state, coordinator.policy, time.time())["identities"]["sharedKeys"]
    assert [s["keyid"] for s in shared] == [signing.keyid(image)]


def test_registrations_are_kept_in_the_snapshot():
    coordinator = Coordinator()
    coordinator.register(SignedVm(WEB0), SignedVm(WEB1))
    restored = restore(snapshot(coordinator.state))
    assert restored.identities == coordinator.state.identities
    assert snapshot(restored) == snapshot(coordinator.state)


def test_every_reason_is_a_metric_and_in_status():
    from se_forwarder.fleet.coordinator import observe

    text = observe.render({**_values(), "refused": {code: 1 for code in trust.REASON_CODES}}).decode()
    for code in trust.REASON_CODES:
        assert f'se_forwarder_coordinator_refused_total{{reason="{code}"}} 1.0' in text


def _values() -> dict:
    return {"folded": {}, "skipped": {}, "capped": {}, "decisions": 0, "published": 0, "publish_failures": 0,
            "sent": 0, "send_failures": 0, "dropped": 0, "rekeyed": 0, "leader": 0, "acting": 0, "vms": 0,
            "open_events": 0, "queue_conflicts": 0, "name_conflicts": 0, "outside_inventory": 0,
            "identities": 0, "waiting": 0, "latencies": [],
            "last_input_age": None, "pending_sends": 0, "reach": {}, "azure": None, "lags": [], "gap": 0,
            "stale": 0}


def test_the_authority_used_here_is_the_simulators():
    assert authority().ca_file.exists() and authority().intermediate_file.exists()
