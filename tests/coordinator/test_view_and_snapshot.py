"""The read model for `coordinator status` and the fleet page; snapshots restored."""

from __future__ import annotations

import json

import pytest

from se_forwarder.errors import StateError
from se_forwarder.fleet.coordinator import Budget, Policy, evaluate, groups, hold, pause, restore, status
from se_forwarder.fleet.coordinator.api import render_status
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot

from .fleet import SET, SOURCE, T0, AgentVm, approved, avset, iso

GROUP = f"set/{SET[0].sub}/rg-web/web-0"


def busy_fleet():
    fleet = avset(Policy(budgets=(Budget("group", count=2), Budget("zone", count=2))))
    fleet.beat(*SET[:5], t=T0 + 400)  # web-5 goes silent
    fleet.announce("E1", [SET[1]], SET, t=T0 + 400, not_before=T0 + 1000)
    fleet.announce("E2", [SET[2]], SET, t=T0 + 400, not_before=T0 + 1100)
    fleet.apply(pause(fleet.state, fleet.policy, T0 + 400, "zone:westeurope/9", "person:ops", "test"))
    fleet.apply(hold(fleet.state, fleet.policy, T0 + 400.5, "E9", "person:ops", "later"))
    fleet.decide(T0 + 401)
    return fleet


def test_status_shows_scopes_with_their_budget_use():
    fleet = busy_fleet()
    doc = status(fleet.state, fleet.policy, T0 + 402)
    assert doc["scopes"] == [{"scope": f"group:{GROUP}", "kind": "group", "size": 6, "inventory": 6,
                              "used": 2, "max": 2, "paused": False}]
    assert doc["scopeTotals"] == {"group": {"scopes": 1, "full": 1}}
    assert doc["fleet"] == {"vms": 6, "watched": 5, "unavailable": 2, "groups": 1, "openEvents": 2}


def test_status_lists_pending_events_with_the_reason_each_waits():
    fleet = busy_fleet()
    pending = status(fleet.state, fleet.policy, T0 + 402)["pending"]
    assert [(p["eventId"], p["reasonCode"]) for p in pending] == [("E1", "approved"), ("E2", "budget")]
    assert pending[1]["reason"] == f"group:{GROUP} would have 3 unavailable, max 2"
    assert pending[1]["notBeforeUtc"] == iso(T0 + 1100) and pending[1]["affected"] == ["web-2"]


def test_status_names_the_vms_of_events_left_alone_or_past_their_not_before():
    fleet = busy_fleet()
    fleet.announce("F1", [SET[3]], SET, t=T0 + 400, event_type="Freeze", not_before=T0 + 900)
    fleet.announce("D1", [SET[4]], SET, t=T0 + 400, not_before=T0 + 401)
    doc = status(fleet.state, fleet.policy, T0 + 402)
    pending = {p["eventId"]: p for p in doc["pending"]}
    assert (pending["F1"]["reasonCode"], pending["F1"]["affected"]) == ("unmanaged", ["web-3"])
    assert (pending["D1"]["reasonCode"], pending["D1"]["affected"]) == ("due", ["web-4"])
    printed = render_status({**doc, "service": {"name": "c", "instance": "i", "role": "leader"}})
    assert any(line.startswith("  F1  Freeze") and line.endswith("web-3") for line in printed.splitlines())


def test_status_shows_who_approved_a_pending_event_and_when():
    fleet = busy_fleet()
    fleet.fold(approved(SET[1], "E1", T0 + 410, by="coordinator:" + SOURCE, resources=["web-1"]))
    (e1, _) = status(fleet.state, fleet.policy, T0 + 411)["pending"]
    decision, echo = e1["approvals"]
    assert decision == {"by": "coordinator", "time": iso(T0 + 401), "attempt": 1, "shadow": False,
                        "vm": "web-1", "echo": False}
    assert echo == {"by": "coordinator:" + SOURCE, "time": iso(T0 + 410), "attempt": None, "shadow": False,
                    "vm": "web-1", "echo": True}
    assert e1["reason"] == "approved, echoed by an agent"


def test_status_shows_the_decision_log_newest_first_with_actor_and_reason():
    fleet = busy_fleet()
    log = status(fleet.state, fleet.policy, T0 + 402)["decisions"]
    assert [(d["decision"], d["actor"]) for d in log] == [
        ("defer", "coordinator"), ("sent", "coordinator"), ("approve", "coordinator"), ("hold", "person:ops"),
        ("pause", "person:ops")]
    assert log[2]["target"] == "web-1" and log[3]["reason"] == "later"
    assert len(status(fleet.state, fleet.policy, T0 + 402, decisions_limit=1)["decisions"]) == 1


def test_status_lists_vms_not_watched_pauses_and_holds():
    fleet = busy_fleet()
    doc = status(fleet.state, fleet.policy, T0 + 402)
    assert doc["unwatched"] == [{"name": "web-5", "vmId": SET[5].vm_id, "group": GROUP,
                                 "lastHeartbeatUtc": iso(T0), "heartbeatAgeSeconds": 402.0}]
    assert doc["paused"] == [{"scope": "zone:westeurope/9", "since": iso(T0 + 400), "actor": "person:ops",
                              "reason": "test"}]
    assert [h["eventId"] for h in doc["held"]] == ["E9"]


def test_status_is_json_serialisable():
    fleet = busy_fleet()
    doc = status(fleet.state, fleet.policy, T0 + 402, all_scopes=True)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc


def test_groups_show_each_vm_with_its_topology_and_state():
    fleet = busy_fleet()
    fleet.transition("started", "S1", [SET[3]], t=T0 + 402)
    (group,) = groups(fleet.state, fleet.policy, T0 + 403)
    assert (group["group"], group["size"], group["unavailable"]) == (GROUP, 6, 3)
    by_name = {vm["name"]: vm for vm in group["vms"]}
    assert {name: vm["state"] for name, vm in by_name.items()} == {
        "web-0": "ok", "web-1": "approved", "web-2": "pending", "web-3": "started", "web-4": "ok",
        "web-5": "not-watched"}
    assert by_name["web-2"]["event"] == {
        "eventId": "E2", "eventType": "Reboot", "notBeforeUtc": iso(T0 + 1100), "status": "scheduled",
        "said": {"agent": "scheduled", "azure": None}}
    web1 = by_name["web-1"]
    assert (web1["faultDomain"], web1["updateDomain"], web1["zone"], web1["watched"]) == ("1", "1", "", True)
    assert web1["heartbeatAgeSeconds"] == 3.0 and not by_name["web-5"]["watched"]
    assert json.dumps(group)


def test_groups_can_be_searched_by_vm_name_and_filtered_by_group():
    fleet = busy_fleet()
    lone = AgentVm("db-0", rg="rg-db")
    fleet.beat(lone, t=T0 + 402)
    assert [g["group"] for g in groups(fleet.state, fleet.policy, T0 + 403)] == [
        f"set/{lone.sub}/rg-db/db-0", GROUP]
    (found,) = groups(fleet.state, fleet.policy, T0 + 403, search="WEB-4")
    assert [vm["name"] for vm in found["vms"]] == ["web-4"] and found["size"] == 6
    (only,) = groups(fleet.state, fleet.policy, T0 + 403, group=GROUP)
    assert len(only["vms"]) == 6


def test_a_completed_vm_shows_completed_until_min_healthy_passed():
    fleet = busy_fleet()
    fleet.transition("started", "E1", [SET[1]], t=T0 + 420)
    fleet.transition("completed", "E1", [SET[1]], t=T0 + 480)
    fleet.beat(*SET[:5], t=T0 + 500)
    states = {vm["name"]: vm["state"] for vm in groups(fleet.state, fleet.policy, T0 + 500)[0]["vms"]}
    assert states["web-1"] == "completed"
    fleet.beat(*SET[:5], t=T0 + 780)
    states = {vm["name"]: vm["state"] for vm in groups(fleet.state, fleet.policy, T0 + 780)[0]["vms"]}
    assert states["web-1"] == "ok"


def test_a_restored_snapshot_decides_as_the_original():
    fleet = busy_fleet()
    copy = restore(json.loads(json.dumps(snapshot(fleet.state))))
    assert snapshot(copy) == snapshot(fleet.state)
    for now in (T0 + 402, T0 + 900, T0 + 2000):
        mine, theirs = evaluate(fleet.state, fleet.policy, now), evaluate(copy, fleet.policy, now)
        assert mine.decisions == theirs.decisions


def test_a_snapshot_written_before_events_kept_their_scheduled_time_restores_without_it():
    fleet = busy_fleet()
    data = json.loads(json.dumps(snapshot(fleet.state)))
    for event in data["events"]:
        del event["scheduledAt"]
    older = restore(data)
    assert older.events["e1"].scheduled_at is None
    now = T0 + 402
    assert evaluate(older, fleet.policy, now).decisions == evaluate(fleet.state, fleet.policy, now).decisions


@pytest.mark.parametrize("data", [None, [], {"format": 2}, {"format": 1}, {"format": 1, "vms": [{}]},
                                  {"format": 1, "vms": [], "events": [], "groups": [], "gone": {},
                                   "decisions": [["x", "approve", 0, {"EventId": "E", "Attempt": 0}]]}])
def test_restoring_something_that_is_not_a_snapshot_is_a_one_line_state_error(data):
    with pytest.raises(StateError, match=r"^coordinator snapshot: [^\n]+$"):
        restore(data)


def test_status_prints_the_first_twenty_of_each_list_and_how_many_more_unless_asked_for_all():
    service = {"name": "c", "instance": "i", "role": "leader"}
    pending = [{"eventId": f"E{n}", "eventType": "Reboot", "notBeforeUtc": None, "reasonCode": "budget",
                "reason": "full", "affected": [f"web-{n}-{k}" for k in range(30)]} for n in range(25)]
    unwatched = [{"name": f"vm-{n}", "group": "g", "heartbeatAgeSeconds": 600.0} for n in range(30_000)]
    doc = {"service": service, "fleet": {"vms": 100_000}, "pending": pending, "unwatched": unwatched}
    short = render_status(doc).splitlines()
    names = ", ".join(f"web-19-{k}" for k in range(20))
    assert f"  E19  Reboot    NotBefore -  {names} and 10 more" in short
    assert not any(line.startswith("  E20 ") for line in short)
    assert short.count("  ... and 5 more (coordinator status --all lists them)") == 1
    assert "  ... and 29980 more (coordinator status --all lists them)" in short
    assert len(short) < 100
    every = render_status(doc, every=True).splitlines()
    assert sum(line.startswith("  vm-") for line in every) == 30_000 and not any("more (" in x for x in every)
