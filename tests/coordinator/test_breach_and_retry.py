"""Breach warnings ahead of a NotBefore, and approvals resent when no echo comes back."""

from __future__ import annotations

from se_forwarder.fleet.coordinator import Budget, Decision, Policy, VmRef, approve_now

from .fleet import SET, T0, AgentVm, Fleet, approved, avset, kinds, pause_event, rejected


def test_an_event_whose_own_vms_exceed_a_budget_gets_a_breach_warning_and_no_approval():
    fleet = avset()
    fleet.announce("E1", [SET[1], SET[2]], SET, not_before=T0 + 600)
    result = fleet.decide(T0)
    assert kinds(result) == [("breach", "E1", "breach"), ("defer", "E1", "budget")]
    breach = result.decisions[0]
    (use,) = breach.budgets
    assert (use.kind, use.with_event, use.max) == ("group", 2, 1) and breach.scope == use.scope
    assert breach.reason.startswith(
        "at NotBefore 2026-03-02 12:10 UTC this event alone takes 2 VMs of group:")
    assert breach.id.startswith("E1/coordinator/breach/")


def test_a_breach_is_warned_once():
    fleet = avset()
    fleet.announce("E1", [SET[1], SET[2]], SET, not_before=T0 + 600)
    fleet.decide(T0)
    assert kinds(fleet.decide(T0 + 10)) == []


def test_a_breach_is_warned_again_when_another_scope_joins():
    fleet = avset(Policy(budgets=(Budget("group", count=1), Budget("fault_domain", count=1))))
    fleet.announce("E1", [SET[1], SET[2]], SET, not_before=T0 + 600)  # FD 1 and FD 2: only the group
    first = fleet.decide(T0)
    assert [u.kind for u in first.decisions[0].budgets] == ["group"]
    fleet.announce("E1", [SET[1], SET[2], SET[4]], SET, t=T0 + 5, not_before=T0 + 600)  # web-4: FD 1
    second = fleet.decide(T0 + 10)
    breach = next(d for d in second.decisions if d.kind == "breach")
    assert [u.kind for u in breach.budgets] == ["group", "fault_domain"]
    assert breach.id != first.decisions[0].id


def test_a_breach_is_warned_even_when_the_event_is_too_far_ahead_or_held():
    fleet = avset(Policy(approve_within=600))
    fleet.fold(pause_event("fleet"))
    fleet.announce("E1", [SET[1], SET[2]], SET, not_before=T0 + 86400)
    assert kinds(fleet.decide(T0)) == [("breach", "E1", "breach"), ("defer", "E1", "too-early")]


def test_an_event_that_fits_on_its_own_is_no_breach_even_when_it_must_wait():
    fleet = avset()
    fleet.transition("started", "S1", [SET[3]], t=T0)
    fleet.announce("E1", [SET[1]], SET)
    assert kinds(fleet.decide(T0 + 1)) == [("defer", "E1", "budget")]


def test_an_unmanaged_event_gets_no_breach():
    fleet = avset()
    fleet.announce("F1", [SET[1], SET[2]], SET, event_type="Freeze")
    assert kinds(fleet.decide(T0)) == []


def test_an_event_that_can_never_fit_does_not_hold_back_later_events():
    fleet = avset(Policy(budgets=(Budget("group", count=2),)))
    fleet.announce("HUGE", SET[1:4], SET, not_before=T0 + 600)
    fleet.announce("SMALL", [SET[4]], SET, not_before=T0 + 900)
    assert kinds(fleet.decide(T0)) == [
        ("breach", "HUGE", "breach"), ("defer", "HUGE", "budget"), ("approve", "SMALL", "fits")]


# -- echo timeout -----------------------------------------------------------------------------------


def two_vm_event(policy: Policy | None = None) -> Fleet:
    fleet = avset(policy or Policy(echo_timeout=120, budgets=(Budget("group", count=2),)))
    fleet.announce("E1", [SET[1], SET[2]], SET, not_before=T0 + 900)
    assert [d.target.name for d in fleet.decide(T0).decisions] == ["web-1"]
    return fleet


def test_no_echo_within_the_timeout_resends_the_approval_to_another_affected_vm():
    fleet = two_vm_event()
    assert kinds(fleet.decide(T0 + 119)) == []
    result = fleet.decide(T0 + 120)
    (retry,) = result.decisions
    assert (retry.kind, retry.code, retry.attempt) == ("approve", "retry-no-echo", 2)
    assert retry.target.name == "web-2"
    assert retry.id == "E1/coordinator/approve/2"
    assert retry.reason == "no approved echo from web-1 within 2 min; sending it to web-2"


def test_retries_cycle_through_the_affected_vms():
    fleet = two_vm_event()
    fleet.decide(T0 + 120)
    fleet.beat(*SET, t=T0 + 200)
    (third,) = fleet.decide(T0 + 240).decisions
    assert (third.attempt, third.target.name) == (3, "web-1")


def test_an_echo_stops_the_retries():
    fleet = two_vm_event()
    fleet.fold(approved(SET[1], "E1", T0 + 30, resources=["web-1", "web-2"]))
    result = fleet.decide(T0 + 500)
    assert result.decisions == [] and fleet.verdict(result, "E1").reason == "approved, echoed by an agent"


def test_a_rejected_approval_is_resent_at_once_to_a_vm_that_did_not_reject_it():
    fleet = two_vm_event()
    fleet.fold(rejected(SET[1], "E1", T0 + 5, "E1/coordinator/approve/1", "bad-signature"))
    (retry,) = fleet.decide(T0 + 6).decisions
    assert (retry.code, retry.target.name) == ("retry-rejected", "web-2")


def test_a_replayed_rejection_is_a_duplicate_delivery_not_a_failure():
    fleet = two_vm_event()
    fleet.fold(rejected(SET[1], "E1", T0 + 5, "E1/coordinator/approve/1", "replayed"))
    assert kinds(fleet.decide(T0 + 6)) == []


def test_when_every_affected_vm_rejected_the_approval_the_event_is_deferred_no_target():
    fleet = two_vm_event()
    fleet.fold(rejected(SET[1], "E1", T0 + 5, "E1/coordinator/approve/1", "bad-signature"))
    fleet.decide(T0 + 6)
    fleet.fold(rejected(SET[2], "E1", T0 + 8, "E1/coordinator/approve/2", "bad-signature"))
    assert kinds(fleet.decide(T0 + 9)) == [("defer", "E1", "no-target")]
    assert kinds(fleet.decide(T0 + 500)) == []


def test_a_single_affected_vm_gets_the_approval_again():
    fleet = avset(Policy(echo_timeout=60))
    fleet.announce("E1", [SET[1]], SET)
    fleet.decide(T0)
    (retry,) = fleet.decide(T0 + 60).decisions
    assert (retry.attempt, retry.target.name) == (2, "web-1")


def test_the_retry_goes_only_to_a_watched_vm():
    fleet = two_vm_event()
    fleet.beat(*SET[:2], *SET[3:], t=T0 + 250)  # web-2 stopped heartbeating at T0
    (retry,) = fleet.decide(T0 + 300).decisions
    assert retry.target.name == "web-1"


def test_no_retry_while_paused_or_after_not_before():
    fleet = two_vm_event()
    fleet.fold(pause_event("fleet"))
    assert kinds(fleet.decide(T0 + 150)) == []
    late = two_vm_event()
    assert kinds(late.decide(T0 + 900)) == []


def test_shadow_mode_never_retries():
    fleet = two_vm_event(Policy(shadow=True, echo_timeout=120, budgets=(Budget("group", count=2),)))
    result = fleet.decide(T0 + 1000 - 200)
    assert result.decisions == [] and "shadow" in fleet.verdict(result, "E1").reason


def test_the_approval_goes_first_to_a_vm_that_reported_the_event():
    fleet = avset(Policy(budgets=(Budget("group", count=2),)))
    fleet.announce("E1", [SET[1], SET[2]], [SET[2], SET[3]])
    (decision,) = fleet.decide(T0).decisions
    assert decision.target.name == "web-2"


def test_an_incomplete_agent_is_a_target_by_name():
    bare = AgentVm("web-9", complete=False)
    fleet = Fleet()
    fleet.beat(bare)
    fleet.announce("E1", [bare])
    (decision,) = fleet.decide(T0).decisions
    assert decision.target.as_data() == {"name": "web-9", "vmId": "", "group": "set/-/-/web-9"}


# -- a retry re-checks every budget -------------------------------------------------------------


def test_a_retry_counts_its_own_event_once_and_goes_when_it_still_fits():
    fleet = avset(Policy(echo_timeout=60))  # group budget 1: the event's own VM fills it
    fleet.announce("E1", [SET[1]], SET)
    fleet.decide(T0)
    fleet.beat(*SET, t=T0 + 50)
    (retry,) = fleet.decide(T0 + 60).decisions
    (use,) = retry.budgets
    assert (retry.code, use.used, use.with_event, use.max) == ("retry-no-echo", 1, 1, 1)


def test_a_retry_waits_while_another_vm_of_its_group_went_down_meanwhile():
    fleet = avset(Policy(echo_timeout=60))
    fleet.announce("E1", [SET[1]], SET)
    fleet.decide(T0)
    fleet.beat(*SET, t=T0 + 50)
    fleet.transition("started", "S1", [SET[3]], t=T0 + 55)  # a platform event nobody approved
    result = fleet.decide(T0 + 60)
    assert kinds(result) == [("defer", "E1", "budget")]
    assert fleet.verdict(result, "E1").reason.endswith("would have 2 unavailable, max 1: the approval "
                                                       "is not resent")
    fleet.transition("completed", "S1", [SET[3]], t=T0 + 70)
    fleet.beat(*SET, t=T0 + 70 + fleet.policy.min_healthy)
    (retry,) = fleet.decide(T0 + 71 + fleet.policy.min_healthy).decisions
    assert (retry.kind, retry.code, retry.attempt) == ("approve", "retry-no-echo", 2)


def test_an_approval_that_breaks_a_budget_is_never_resent():
    """However an approval beyond the budgets got into the fold (the review forged one), neither
    its message nor a retry goes out: both check the budgets as a first approval does."""
    fleet = avset(Policy(echo_timeout=60))
    fleet.announce("E2", [SET[1], SET[2]], SET, not_before=T0 + 900)  # 2 VMs of a group of max 1
    fleet.apply(Decision("approve", "E2/coordinator/approve/1", "E2", T0, "fits", "r", event_id="E2",
                         target=VmRef("web-1", SET[1].vm_id, ""), attempt=1))
    fleet.beat(*SET, t=T0 + 100)
    result = fleet.decide(T0 + 120)
    assert kinds(result) == [("defer", "E2", "budget")]
    assert result.sends == []


def test_a_retry_of_a_persons_override_keeps_the_override_and_only_it():
    budgets = (Budget("group", count=1), Budget("fault_domain", count=1))
    fleet = avset(Policy(echo_timeout=60, budgets=budgets))
    fleet.transition("started", "S1", [SET[3]], t=T0)  # group full; web-3 is FD 0
    fleet.announce("E1", [SET[1]], SET, not_before=T0 + 900)  # web-1: FD 1
    fleet.apply(approve_now(fleet.state, fleet.policy, T0, "E1", "person:ops", "customer asked", ["group"]))
    fleet.sent("E1/coordinator/approve/1", t=T0)
    fleet.beat(*SET, t=T0 + 50)
    (retry,) = fleet.decide(T0 + 60).decisions
    assert (retry.code, retry.overrides) == ("retry-no-echo", ("group",))
    fleet.beat(*SET, t=T0 + 100)
    fleet.transition("started", "S2", [SET[4]], t=T0 + 100)  # web-4: FD 1, not overridden
    result = fleet.decide(T0 + 130)
    assert kinds(result) == [("defer", "E1", "budget")]
    assert fleet.verdict(result, "E1").scope.startswith("fault_domain:")
