"""The health verdict (pure): only results in a row flip it, and its reason stays one short line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from se_forwarder.health.verdict import ProbeState, combine, reason_line, step
from se_forwarder.model import HEALTHY, REASON_CHARS, UNHEALTHY, UNKNOWN
from se_forwarder.printable import has_controls

results = st.lists(st.booleans(), max_size=60)
thresholds = st.integers(min_value=1, max_value=6)


def run(outcomes, healthy, unhealthy, reason="HTTP 503"):
    state = ProbeState("web")
    history = []
    for passed in outcomes:
        state = step(state, passed, None if passed else reason, healthy_threshold=healthy,
                     unhealthy_threshold=unhealthy)
        history.append(state.verdict)
    return history


def expected(outcomes, healthy, unhealthy):
    """The rule said plainly: the verdict changes only after enough results in a row."""
    verdict, streak, last, out = UNKNOWN, 0, None, []
    for passed in outcomes:
        streak = streak + 1 if passed == last else 1
        last = passed
        if passed and streak >= healthy:
            verdict = HEALTHY
        elif not passed and streak >= unhealthy:
            verdict = UNHEALTHY
        out.append(verdict)
    return out


@given(results, thresholds, thresholds)
def test_the_verdict_changes_only_after_enough_results_in_a_row(outcomes, healthy, unhealthy):
    assert run(outcomes, healthy, unhealthy) == expected(outcomes, healthy, unhealthy)


def test_three_failures_make_a_healthy_probe_unhealthy_and_one_pass_makes_it_healthy_again():
    assert run([True, False, False, False, True], 1, 3) == [HEALTHY, HEALTHY, HEALTHY, UNHEALTHY, HEALTHY]


def test_a_probe_is_unknown_until_it_passed_or_failed_enough_times_in_a_row():
    assert run([True, False, True, True], 2, 3) == [UNKNOWN, UNKNOWN, UNKNOWN, HEALTHY]


@given(st.text(max_size=2000))
def test_a_reason_is_one_printable_line_of_bounded_length(text):
    line = reason_line(text)
    assert len(line) <= REASON_CHARS and not has_controls(line)


def test_the_vm_is_unhealthy_when_any_probe_is_and_the_verdict_names_it():
    web = step(ProbeState("web"), True, None, healthy_threshold=1, unhealthy_threshold=1)
    db = step(ProbeState("db"), False, "cannot connect to 127.0.0.1:5432: Connection refused",
              healthy_threshold=1, unhealthy_threshold=1)
    verdict = combine([web, db], healthy_threshold=1, since=10.0, checked_at=10.0)
    assert (verdict.verdict, verdict.probe, verdict.probes) == (UNHEALTHY, "db", 2)
    assert verdict.reason == "cannot connect to 127.0.0.1:5432: Connection refused"
    assert verdict.last_round_ok is False


def test_the_vm_is_healthy_only_when_every_probe_is():
    web = step(ProbeState("web"), True, None, healthy_threshold=1, unhealthy_threshold=3)
    db = ProbeState("db")
    assert combine([web, db], healthy_threshold=1, since=1.0, checked_at=1.0).verdict == UNKNOWN
    db = step(db, True, None, healthy_threshold=1, unhealthy_threshold=3)
    verdict = combine([web, db], healthy_threshold=1, since=2.0, checked_at=2.0)
    assert (verdict.verdict, verdict.probe, verdict.reason, verdict.last_round_ok) == (
        HEALTHY, None, None, True)


def test_an_unchanged_verdict_keeps_the_time_it_began():
    state = step(ProbeState("web"), True, None, healthy_threshold=1, unhealthy_threshold=3)
    first = combine([state], healthy_threshold=1, since=100.0, checked_at=100.0)
    later = combine([state], healthy_threshold=1, since=200.0, checked_at=200.0, previous=first)
    assert (later.since, later.checked_at) == (100.0, 200.0)


def test_an_unknown_verdict_says_what_it_waits_for():
    state = step(ProbeState("web"), False, "HTTP 503", healthy_threshold=2, unhealthy_threshold=3)
    verdict = combine([state], healthy_threshold=2, since=1.0, checked_at=1.0)
    assert (verdict.verdict, verdict.probe) == (UNKNOWN, "web")
    assert verdict.reason == "failing (1 in a row): HTTP 503"
