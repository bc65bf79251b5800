"""Two VMs whose approval queues would be one: the coordinator never sends either an approval (it
would be the other's to take), says so in status and in the log, and counts them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.approvals.queue.names import names_the_vm, queue_name, sharing_peers
from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import Budget, Policy, approve_now
from se_forwarder.fleet.coordinator.decide import ControlRefused, QueueConflictLog, index, queue_of
from se_forwarder.fleet.coordinator.view.status import status

from .fleet import T0, AgentVm, Fleet, kinds

TEMPLATE = "se-approvals-{vm_name}"


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([TEMPLATE, "{vm_name}", "q-{vm_id}", "{vm_name}-{vm_id}", "Se-{vm_name}", "x{vm_name}",
                        "{vm_name}-", "shared", "{vm_name}{other}"]),
       st.text(st.sampled_from("abcXYZ019-_. "), max_size=70),
       st.sampled_from(["", "4ad5b1f0-2e36-4a9b-9a51-3b3b3f3b3b3b", "ID-1"]))
def test_the_queue_the_coordinator_finds_for_a_vm_is_the_one_the_agent_reads(template, name, vm_id) -> None:
    try:
        expected: str | None = queue_name(template, name, vm_id)
    except ConfigError:
        expected = None
    assert queue_of(template, name, vm_id) == expected


def test_web_1_and_web_dash_1_have_queues_of_their_own() -> None:
    assert queue_of(TEMPLATE, "web_1", "") != queue_of(TEMPLATE, "web-1", "")  # a changed name is hashed
    fleet = Fleet()
    fleet.beat(AgentVm("web_1"), AgentVm("web-1"))
    assert index(fleet.state, fleet.policy).shared_queue == {}


def test_an_event_of_a_vm_whose_queue_another_vm_shares_is_never_sent_and_says_why() -> None:
    mine, other = AgentVm("web-1", rg="rg-a"), AgentVm("WEB-1", rg="rg-b")  # one queue: se-approvals-web-1
    fleet = Fleet()
    fleet.beat(mine, other)
    fleet.announce("E1", [mine])
    result = fleet.decide(T0 + 1)
    assert kinds(result) == [("defer", "E1", "queue-conflict")]
    assert "web-1" in result.decisions[0].reason


def test_the_approval_goes_to_an_affected_vm_whose_queue_is_its_own() -> None:
    a, b, twin = AgentVm("web-1", rg="rg-a"), AgentVm("web-2", rg="rg-a"), AgentVm("web-1", rg="rg-b")
    fleet = Fleet(policy=Policy(budgets=(Budget("group", count=2),)))
    fleet.beat(a, b, twin)
    fleet.announce("E1", [a, b], [a, b])
    (decision,) = fleet.decide(T0 + 1).decisions
    assert decision.kind == "approve" and decision.target is not None and decision.target.name == "web-2"


def test_a_template_without_the_vm_gives_every_vm_one_queue_and_nothing_is_sent() -> None:
    fleet = Fleet(policy=Policy(queue_template="se-approvals"))
    fleet.beat(AgentVm("web-1"), AgentVm("web-2"))
    fleet.announce("E1", [AgentVm("web-1")])
    assert kinds(fleet.decide(T0 + 1)) == [("defer", "E1", "queue-conflict")]
    fleet_by_id = Fleet(policy=Policy(queue_template="se-approvals-{vm_id}"))
    fleet_by_id.beat(AgentVm("web-1", rg="rg-a"), AgentVm("web-1", rg="rg-b"))
    assert index(fleet_by_id.state, fleet_by_id.policy).shared_queue == {}


def test_approve_now_refuses_a_vm_whose_queue_another_vm_shares() -> None:
    mine, other = AgentVm("web-1", rg="rg-a"), AgentVm("web-1", rg="rg-b")
    fleet = Fleet()
    fleet.beat(mine, other)
    fleet.announce("E1", [mine])
    try:
        approve_now(fleet.state, fleet.policy, T0 + 1, "E1", "alice", "now")
    except ControlRefused as refused:
        assert refused.code == "no-target"
    else:
        raise AssertionError("approve-now sent an approval to a shared queue")


def test_status_lists_the_shared_queue_and_the_log_says_it_once() -> None:
    mine, other = AgentVm("web-1", rg="rg-a"), AgentVm("WEB-1", rg="rg-b")
    fleet = Fleet()
    fleet.beat(mine, other)
    doc = status(fleet.state, fleet.policy, T0 + 1)
    assert doc["queueConflicts"] == [{"queue": "se-approvals-web-1",
                                      "vms": sorted([f"WEB-1 ({other.vm_id})", f"web-1 ({mine.vm_id})"])}]
    said = QueueConflictLog()
    idx = index(fleet.state, fleet.policy)
    (line,) = said.news(fleet.state, idx)
    assert line.startswith("approval queue se-approvals-web-1 would be shared by")
    assert said.news(fleet.state, idx) == []


def test_the_agent_rule_finds_peers_whose_queue_would_be_its_own() -> None:
    assert sharing_peers(TEMPLATE, "web-1", ["web-1", "web_1", "WEB-1", "web-2"]) == []
    assert sharing_peers("se-approvals", "web-1", ["web-1", "web_1", "web-2", "web-2"]) == ["web_1", "web-2"]
    assert sharing_peers("se-approvals-{vm_id}", "web-1", ["web-2"]) == []
    assert names_the_vm(TEMPLATE) and names_the_vm("q-{vm_id}") and not names_the_vm("se-approvals")
