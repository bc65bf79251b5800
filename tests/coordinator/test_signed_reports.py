"""Reports at the coordinator's edge: folded only when signed by the key registered for their
``vmid``; one test per reason of trust.py's "Reports" table, counted by the gate; reports that
reach the hub before their VM's registration held until it folds."""

from __future__ import annotations

import base64
import copy
import time

import pytest

from se_forwarder.approvals import signing
from se_forwarder.fleet.coordinator import restore
from se_forwarder.fleet.coordinator.config.limits import DEFAULT_LIMITS
from se_forwarder.fleet.coordinator.edge import trust
from se_forwarder.fleet.coordinator.edge.gate import WAIT_SECONDS
from se_forwarder.fleet.coordinator.fold import identities as registrations
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot

from .fleet import AgentVm, heartbeat, report
from .signed import Coordinator, SignedVm

WEB0, WEB1 = AgentVm("web-0"), AgentVm("web-1")
NOW = float(int(time.time()))


@pytest.fixture
def registered() -> tuple[Coordinator, SignedVm, SignedVm]:
    coordinator, web0, web1 = Coordinator(), SignedVm(WEB0), SignedVm(WEB1)
    coordinator.register(web0, web1)
    return coordinator, web0, web1


def test_a_report_signed_by_its_vms_registered_key_is_folded_for_that_vm(registered):
    coordinator, web0, _ = registered
    assert coordinator.admit(web0.sign(heartbeat(WEB0, NOW))) == ["folded"]
    assert coordinator.state.vms[WEB0.vm_id].last_heartbeat == NOW


def test_a_report_a_worker_verified_is_folded_without_parsing_its_vms_key(registered):
    coordinator, web0, _ = registered
    raw = base64.b64decode(web0.public)
    event = web0.sign(heartbeat(WEB0, NOW))
    assert coordinator.gate.admit(coordinator.state, event, NOW, trust.Checked(raw, (raw,))) == "folded"
    keys = registrations.verifier(coordinator.state, WEB0.vm_id)
    assert keys is not None and keys.ids == [signing.keyid(web0.key)] and "by_id" not in vars(keys)


@pytest.mark.parametrize("event", [report("scheduled", WEB0, "E1", NOW), heartbeat(WEB0, NOW)],
                         ids=["scheduled", "heartbeat"])
def test_an_unsigned_report_is_refused_by_default(registered, event):
    coordinator = registered[0]
    assert coordinator.admit(event) == ["unsigned"] and coordinator.gate.refused == {"unsigned": 1}
    assert WEB0.vm_id not in coordinator.state.vms


def test_a_report_signed_by_a_peer_in_its_victims_name_does_not_verify(registered):
    coordinator, _, web1 = registered
    assert coordinator.admit(web1.sign(heartbeat(WEB0, NOW))) == ["bad-signature"]
    verdict = coordinator.gate.last_refusal[1]
    assert f"keyid {signing.keyid(web1.key)} is not a configured verify key" in verdict.detail


def test_a_report_changed_after_it_was_signed_does_not_verify(registered):
    coordinator, web0, _ = registered
    event = web0.sign(report("scheduled", WEB0, "E1", NOW, resources=["web-0", "web-1"]))
    event["data"]["Resources"] = ["web-0"]
    assert coordinator.admit(event) == ["bad-signature"]


def test_a_report_about_another_vm_signed_by_its_own_sender_is_refused(registered):
    coordinator, _, web1 = registered
    event = heartbeat(WEB0, NOW)
    event["vmid"] = WEB1.vm_id  # web-1 signs as itself, but its data.Vm is web-0's
    assert coordinator.admit(web1.sign(event)) == ["wrong-vm"]
    assert WEB0.vm_id not in coordinator.state.vms


def test_a_signed_report_that_names_no_vmid_is_unregistered(registered):
    coordinator, web0, _ = registered
    event = heartbeat(WEB0, NOW)
    del event["vmid"]
    assert coordinator.admit(web0.sign(event)) == ["unregistered"]


def test_a_report_that_reaches_the_hub_before_its_registration_is_held_and_then_folded():
    coordinator, agent = Coordinator(), SignedVm(WEB0)
    assert coordinator.admit(agent.sign(report("scheduled", WEB0, "E1", NOW)), t=NOW) == ["waiting"]
    assert coordinator.gate.held(coordinator.state) == 1 and "e1" not in coordinator.state.events
    restored = restore(snapshot(coordinator.state))  # held reports are part of the fold's state
    assert restored.waiting == coordinator.state.waiting
    assert coordinator.admit(agent.identity()) == ["registered"]
    assert coordinator.state.events["e1"].reports == {WEB0.vm_id: 1} and coordinator.state.waiting == {}


def test_a_held_report_that_does_not_verify_once_registered_is_refused():
    coordinator, agent, stranger = Coordinator(), SignedVm(WEB0), SignedVm(WEB0)
    coordinator.admit(stranger.sign(heartbeat(WEB0, NOW)), t=NOW)
    coordinator.admit(agent.identity())
    assert coordinator.gate.refused == {"bad-signature": 1} and coordinator.state.vms == {}


def test_held_reports_are_dropped_and_counted_after_waiting_too_long_in_hub_time():
    coordinator, agent = Coordinator(), SignedVm(WEB0)
    coordinator.admit(agent.sign(heartbeat(WEB0, NOW)), t=NOW)
    assert coordinator.gate.sweep(coordinator.state, NOW + WAIT_SECONDS - 1) == 0
    assert coordinator.gate.sweep(coordinator.state, NOW + WAIT_SECONDS + 1) == 1
    assert coordinator.gate.refused == {"unregistered": 1} and coordinator.state.waiting == {}


def test_a_vm_that_never_registers_can_hold_only_so_many_bytes():
    coordinator, agent = Coordinator(), SignedVm(WEB0)
    beats = [agent.sign(heartbeat(WEB0, NOW + i)) for i in range(400)]
    outcomes = coordinator.admit(*beats, t=NOW)
    held = outcomes.count("waiting")
    assert 0 < held < 400 and outcomes.count("unregistered") == 400 - held
    assert coordinator.gate.held_bytes[WEB0.vm_id.lower()] <= DEFAULT_LIMITS.held_bytes_per_vm


# -- require_signed_reports = false: a fleet mid-upgrade --------------------------------------------


def test_with_unsigned_reports_allowed_an_unregistered_vm_is_known_but_never_watched():
    coordinator = Coordinator(require_signed=False)
    assert coordinator.admit(heartbeat(WEB0, NOW)) == ["folded"]
    vm = coordinator.state.vms[WEB0.vm_id]
    assert (vm.name, vm.last_heartbeat) == ("web-0", None)


def test_with_unsigned_reports_allowed_a_registered_vm_must_still_sign():
    coordinator, agent = Coordinator(require_signed=False), SignedVm(WEB0)
    coordinator.register(agent)
    assert coordinator.admit(heartbeat(WEB0, NOW)) == ["unsigned"]


def test_with_unsigned_reports_allowed_a_report_about_another_vm_is_refused():
    coordinator = Coordinator(require_signed=False)
    event = heartbeat(WEB0, NOW)
    event["vmid"] = WEB1.vm_id
    assert coordinator.admit(event) == ["wrong-vm"]


def test_the_verdicts_are_the_same_on_a_copy_read_again(registered):
    coordinator, web0, _ = registered
    event = web0.sign(heartbeat(WEB0, NOW))
    verdicts = {trust.check(copy.deepcopy(event), source="s", keys=signing.VerifyKeys([]),
                            registered=lambda vm: None).code for _ in range(3)}
    assert verdicts == {"unregistered"}


def test_the_snapshot_keeps_the_held_pool_up_to_its_cap_and_counts_what_it_leaves_out(monkeypatch):
    from se_forwarder.fleet.coordinator.fold import identities

    coordinator, agent = Coordinator(), SignedVm(WEB0)
    coordinator.admit(*(agent.sign(heartbeat(WEB0, NOW + i)) for i in range(10)), t=NOW)
    assert coordinator.gate.held(coordinator.state) == 10
    monkeypatch.setattr(identities, "SNAPSHOT_HELD_BYTES", 4000)
    restored = restore(snapshot(coordinator.state))
    kept = sum(len(v) for v in restored.waiting.values())
    assert 0 < kept < 10
    again = Coordinator(state=restored)
    again.gate.resume(restored)
    assert again.gate.refused["unregistered"] == 10 - kept


def test_a_recovered_report_signed_by_its_vm_is_folded_and_one_in_a_peers_name_is_refused(registered):
    """The attack: web-1 tells the coordinator web-0 has recovered, to free the slot web-0 holds."""
    coordinator, web0, web1 = registered
    coordinator.admit(web0.sign(report("completed", WEB0, "E1", NOW)))
    forged = report("recovered", WEB0, "E1", NOW + 1)
    assert coordinator.admit(web1.sign(forged)) == ["bad-signature"]
    assert coordinator.admit(forged) == ["unsigned"]
    assert coordinator.state.events["e1"].recovered == {}
    assert coordinator.admit(web0.sign(report("recovered", WEB0, "E1", NOW + 2))) == ["folded"]
    assert coordinator.state.events["e1"].recovered == {WEB0.vm_id: NOW + 2}


def test_a_peer_cannot_say_another_vm_is_healthy_or_unhealthy(registered):
    coordinator, web0, web1 = registered
    beat = heartbeat(WEB0, NOW)
    beat["data"]["Health"] = {"Verdict": "unhealthy", "Probe": "web", "Reason": "forged", "Probes": 1}
    assert coordinator.admit(web1.sign(beat)) == ["bad-signature"]
    assert coordinator.state.vms.get(WEB0.vm_id) is None or coordinator.state.vms[WEB0.vm_id].health == ""
