"""One approval per decision: an approval's message is asked for until a ``sent`` record says it went
out, and the "no echo" retry counts from that record, not from the decision."""

from __future__ import annotations

from se_forwarder.fleet.coordinator import Budget, Policy, restore, to_dict
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.decide import sent
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot

from .fleet import SET, SOURCE, T0, Fleet, approved, avset, kinds, pause_event, rejected

FIRST = "E1/coordinator/approve/1"


def unsent_approval(policy: Policy | None = None) -> Fleet:
    """E1 (web-1 and web-2) approved to web-1 at T0, its message not sent (the queue is down)."""
    fleet = avset(policy or Policy(echo_timeout=120, budgets=(Budget("group", count=2),)))
    fleet.announce("E1", [SET[1], SET[2]], SET, not_before=T0 + 900)
    result = fleet.decide(T0, send=False)
    assert [d.id for d in result.decisions] == [FIRST] and result.sends == [FIRST]
    return fleet


def test_an_approval_whose_message_was_never_sent_is_not_retried_elsewhere_however_long_it_waits():
    fleet = unsent_approval()
    for later in (T0 + 120, T0 + 500, T0 + 890):
        fleet.beat(*SET, t=later)
        result = fleet.decide(later, send=False)
        assert result.decisions == [] and result.sends == [FIRST]
        assert fleet.verdict(result, "E1").reason == "approved, its message not sent yet"


def test_the_echo_timeout_counts_from_when_the_message_was_sent():
    fleet = unsent_approval()
    fleet.sent(FIRST, t=T0 + 300)
    fleet.beat(*SET, t=T0 + 400)
    assert kinds(fleet.decide(T0 + 419)) == []
    (retry,) = fleet.decide(T0 + 420).decisions
    assert (retry.code, retry.attempt, retry.target.name) == ("retry-no-echo", 2, "web-2")


def test_a_sent_approval_is_not_asked_for_again():
    fleet = unsent_approval()
    fleet.sent(FIRST, t=T0 + 5)
    result = fleet.decide(T0 + 6)
    assert result.sends == [] and fleet.verdict(result, "E1").reason == "approved, sent, waiting for the echo"


def test_a_new_approval_is_asked_for_in_the_pass_that_makes_it():
    fleet = unsent_approval()
    fleet.sent(FIRST, t=T0)
    result = fleet.decide(T0 + 120, send=False)
    assert result.sends == ["E1/coordinator/approve/2"] == [d.id for d in result.decisions]


def test_an_unsent_approval_waits_while_paused_and_goes_out_after():
    fleet = unsent_approval()
    fleet.fold(pause_event("fleet", 1, T0 + 10))
    assert fleet.decide(T0 + 20, send=False).sends == []
    fleet.fold({**pause_event("fleet", 2, T0 + 30), "type": "com.azure.scheduledevents.coordinator.resume",
                "id": "coordinator/resume/fleet/2"})
    assert fleet.decide(T0 + 40, send=False).sends == [FIRST]


def test_an_unsent_approval_is_not_asked_for_once_not_before_has_passed_or_it_was_echoed():
    late = unsent_approval()
    assert late.decide(T0 + 900, send=False).sends == []
    echoed = unsent_approval()
    echoed.fold(approved(SET[1], "E1", T0 + 5, resources=["web-1", "web-2"]))
    assert echoed.decide(T0 + 6, send=False).sends == []


def test_shadow_mode_asks_for_no_message():
    fleet = avset(Policy(shadow=True, budgets=(Budget("group", count=2),)))
    fleet.announce("E1", [SET[1], SET[2]], SET, not_before=T0 + 900)
    result = fleet.decide(T0, send=False)
    assert [d.kind for d in result.decisions] == ["approve"] and result.sends == []


def test_a_rejection_of_a_message_whose_sent_record_was_lost_is_retried_at_once():
    fleet = unsent_approval()  # the leader died after the enqueue, before publishing the record
    fleet.fold(rejected(SET[1], "E1", T0 + 5, FIRST, "bad-signature"))
    (retry,) = fleet.decide(T0 + 6).decisions
    assert (retry.code, retry.target.name) == ("retry-rejected", "web-2")


def test_two_sent_records_of_one_attempt_keep_the_earlier_whatever_the_order():
    one, two = unsent_approval(), unsent_approval()
    approval = one.state.decisions[FIRST]
    early, late = (to_dict(sent(approval, "q", t), SOURCE) for t in (T0 + 5, T0 + 9))
    for fleet, order in ((one, (early, late)), (two, (late, early))):
        for event in order:
            fold_event(fleet.state, event)
    assert one.state.events["e1"].sends[1].time == two.state.events["e1"].sends[1].time == T0 + 5
    assert snapshot(one.state) == snapshot(two.state)


def test_a_sent_record_survives_a_snapshot():
    fleet = unsent_approval()
    fleet.sent(FIRST, t=T0 + 5)
    restored = restore(snapshot(fleet.state))
    assert restored.events["e1"].sends[1].time == T0 + 5


def test_an_unsent_approval_goes_out_only_while_every_budget_still_fits():
    """Sending its message is what approves the event: when a VM of its group went down before the
    message could go out, it waits (deferred for the budget), and goes out once the group has room."""
    fleet = unsent_approval()
    fleet.transition("started", "S1", [SET[3]], t=T0 + 10)
    fleet.beat(*SET, t=T0 + 20)
    result = fleet.decide(T0 + 20, send=False)
    assert kinds(result) == [("defer", "E1", "budget")] and result.sends == []
    fleet.transition("completed", "S1", [SET[3]], t=T0 + 30)
    later = T0 + 31 + fleet.policy.min_healthy
    fleet.beat(*SET, t=later)
    assert fleet.decide(later, send=False).sends == [FIRST]
