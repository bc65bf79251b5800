"""Approval without an agent (azure_paths.py): through ``acknowledge`` when no affected VM has a
watched agent, within the same budgets; what Azure answered decides the next path."""

from __future__ import annotations

from se_forwarder.fleet.coordinator import approve_now
from se_forwarder.fleet.coordinator.decide import acknowledge_path, acknowledged
from se_forwarder.fleet.coordinator.fold import fold_catch_up, fold_event

from .azure import catch_up, facts, feed, policy, vm_row
from .fleet import SET, T0, Fleet, approvals, kinds

AGENTS, AGENTLESS = SET[:4], SET[4:]


def fleet(t: float = T0, **kw) -> Fleet:
    f = Fleet(policy(echo_timeout=60.0, **kw))
    f.beat(*AGENTS, t=t)
    fold_catch_up(f.state, catch_up(t, [vm_row(vm) for vm in SET]))
    return f


def scheduled(f: Fleet, event_id: str, vm, t: float = T0 + 1) -> None:
    fold_event(f.state, facts(feed(event_id, "Scheduled", [vm], t, not_before=t + 900)))


def approval(f: Fleet, event_id: str, attempt: int = 1):
    return f.state.events[event_id.lower()].approvals[attempt]


def test_an_event_whose_vms_have_no_agent_is_approved_through_acknowledge():
    f = fleet()
    scheduled(f, "E4", SET[4])
    [decision] = f.decide(T0 + 2).decisions
    assert (decision.kind, decision.via, decision.target.name, decision.target.vm_id) == (
        "approve", "arm", "web-4", "")
    assert decision.data()["Via"] == "arm"
    assert acknowledge_path(f.state, "E4") == (
        f"/subscriptions/{SET[4].sub}/resourceGroups/rg-web/providers/Microsoft.Compute/virtualMachines/web-4"
        "/providers/Microsoft.Maintenance/scheduledevents/E4/acknowledge?api-version=2025-11-01")


def test_an_agent_is_preferred_when_an_affected_vm_has_one():
    f = fleet()
    scheduled(f, "E1", SET[1])
    [decision] = f.decide(T0 + 2).decisions
    assert (decision.via, decision.target.name) == (None, "web-1")
    assert decision.data()["Via"] == "queue"


def test_approvals_through_acknowledge_stay_within_the_group_budget():
    f = fleet()
    scheduled(f, "E4", SET[4])
    scheduled(f, "E5", SET[5])
    result = f.decide(T0 + 2)
    assert approvals(result) == ["E4"]
    assert f.verdict(result, "E5").code == "budget"


def test_without_acknowledge_an_agentless_vms_event_waits_saying_why():
    f = fleet(acknowledge=False)
    scheduled(f, "E4", SET[4])
    result = f.decide(T0 + 2)
    assert result.decisions[0].kind == "defer"
    assert (result.decisions[0].code, result.decisions[0].reason) == (
        "not-watched", "no affected VM has a watched agent ([azure] acknowledge is off)")


def test_what_azure_approved_is_the_events_echo_and_is_not_retried():
    f = fleet()
    scheduled(f, "E4", SET[4])
    f.decide(T0 + 2)
    f.apply(acknowledged(approval(f, "E4"), "approved", "ARM answered 200", T0 + 3))
    assert "arm" in f.state.events["e4"].echoes
    assert f.decide(T0 + 2 + 3600).decisions == []


def test_a_403_from_acknowledge_is_audited_not_approved_and_the_next_path_is_tried():
    f = fleet()
    scheduled(f, "E4", SET[4])
    f.decide(T0 + 2)
    audit = acknowledged(approval(f, "E4"), "forbidden", "ARM answered 403: AuthorizationFailed", T0 + 3)
    assert (audit.kind, audit.id, audit.code) == ("acknowledge", "E4/coordinator/approve/1/acknowledge",
                                                  "forbidden")
    f.apply(audit)
    assert f.state.decisions[audit.id].data["Reason"].startswith("ARM answered 403")
    assert f.state.events["e4"].echoes == {}
    result = f.decide(T0 + 4)
    assert kinds(result) == [("defer", "E4", "acknowledge-refused")]


def test_a_403_is_tried_again_through_acknowledge_30_s_then_1_2_4_and_5_min_after_each_refusal():
    """A role reaches ARM minutes after it is given (arm_path.RETRY); the next try is in status."""
    f = fleet()
    fold_event(f.state, facts(feed("E4", "Scheduled", [SET[4]], T0 + 1, not_before=T0 + 3000)))
    f.decide(T0 + 2)
    refused_at = T0 + 3
    for attempt, wait in enumerate((30.0, 60.0, 120.0, 240.0, 300.0, 300.0), start=1):
        f.beat(*AGENTS, t=refused_at)  # the fleet stays watched meanwhile
        fold_catch_up(f.state, catch_up(refused_at, [vm_row(vm) for vm in SET]))
        f.apply(acknowledged(approval(f, "E4", attempt), "forbidden",
                             "ARM answered 403 AuthorizationFailed: no role", refused_at))
        waiting = f.decide(refused_at + wait - 1)
        verdict = f.verdict(waiting, "E4")
        assert (verdict.code, verdict.next_try) == ("acknowledge-refused", refused_at + wait)
        assert f"the acknowledge {attempt} time(s) (ARM answered 403 AuthorizationFailed" in verdict.reason
        [retry] = f.decide(refused_at + wait).decisions
        assert (retry.kind, retry.code, retry.via, retry.attempt) == ("approve", "retry-rejected", "arm",
                                                                      attempt + 1)
        refused_at += wait + 1
    defers = [d for d in f.state.decisions.values() if d.kind == "defer"]
    assert [d.code for d in defers] == ["acknowledge-refused"]  # one defer, however many tries


def test_an_azure_policy_403_is_tried_again_too():
    f = fleet()
    scheduled(f, "E4", SET[4])
    f.decide(T0 + 2)
    f.apply(acknowledged(approval(f, "E4"), "disallowed-by-policy",
                         "ARM answered 403 RequestDisallowedByPolicy: Azure Policy 'No early'", T0 + 3))
    assert f.verdict(f.decide(T0 + 4), "E4").next_try == T0 + 33
    assert approvals(f.decide(T0 + 33)) == ["E4"]


def test_an_event_azure_no_longer_has_is_not_tried_again_after_a_404():
    f = fleet()
    scheduled(f, "E4", SET[4])
    f.decide(T0 + 2)
    f.apply(acknowledged(approval(f, "E4"), "not-found", "ARM answered 404", T0 + 3))
    assert kinds(f.decide(T0 + 4)) == [("defer", "E4", "no-target")]
    assert f.decide(T0 + 3600).decisions == []


def test_after_a_403_an_agent_that_comes_back_gets_the_approval():
    f = fleet()
    fold_event(f.state, facts(feed("E3", "Scheduled", [SET[3]], T0 + 1, not_before=T0 + 900)))
    f.decide(T0 + 200)  # web-3's agent is not watched any more: through ARM
    assert approval(f, "E3").data["Via"] == "arm"
    f.apply(acknowledged(approval(f, "E3"), "forbidden", "ARM answered 403", T0 + 201))
    f.beat(SET[3], t=T0 + 202)
    [retry] = f.decide(T0 + 203).decisions
    assert (retry.kind, retry.code, retry.target.name, retry.via) == (
        "approve", "retry-rejected", "web-3", None)
    assert retry.reason == "acknowledge rejected the approval; sending it to web-3"


def test_an_acknowledge_that_got_no_answer_is_retried_through_arm_after_the_echo_timeout():
    f = fleet()
    scheduled(f, "E4", SET[4])
    f.decide(T0 + 2)
    f.apply(acknowledged(approval(f, "E4"), "failed", "no answer from ARM", T0 + 3))
    assert f.decide(T0 + 30).decisions == []
    [retry] = f.decide(T0 + 63).decisions
    assert (retry.code, retry.via, retry.attempt) == ("retry-no-echo", "arm", 2)


def test_a_person_can_approve_an_agentless_vms_event_now_through_acknowledge():
    f = fleet()
    scheduled(f, "E4", SET[4])
    f.policy = policy(echo_timeout=60.0, approve_within=60.0)
    decision = approve_now(f.state, f.policy, T0 + 2, "E4", "person:ops", "patch night")
    assert (decision.via, decision.target.name, decision.code) == ("arm", "web-4", "approve-now")


def test_an_event_azure_shows_started_is_not_acknowledged():
    f = fleet()
    fold_event(f.state, facts(feed("E4", "Started", [SET[4]], T0 + 1)))
    assert f.decide(T0 + 2).decisions == []


def test_an_approval_through_acknowledge_asks_for_no_queue_message():
    f = fleet()
    scheduled(f, "E4", SET[4])
    result = f.decide(T0 + 2)
    assert approvals(result) == ["E4"] and result.sends == []
    later = f.decide(T0 + 30)  # still unanswered: no message is asked for in later passes either
    assert later.sends == [] and later.decisions == []
    assert f.verdict(later, "E4").reason == "approved, acknowledge not answered yet"


def test_the_echo_timeout_of_an_approval_through_acknowledge_counts_from_what_azure_answered():
    f = fleet()
    scheduled(f, "E4", SET[4])
    f.decide(T0 + 2)
    f.apply(acknowledged(approval(f, "E4"), "failed", "no answer from ARM", T0 + 40))
    assert f.verdict(f.decide(T0 + 99), "E4").reason == "approved, acknowledged, ARM answered failed"
    [retry] = f.decide(T0 + 100).decisions
    assert (retry.code, retry.via, retry.attempt) == ("retry-no-echo", "arm", 2)


def test_an_approval_through_acknowledge_without_an_answer_is_retried_after_the_echo_timeout():
    """The instance that made it stopped leading before Azure answered: nobody will publish what
    Azure said, so the timeout counts from the approval itself."""
    f = fleet()
    scheduled(f, "E4", SET[4])
    f.decide(T0 + 2)
    assert f.decide(T0 + 61).decisions == []
    [retry] = f.decide(T0 + 62).decisions
    assert (retry.code, retry.via, retry.attempt) == ("retry-no-echo", "arm", 2)
