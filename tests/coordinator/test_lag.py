"""No decision on a stale picture (issue 31): how far the fold is behind each hub, in time, from what
the readers' watchers saw of the partitions' ends and what the loop folded; past ``max_lag`` no early
approval; a position older than its partition's beginning is a gap."""

from __future__ import annotations

import logging

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import approve_now, evaluate, load_policy
from se_forwarder.fleet.coordinator.input.hub_reader import Position
from se_forwarder.fleet.coordinator.input.lag import LATE_ALERT_AFTER, End, LagGuard, Watch, gaps, measure
from se_forwarder.fleet.coordinator.output.alert_book import AlertBook

from .fleet import SET, T0, approvals, avset

NOW = 1_800_000_000.0


def watch(ends: dict[str, list[tuple[int, float]]], begins: int = 0, answered: float = NOW,
          **kw) -> Watch:
    w = Watch("the agents' hub", **kw)
    rounds = max(len(v) for v in ends.values())
    for i in range(rounds):
        w.observe({pid: End(seen[min(i, len(seen) - 1)][0], seen[min(i, len(seen) - 1)][1], begins)
                   for pid, seen in ends.items()}, answered)
    return w


def test_the_lag_is_the_age_of_the_first_end_seen_beyond_what_was_folded():
    w = watch({"0": [(10, NOW - 30), (14, NOW - 20), (20, NOW - 2)], "1": [(5, NOW - 40)]})
    lag = measure(w, {"0": Position(12, "x"), "1": Position(5, "y")}, NOW, 5.0)
    assert (lag.seconds, lag.events, lag.partition) == (20.0, 8, "0")


def test_a_fold_that_reached_the_last_end_seen_has_no_lag():
    w = watch({"0": [(10, NOW - 30)]})
    assert measure(w, {"0": Position(10, "x")}, NOW, 5.0).seconds == 0.0


def test_a_quiet_partition_s_one_new_event_is_not_lag_of_the_gap_before_it():
    """An event enqueued just before the question is young, however long the partition was quiet."""
    w = watch({"0": [(10, NOW - 600), (11, NOW - 0.2)]})
    assert measure(w, {"0": Position(10, "x")}, NOW, 5.0).seconds == pytest.approx(0.2)


def test_nothing_folded_of_a_partition_counts_from_where_it_begins():
    w = watch({"0": [(99, NOW - 9)]}, begins=50)
    lag = measure(w, {}, NOW, 5.0)
    assert (lag.seconds, lag.events) == (9.0, 50)


def test_an_empty_partition_is_not_lag():
    w = watch({"0": [(-1, None)]}, begins=-1)  # type: ignore[list-item]
    assert measure(w, {}, NOW, 5.0).seconds == 0.0


def test_the_guard_says_why_once_and_once_when_caught_up(caplog):
    w = watch({"0": [(10, NOW - 30)]})
    guard = LagGuard([w], 5.0)
    caplog.set_level(logging.INFO, "se_forwarder.coordinator.hub")
    behind = {"0": Position(3, "x")}
    assert "30 s behind the agents' hub (7 event(s) not folded yet" in guard.stale(behind, NOW)
    assert guard.stale(behind, NOW + 1)
    assert guard.stale({"0": Position(10, "x")}, NOW + 2) == ""
    lines = [r.getMessage() for r in caplog.records]
    assert len([line for line in lines if "no early approval" in line]) == 1
    assert len([line for line in lines if "caught up" in line]) == 1


def test_a_backlog_waiting_for_verification_is_lag_though_the_hub_s_last_answer_was_folded():
    """What the verifier's workers have not checked yet is not folded: past max_lag it stops early
    approvals like a late fold, says so, and shows in the hub's lag."""
    backlog: list[tuple[int, float | None]] = [(0, None)]
    guard = LagGuard([watch({"0": [(10, NOW - 30)]})], 5.0, backlog=lambda: backlog[0])
    folded = {"0": Position(10, "x")}
    assert guard.stale(folded, NOW) == ""
    backlog[0] = (300, NOW - 12)
    assert guard.stale(folded, NOW) == ("verification is 12 s behind the agents' hub (300 event(s) waiting "
                                        "for the verifier's workers), more than max_lag 5 s")
    assert (guard.lags[0].seconds, guard.lags[0].events) == (12.0, 300)
    backlog[0] = (40, NOW - 3)
    assert guard.stale(folded, NOW) == ""


def test_a_lag_within_max_lag_is_not_stale():
    guard = LagGuard([watch({"0": [(10, NOW - 4)]})], 5.0)
    assert guard.stale({"0": Position(3, "x")}, NOW) == ""


def test_an_agents_hub_that_has_not_answered_for_long_is_stale_the_feed_hub_is_not():
    silent = watch({"0": [(10, NOW - 1)]}, answered=NOW - 60)
    feed = watch({"0": [(10, NOW - 1)]}, answered=NOW - 60, prefix="feed:x/", second=True)
    assert "has not answered for 60 s" in LagGuard([silent], 5.0).stale({"0": Position(10, "x")}, NOW)
    assert LagGuard([feed], 5.0).stale({"feed:x/0": Position(10, "x")}, NOW) == ""


def test_a_position_older_than_where_the_partition_begins_is_a_gap_and_it_latches(caplog):
    w = watch({"0": [(500, NOW)]}, begins=400)
    assert gaps(w, {"0": Position(399, "x")}) == []
    [line] = gaps(w, {"0": Position(120, "x")})
    assert "folded up to 120 but the hub now keeps it from 400 on: 279 event(s)" in line
    guard = LagGuard([w], 5.0)
    assert guard.check_gaps({"0": Position(120, "x")})
    assert guard.check_gaps({"0": Position(450, "x")})  # reading on past it mends nothing
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1


def test_a_guard_that_stopped_early_approvals_for_a_minute_raises_fold_late_cleared_when_caught_up():
    book, w = AlertBook(), watch({"0": [(10, NOW - 30)]})
    guard = LagGuard([w], 5.0, book)
    behind = {"0": Position(3, "x")}
    guard.stale(behind, NOW)
    w.observe({"0": End(10, NOW - 30, 0)}, NOW + LATE_ALERT_AFTER - 1)
    guard.stale(behind, NOW + LATE_ALERT_AFTER - 1)
    assert book.open() == []  # a short lag is the guard's business, not on-call's
    w.observe({"0": End(10, NOW - 30, 0)}, NOW + LATE_ALERT_AFTER)
    guard.stale(behind, NOW + LATE_ALERT_AFTER)
    [alert] = book.open()
    assert (alert.id, alert.kind, alert.severity) == ("fold-late", "fold-late", "warning")
    assert alert.summary.startswith("no early approval since 2027-01-15T08:00:00Z: "
                                    "the fold is 90 s behind the agents' hub")
    guard.stale({"0": Position(10, "x")}, NOW + LATE_ALERT_AFTER + 1)
    assert book.open() == []


def test_a_gap_and_a_rolled_back_snapshot_each_raise_fold_gap_once_latched():
    book = AlertBook()
    guard = LagGuard([watch({"0": [(500, NOW)]}, begins=400)], 5.0, book)
    guard.check_gaps({"0": Position(120, "x")})
    [alert] = book.open()
    assert (alert.id, alert.severity) == ("fold-gap", "critical")
    assert alert.summary.startswith("this instance does not act: partition 0 of the agents' hub was folded "
                                    "up to 120")
    rolled = LagGuard([], 5.0, book := AlertBook())
    rolled.block("the snapshot's generation 3 is older than the lease's 7")
    assert [a.summary for a in book.open()] == [
        "this instance does not act: the snapshot's generation 3 is older than the lease's 7"]


def test_max_lag_is_a_policy_duration_checked_in_one_line():
    assert load_policy({"policy": {"max_lag": "10s"}}).max_lag == 10.0
    assert load_policy({}).max_lag == 5.0
    with pytest.raises(ConfigError, match=r"^policy.max_lag: '0s' is out of range \(1s\.\.1h\)$"):
        load_policy({"policy": {"max_lag": "0s"}})


# -- the decision pass on a late picture -------------------------------------------------------------

def test_no_event_is_approved_on_a_late_picture_and_why_is_its_verdict_once():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET, t=T0, not_before=T0 + 900)
    late = evaluate(fleet.state, fleet.policy, T0 + 1, "the fold is 12 s behind the agents' hub")
    assert approvals(late) == [] and late.verdicts["e1"].code == "stale"
    assert [(d.kind, d.code) for d in late.decisions] == [("defer", "stale")]
    fleet.apply(*late.decisions)
    again = evaluate(fleet.state, fleet.policy, T0 + 2, "the fold is 13 s behind the agents' hub")
    assert again.decisions == []  # once per change of reason
    assert approvals(fleet.decide(T0 + 3)) == ["E1"]  # caught up: it goes


def test_an_approval_made_before_is_neither_sent_nor_retried_on_a_late_picture():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET, t=T0, not_before=T0 + 900)
    fleet.decide(T0 + 1, send=False)
    late = evaluate(fleet.state, fleet.policy, T0 + 2, "late")
    assert late.sends == [] and late.verdicts["e1"].code == "approved"
    assert evaluate(fleet.state, fleet.policy, T0 + 3).sends  # caught up: the message goes
    fleet.sent(*evaluate(fleet.state, fleet.policy, T0 + 3).sends, t=T0 + 3)
    retry = evaluate(fleet.state, fleet.policy, T0 + 3 + fleet.policy.echo_timeout + 1, "late")
    assert approvals(retry) == []


def test_a_person_s_approve_now_still_goes_on_a_late_picture():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET, t=T0, not_before=T0 + 900)
    fleet.apply(approve_now(fleet.state, fleet.policy, T0 + 1, "E1", "person:ops", "urgent"))
    assert evaluate(fleet.state, fleet.policy, T0 + 2, "late").sends == ["E1/coordinator/approve/1"]


def test_the_watcher_finds_a_gap_before_its_reader_reads_past_it():
    w = Watch("the agents' hub")
    w.check_start({"0": End(500, NOW, 400), "1": End(50, NOW, 0)}, {"0": 120, "1": 10})
    guard = LagGuard([w], 5.0)
    # the fold then reads on from where the partition begins: the gap is still said
    said = guard.check_gaps({"0": Position(450, "x")})
    assert "folded up to 120 but the hub now keeps it from 400 on" in said


def test_an_instance_waits_for_the_agents_hub_s_first_answer_not_the_feed_s():
    agents, feed = Watch("the agents' hub"), Watch("the Azure feed hub", "feed:x/", second=True)
    guard = LagGuard([agents, feed], 5.0)
    assert guard.unmeasured() == "it has not yet learned how far the fold is behind the agents' hub"
    agents.observe({"0": End(10, NOW, 0)}, NOW)
    assert guard.unmeasured() == ""
    assert LagGuard([], 5.0).unmeasured() == ""
