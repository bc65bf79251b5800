"""No takeover of a vmId by a ground key (fold/identities.py, decide/control.settle): the review's race,
run through the real gate with real attested documents.

What cannot run here is the grind itself: a key whose 10-digit nonce equals the victim's takes about
2**33 key generations (a few core-days). It is stood in for by one change: the coordinator's nonce
derivation gives the ground key the victim's nonce (``ground``). Everything else is real: the
victim's document signed by the simulator's authority as IMDS signs, both identity events signed
by their own keys, the gate, the fold, the decision pass and the control decision.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator import evaluate, status
from se_forwarder.fleet.coordinator.decide import control
from se_forwarder.fleet.coordinator.decide.availability import unavailable
from se_forwarder.fleet.coordinator.decide.scopes import index
from se_forwarder.fleet.coordinator.edge import trust
from se_forwarder.fleet.coordinator.view.alerts import derive
from se_forwarder.identity.attested import nonces_for

from .fleet import SET, heartbeat, report
from .signed import COORDINATOR_KEY, Coordinator, SignedVm

VICTIM = SET[1]


@pytest.fixture
def ground(monkeypatch):
    """A key ground to the victim's nonce (the stand-in for the grind: module docstring)."""
    victim, thief = SignedVm(VICTIM), SignedVm(VICTIM)
    real = nonces_for

    def derived(raw: bytes) -> tuple[str, str]:
        if raw == signing.raw_public(thief.key):
            return real(signing.raw_public(victim.key))
        return real(raw)

    monkeypatch.setattr(trust, "nonces_for", derived)
    return victim, thief


def _fleet(*vms: SignedVm) -> Coordinator:
    coordinator = Coordinator()
    coordinator.register(*vms)
    coordinator.admit(*(vm.sign(heartbeat(vm.vm, time.time())) for vm in vms), t=time.time())
    return coordinator


def _both_register(coordinator: Coordinator, ground: tuple[SignedVm, SignedVm], t: float,
                   created: float | None = None) -> list[str]:
    """One document of the victim's registered with the victim's key and with the ground key."""
    victim, thief = ground
    document = victim.document(created=created)
    return coordinator.admit(victim.identity(document), thief.identity(document), t=t)


def test_the_victims_document_replayed_with_a_ground_key_binds_neither(ground):
    now = time.time()
    victim, thief = ground
    coordinator = _fleet(victim, SignedVm(SET[0]))
    document = victim.document()
    coordinator.admit(victim.identity(document), t=now)
    assert coordinator.admit(thief.identity(document), t=now) == ["identity-conflict"]
    key = VICTIM.vm_id.lower()
    assert key not in coordinator.state.identities and key in coordinator.state.conflicts
    assert coordinator.admit(thief.sign(heartbeat(VICTIM, now + 1)), t=now + 1) == ["waiting"]
    assert coordinator.admit(victim.sign(heartbeat(VICTIM, now + 1)), t=now + 1) == ["waiting"]
    assert coordinator.gate.refused["identity-conflict"] == 1


def test_whichever_copy_folds_first_the_ground_key_gains_nothing(ground):
    now = time.time()
    victim, thief = ground
    coordinator = _fleet(SignedVm(SET[0]))
    document = victim.document()
    assert coordinator.admit(thief.identity(document), t=now) == ["registered"]  # the thief first
    assert coordinator.admit(victim.identity(document), t=now) == ["identity-conflict"]
    assert VICTIM.vm_id.lower() not in coordinator.state.identities


def test_a_vm_in_conflict_counts_as_unavailable_in_every_budget_and_is_shown(ground):
    now = time.time()
    victim, thief = ground
    coordinator = _fleet(victim, SignedVm(SET[0]))
    _both_register(coordinator, ground, now)
    idx = index(coordinator.state, coordinator.policy)
    down = unavailable(coordinator.state, coordinator.policy, idx, now)
    assert down[VICTIM.vm_id.lower()] == "key-conflict"
    shown = status(coordinator.state, coordinator.policy, now)["identities"]["conflicts"]
    assert [c["vmId"] for c in shown] == [VICTIM.vm_id.lower()]
    assert sorted(shown[0]["keys"]) == sorted([signing.keyid(victim.key), signing.keyid(thief.key)])


def test_a_peers_event_waits_while_a_vm_of_its_group_is_in_conflict(ground):
    victim, thief = ground
    peer, now = SignedVm(SET[0]), time.time()
    coordinator = _fleet(victim, peer)
    for vm in (victim, peer):  # an availability set: the peer's event is on both VMs' IMDS
        coordinator.admit(vm.sign(report("scheduled", vm.vm, "E-1", now, resources=[peer.vm.name],
                                         not_before=now + 900)), t=now)
    document = victim.document(created=now + 1)  # newer than the one _fleet bound
    coordinator.admit(victim.identity(document), thief.identity(document), t=now + 2)
    assert VICTIM.vm_id.lower() in coordinator.state.conflicts
    result = evaluate(coordinator.state, coordinator.policy, now + 3)
    assert not [d for d in result.decisions if d.kind == "approve"], "a budget of 1 is held by the conflict"


def test_a_newer_registration_of_the_victim_settles_it(ground):
    now = time.time()
    victim, _ = ground
    coordinator = _fleet(SignedVm(SET[0]))
    _both_register(coordinator, ground, now, created=now - 60)
    assert coordinator.admit(victim.identity(victim.document(created=now)), t=now) == ["registered"]
    assert coordinator.state.identities[VICTIM.vm_id.lower()].keyid == signing.keyid(victim.key)
    assert coordinator.state.conflicts == {}


def test_a_conflict_raises_one_alert_until_it_is_settled(ground):
    now = time.time()
    victim, _ = ground
    coordinator = _fleet(SignedVm(SET[0]))
    _both_register(coordinator, ground, now, created=now - 60)
    found = derive(coordinator.state, evaluate(coordinator.state, coordinator.policy, now + 1))
    alert = found.open["key-conflict"]
    assert alert.severity == "error" and VICTIM.vm_id.lower() in alert.summary
    coordinator.admit(victim.identity(victim.document(created=now)), t=now + 2)  # a newer document
    settled = derive(coordinator.state, evaluate(coordinator.state, coordinator.policy, now + 3))
    assert "key-conflict" not in settled.open and "key-conflict" in settled.resolved


def _settle(coordinator: Coordinator, keyid: str | None, t: float) -> Any:
    decision = control.settle(coordinator.state, coordinator.policy, t, VICTIM.vm_id, keyid, "person:ops",
                              "the victim's agent key, checked on the VM")
    from se_forwarder.fleet.coordinator import to_dict

    from .fleet import SOURCE
    return decision, coordinator.admit(signing.sign(to_dict(decision, SOURCE), COORDINATOR_KEY), t=t)


def test_an_operator_settles_a_conflict_with_an_audited_decision(ground):
    now = time.time()
    victim, _ = ground
    coordinator = _fleet(victim)
    _both_register(coordinator, ground, now)
    decision, outcome = _settle(coordinator, signing.keyid(victim.key), now + 5)
    assert outcome == ["folded"] and decision.actor == "person:ops" and decision.reason
    assert coordinator.state.identities[VICTIM.vm_id.lower()].keyid == signing.keyid(victim.key)
    assert coordinator.state.decisions[decision.id].kind == "settle"  # the audit trail
    assert coordinator.admit(victim.sign(heartbeat(VICTIM, now + 6)), t=now + 6) == ["folded"]


def test_settling_asks_for_a_vm_in_conflict_and_one_of_its_keys(ground):
    now = time.time()
    victim, _ = ground
    coordinator = _fleet(victim)
    with pytest.raises(control.ControlRefused, match="not in key conflict"):
        control.settle(coordinator.state, coordinator.policy, now, VICTIM.vm_id, None, "person:ops", "r")
    _both_register(coordinator, ground, now)
    with pytest.raises(control.ControlRefused, match="not one of the keys in dispute"):
        control.settle(coordinator.state, coordinator.policy, now, VICTIM.vm_id, "0" * 16, "person:ops", "r")


def test_an_old_settle_decision_replayed_does_not_settle_a_later_conflict(ground):
    now = time.time()
    victim, thief = ground
    coordinator = _fleet(SignedVm(SET[0]))
    _both_register(coordinator, ground, now, created=now - 120)
    decision, _ = _settle(coordinator, None, now + 1)
    _both_register(coordinator, ground, now + 10, created=now - 60)  # the thief again
    assert VICTIM.vm_id.lower() in coordinator.state.conflicts
    from se_forwarder.fleet.coordinator import to_dict

    from .fleet import SOURCE
    replayed = signing.sign(to_dict(decision, SOURCE), COORDINATOR_KEY)
    assert coordinator.admit(replayed, t=now + 11) == ["folded"]
    assert VICTIM.vm_id.lower() in coordinator.state.conflicts
