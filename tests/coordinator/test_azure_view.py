"""What status and the page show of Azure's view (azure_view.py): agentless VMs, what each source
said of an event, and every disagreement between Azure and an agent."""

from __future__ import annotations

import json

from se_forwarder.fleet.coordinator import groups, status
from se_forwarder.fleet.coordinator.fold import fold_catch_up, fold_event

from .azure import catch_up, facts, feed, policy, vm_row
from .fleet import SET, T0, AgentVm, Fleet, heartbeat, report

LIAR = AgentVm("web-1", fd="2", ud="1", scale_set="other")


def fleet() -> Fleet:
    f = Fleet(policy())
    f.beat(*SET[:4], t=T0)
    fold_catch_up(f.state, catch_up(T0, [vm_row(vm) for vm in SET]))
    return f


def test_status_lists_the_agentless_vms():
    doc = status(fleet().state, policy(), T0 + 1)
    assert doc["azure"]["agentless"] == ["web-4", "web-5"]
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc


def test_a_vm_that_lies_about_its_group_and_fault_domain_is_a_finding():
    f = fleet()
    f.fold(heartbeat(LIAR, T0 + 1))
    found = {(x["name"], x["field"], x["agent"], x["azure"]) for x in status(f.state, f.policy, T0 + 2)
             ["azure"]["findings"]}
    assert found == {("web-1", "scale set", "other", ""), ("web-1", "fault domain", "2", "1")}


def test_an_agent_saying_completed_while_azure_says_started_is_a_finding_and_both_are_shown():
    f = fleet()
    f.fold(report("scheduled", SET[0], "E1", T0 + 1, not_before=T0 + 900))
    fold_event(f.state, facts(feed("E1", "Started", [SET[0]], T0 + 2)))
    f.fold(report("completed", SET[0], "E1", T0 + 3))
    doc = status(f.state, f.policy, T0 + 4)
    found = [(x["name"], x["field"], x["agent"], x["azure"], x["eventId"]) for x in doc["azure"]["findings"]]
    assert found == [("web-0", "status", "completed", "Started", "E1")]
    web0 = next(vm for g in groups(f.state, f.policy, T0 + 4) for vm in g["vms"] if vm["name"] == "web-0")
    assert web0["state"] == "started"
    assert web0["event"]["said"] == {"agent": "completed", "azure": "Started"}
    assert web0["findings"] == ["status: agent completed, Azure Started"]


def test_groups_mark_agentless_vms_and_keep_agents_that_agree_clean():
    by_name = {vm["name"]: vm for g in groups(fleet().state, policy(), T0 + 1) for vm in g["vms"]}
    assert {n for n, vm in by_name.items() if vm["agentless"]} == {"web-4", "web-5"}
    assert all(vm["findings"] == [] for vm in by_name.values())
    assert by_name["web-4"]["watched"]


def test_without_azures_input_status_has_no_azure_part():
    f = Fleet()
    f.beat(*SET, t=T0)
    assert status(f.state, f.policy, T0 + 1)["azure"] is None
