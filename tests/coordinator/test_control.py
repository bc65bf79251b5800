"""People's actions: pause, resume, hold, release and approve-now, as audited decisions."""

from __future__ import annotations

import pytest

from se_forwarder.fleet.coordinator import (
    Budget,
    ControlRefused,
    Policy,
    approve_now,
    hold,
    normalize_scope,
    pause,
    release,
    resume,
    to_dict,
)

from .fleet import SET, SOURCE, T0, AgentVm, Fleet, approvals, avset, kinds

OPS = "person:ops"


class refused:  # noqa: N801 - used as a context manager, like pytest.raises
    """Expect ControlRefused with this code."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        assert isinstance(exc, ControlRefused), f"expected ControlRefused({self.code}), got {exc!r}"
        assert exc.code == self.code, f"refused with {exc.code}: {exc}"
        return True


def test_a_global_pause_is_a_pause_of_the_fleet_scope_and_stops_every_approval():
    fleet = avset()
    decision = pause(fleet.state, fleet.policy, T0, None, OPS, "incident 42")
    assert (decision.kind, decision.id, decision.subject, decision.scope) == (
        "pause", "coordinator/pause/fleet/1", "fleet", "fleet")
    assert (decision.actor, decision.reason) == (OPS, "incident 42")
    assert (decision.code, decision.sequence) == ("pause", 1)
    fleet.apply(decision)
    fleet.announce("E1", [SET[1]], SET)
    assert kinds(fleet.decide(T0 + 1)) == [("defer", "E1", "paused")]


def test_resume_lets_approvals_go_on():
    fleet = avset()
    fleet.apply(pause(fleet.state, fleet.policy, T0, "fleet", OPS, "incident"))
    fleet.announce("E1", [SET[1]], SET)
    fleet.decide(T0 + 1)
    decision = resume(fleet.state, fleet.policy, T0 + 2, "", OPS, "fixed")
    assert (decision.id, decision.sequence) == ("coordinator/resume/fleet/2", 2)
    fleet.apply(decision)
    assert approvals(fleet.decide(T0 + 3)) == ["E1"]


def test_a_paused_budget_scope_carries_its_budget_use():
    fleet = avset()
    scope = f"group:set/{SET[0].sub}/rg-web/web-0"
    decision = pause(fleet.state, fleet.policy, T0, scope.upper(), OPS, "look")
    assert decision.scope == scope
    assert [(u.scope, u.used, u.max) for u in decision.budgets] == [(scope, 0, 1)]


def test_pausing_a_paused_scope_or_resuming_a_running_one_is_refused():
    fleet = avset()
    with refused("no-change"):
        resume(fleet.state, fleet.policy, T0, "fleet", OPS, "x")
    fleet.apply(pause(fleet.state, fleet.policy, T0, "zone:westeurope/1", OPS, "x"))
    with refused("no-change"):
        pause(fleet.state, fleet.policy, T0, "zone:westeurope/1", OPS, "x")


@pytest.mark.parametrize("scope", ["rack:7", "zone:", "group", "tag:env", "zone:a\nb", "zone:a\x01"])
def test_a_scope_that_is_not_one_is_refused(scope):
    with refused("bad-request"):
        normalize_scope(scope)


@pytest.mark.parametrize(("actor", "reason"), [
    ("", "why"), (OPS, ""), (OPS, "two\nlines"), ("x" * 201, "why"),
])
def test_an_action_needs_an_actor_and_a_one_line_reason(actor, reason):
    fleet = avset()
    with refused("bad-request"):
        pause(fleet.state, fleet.policy, T0, "fleet", actor, reason)


def test_a_held_event_gets_nothing_until_released():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    decision = hold(fleet.state, fleet.policy, T0, "e1", OPS, "wait for the release")
    assert (decision.id, decision.event_id, decision.event_type) == ("E1/coordinator/hold/1", "E1", "Reboot")
    fleet.apply(decision)
    assert kinds(fleet.decide(T0 + 1)) == [("defer", "E1", "held")]
    fleet.apply(release(fleet.state, fleet.policy, T0 + 2, "E1", OPS, "go"))
    assert approvals(fleet.decide(T0 + 3)) == ["E1"]


def test_an_event_can_be_held_before_any_vm_reports_it():
    fleet = avset()
    fleet.apply(hold(fleet.state, fleet.policy, T0, "E7", OPS, "seen in the portal"))
    fleet.announce("E7", [SET[1]], SET)
    assert kinds(fleet.decide(T0 + 1)) == [("defer", "E7", "held")]


def test_hold_release_refusals():
    fleet = avset()
    with refused("bad-request"):
        hold(fleet.state, fleet.policy, T0, "not an id!", OPS, "x")
    with refused("no-change"):
        release(fleet.state, fleet.policy, T0, "E1", OPS, "x")


def test_approve_now_bypasses_pause_hold_and_the_window_but_names_the_person():
    fleet = avset(Policy(approve_within=60))
    fleet.apply(pause(fleet.state, fleet.policy, T0, "fleet", OPS, "x"))
    fleet.announce("E1", [SET[1]], SET, not_before=T0 + 86400)
    fleet.apply(hold(fleet.state, fleet.policy, T0, "E1", OPS, "x"))
    decision = approve_now(fleet.state, fleet.policy, T0 + 1, "E1", "person:alice", "customer asked")
    assert (decision.kind, decision.code, decision.actor, decision.reason) == (
        "approve", "approve-now", "person:alice", "customer asked")
    assert (decision.attempt, decision.target.name, decision.overrides) == (1, "web-1", ())


def test_approve_now_keeps_the_budgets_unless_a_scope_is_overridden():
    fleet = avset()
    fleet.transition("started", "S1", [SET[2]], t=T0)
    fleet.announce("E1", [SET[1]], SET)
    scope = f"group:set/{SET[0].sub}/rg-web/web-0"
    with refused("budget"):
        approve_now(fleet.state, fleet.policy, T0 + 1, "E1", OPS, "now")
    for override in ([scope], ["group"], ["ALL"]):
        decision = approve_now(fleet.state, fleet.policy, T0 + 1, "E1", OPS, "now", override)
        assert decision.budgets[0].with_event == 2 and decision.overrides == (override[0].lower(),)


def test_approve_now_overriding_one_scope_still_keeps_the_others():
    fleet = avset(Policy(budgets=(Budget("group", count=1), Budget("fault_domain", count=1))))
    fleet.transition("started", "S1", [SET[4]], t=T0)  # FD 1
    fleet.announce("E1", [SET[1]], SET)  # FD 1
    with refused("budget"):
        approve_now(fleet.state, fleet.policy, T0 + 1, "E1", OPS, "now", ["group"])
    assert approve_now(fleet.state, fleet.policy, T0 + 1, "E1", OPS, "now", ["group", "fault_domain"])


@pytest.mark.parametrize(("setup", "code"), [
    ("unknown", "unknown-event"), ("started", "not-scheduled"), ("approved", "already-approved"),
    ("unresolved", "unresolved"), ("silent", "no-target"),
])
def test_approve_now_refusals(setup, code):
    fleet = avset()
    if setup == "started":
        fleet.transition("started", "E1", [SET[1]], t=T0)
    elif setup == "unresolved":
        fleet.announce("E1", [SET[1], AgentVm("ghost")], SET)
    elif setup == "silent":
        fleet.announce("E1", [SET[1]], SET, t=T0 + 1000)
    elif setup != "unknown":
        fleet.announce("E1", [SET[1]], SET)
        fleet.decide(T0)
    with refused(code):
        approve_now(fleet.state, fleet.policy, T0 + 1000, "E1", OPS, "now")


def test_an_approve_now_is_retried_like_any_approval():
    fleet = avset(Policy(echo_timeout=60, budgets=(Budget("group", count=2),)))
    fleet.announce("E1", [SET[1], SET[2]], SET, not_before=T0 + 86400)
    fleet.apply(approve_now(fleet.state, fleet.policy, T0, "E1", OPS, "now"))
    fleet.sent("E1/coordinator/approve/1", t=T0)
    (retry,) = fleet.decide(T0 + 60).decisions
    assert (retry.code, retry.attempt, retry.actor) == ("retry-no-echo", 2, "coordinator")
    assert retry.target.name == "web-2"


def test_an_approve_now_that_exceeds_a_budget_is_audited_as_an_override():
    fleet = avset()
    fleet.transition("started", "S1", [SET[2]], t=T0)
    fleet.announce("E1", [SET[1]], SET)
    decision = approve_now(fleet.state, fleet.policy, T0 + 1, "E1", "person:alice", "customer asked",
                           ["group"])
    (use,) = decision.budgets
    assert (decision.code, decision.actor, decision.reason) == (
        "approve-now-override", "person:alice", "customer asked")
    assert (use.with_event, use.max, decision.overrides) == (2, 1, ("group",))
    assert to_dict(decision, SOURCE)["data"]["ReasonCode"] == "approve-now-override"


def test_an_approve_now_whose_overrides_were_not_needed_is_no_override():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    decision = approve_now(fleet.state, fleet.policy, T0 + 1, "E1", OPS, "now", ["group"])
    assert decision.code == "approve-now" and all(use.fits for use in decision.budgets)


def test_an_approve_now_of_an_event_whose_budgets_cannot_be_counted_is_an_override():
    fleet = avset()
    fleet.announce("E1", [SET[1], AgentVm("ghost")], SET)
    assert approve_now(fleet.state, fleet.policy, T0 + 1, "E1", OPS, "now", ["all"]).code == \
        "approve-now-override"


def test_the_next_sequence_is_one_more_than_the_current_switch():
    fleet = avset()
    fleet.apply(pause(fleet.state, fleet.policy, T0, "fleet", OPS, "a"))
    fleet.apply(resume(fleet.state, fleet.policy, T0 + 1, "fleet", OPS, "b"))
    again = pause(fleet.state, fleet.policy, T0 + 2, "fleet", OPS, "c")
    assert (again.sequence, again.id) == (3, "coordinator/pause/fleet/3")
    assert fleet.fold_one(to_dict(again, SOURCE)) == "folded"


def test_a_group_can_be_named_as_status_shows_it():
    from se_forwarder.fleet.coordinator.fold import fold_catch_up

    from .azure import catch_up, policy, vm_row

    fleet = avset(policy())
    fold_catch_up(fleet.state, catch_up(T0, [vm_row(vm) for vm in SET]))
    full = f"avset/{SET[0].sub}/rg-web/web"
    assert pause(fleet.state, fleet.policy, T0, "group:web", "person:ops", "by name").scope == f"group:{full}"
    assert pause(fleet.state, fleet.policy, T0, "fault_domain:WEB/1", "person:ops", "x").scope == \
        f"fault_domain:{full}/1"
    assert pause(fleet.state, fleet.policy, T0, "group:other", "person:ops", "x").scope == "group:other"


def test_a_name_two_groups_share_is_refused_naming_both():
    fleet = Fleet(Policy(group_tag="tier"))
    fleet.beat(AgentVm("a-1", tags=(("tier", "web"),)), AgentVm("b-1", scale_set="web"), t=T0)
    with pytest.raises(ControlRefused, match=r"'web' names 2 groups; give one of group:tag/web, group:vmss/"):
        pause(fleet.state, fleet.policy, T0, "group:web", "person:ops", "x")
