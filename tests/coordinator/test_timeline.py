"""The rollout timeline: each VM's Scheduled, approved, Started and min_healthy spans, and a group's
budget line, from the fold (and on the fleet page's document)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import Policy
from se_forwarder.fleet.coordinator.decide import index
from se_forwarder.fleet.coordinator.view import Span, down, page_view, peak, spans

from .fleet import SET, T0, avset, report

MIN_HEALTHY = 300.0


def rollout(count: int = 3):
    """web-1.. web-<count> each get a Reboot (all reported at T0); the coordinator approves one at a
    time (group budget 1); each starts 10 s after its approval and completes 60 s later."""
    fleet = avset(Policy(min_healthy=MIN_HEALTHY))
    vms = SET[1:count + 1]
    for n, vm in enumerate(vms):
        fleet.announce(f"E{n}", [vm], SET, t=T0 + n, not_before=T0 + 3000 + n)
    now = T0 + 10
    for n, vm in enumerate(vms):
        fleet.beat(*SET, t=now)
        result = fleet.decide(now)
        assert [d.event_id for d in result.decisions if d.kind == "approve"] == [f"E{n}"]
        fleet.transition("started", f"E{n}", [vm], t=now + 10)
        fleet.transition("completed", f"E{n}", [vm], t=now + 70)
        now += 70 + MIN_HEALTHY
    fleet.beat(*SET, t=now)
    return fleet, now


def of(fleet, vm) -> list[tuple[str, float, float | None]]:
    found = spans(fleet.state, fleet.policy, index(fleet.state, fleet.policy))
    return [(s.kind, s.start - T0, None if s.end is None else s.end - T0) for s in found if s.vm == vm.key
            and s.event != "old"]


def test_each_affected_vm_has_its_scheduled_approved_started_and_min_healthy_spans_in_order():
    fleet, _ = rollout()
    assert of(fleet, SET[1]) == [("scheduled", 0, 10), ("approved", 10, 20), ("started", 20, 80),
                                 ("min_healthy", 80, 380)]
    assert of(fleet, SET[2]) == [("scheduled", 1, 380), ("approved", 380, 390), ("started", 390, 450),
                                 ("min_healthy", 450, 750)]
    assert of(fleet, SET[4]) == []  # no event affects it (it only saw them)


def test_the_budget_line_of_a_rollout_with_budget_one_never_goes_above_one():
    fleet, _ = rollout()
    line = down(spans(fleet.state, fleet.policy, index(fleet.state, fleet.policy)))
    assert [(t - T0, n) for t, n in line if t > T0] == [(10, 1), (1120, 0)]
    assert peak(line) == 1


def test_spans_still_going_on_have_no_end():
    fleet, now = rollout(1)
    fleet.announce("E9", [SET[5]], SET, t=now, not_before=now + 3000)
    fleet.decide(now + 1)
    fleet.transition("started", "E9", [SET[5]], t=now + 5)
    kinds = [(kind, end) for kind, _, end in of(fleet, SET[5])]
    assert kinds == [("scheduled", now + 1 - T0), ("approved", now + 5 - T0), ("started", None)]


def test_an_event_first_seen_started_has_no_scheduled_span():
    fleet = avset()
    fleet.transition("started", "H1", [SET[2]], t=T0 + 5)  # a hardware failure: no notice
    assert of(fleet, SET[2]) == [("started", 5, None)]


def test_an_event_canceled_before_it_started_ends_its_scheduled_span():
    fleet = avset()
    fleet.announce("C1", [SET[2]], SET, t=T0 + 5, event_type="Freeze")
    fleet.transition("canceled", "C1", [SET[2]], t=T0 + 50)
    assert of(fleet, SET[2]) == [("scheduled", 5, 50)]


def test_a_vm_that_completed_later_than_its_peers_is_down_until_its_own_completion():
    fleet = avset()
    fleet.announce("E1", [SET[1], SET[2]], SET, t=T0)
    fleet.transition("started", "E1", [SET[1], SET[2]], t=T0 + 10)
    fleet.fold(report("completed", SET[1], "E1", T0 + 40, resources=["web-1", "web-2"]),
               report("completed", SET[2], "E1", T0 + 90, resources=["web-1", "web-2"]))
    assert of(fleet, SET[1])[1:] == [("started", 10, 40), ("min_healthy", 40, 340)]
    assert of(fleet, SET[2])[1:] == [("started", 10, 90), ("min_healthy", 90, 390)]


def test_a_shadow_approval_is_not_an_approved_span_in_a_live_run():
    shadow = avset(Policy(shadow=True))
    shadow.announce("E1", [SET[1]], SET, t=T0)
    shadow.decide(T0 + 10)
    live = avset()
    live.state = shadow.state
    assert [k for k, _, _ in of(shadow, SET[1])] == ["scheduled", "approved"]
    assert of(live, SET[1]) == [("scheduled", 0, None)]


def test_a_vm_coming_back_as_the_next_goes_down_is_one_down_not_two():
    line = down([Span("a", "started", 0, 10, "e1"), Span("b", "started", 10, 20, "e2")])
    assert line == [(0, 1), (20, 0)]


def test_a_vm_in_two_spans_at_once_counts_once_and_scheduled_spans_do_not_count():
    line = down([Span("a", "started", 0, 10, "e1"), Span("a", "approved", 5, 30, "e2"),
                 Span("b", "scheduled", 0, 50, "e3")])
    assert line == [(0, 1), (30, 0)]


def test_the_page_document_puts_each_span_on_its_vm_row_with_the_group_budget_line():
    fleet, now = rollout(2)
    doc = page_view(fleet.state, fleet.policy, now)
    (group,) = doc["groups"]
    names = [vm[0] for vm in group["vms"]]
    kinds, events = doc["timeline"]["kinds"], doc["timeline"]["events"]
    started = sorted((names[row], start - T0, end - T0, events[e][0])
                     for row, k, start, end, e in group["spans"] if kinds[k] == "started")
    # OLD was due (Azure started it) at its NotBefore and completed an hour later, unreported Started
    assert started == [("web-0", -6000, -3600, "OLD"), ("web-1", 20, 80, "E0"), ("web-2", 390, 450, "E1")]
    assert group["peak"] == 1 and group["max"] == 1
    assert doc["timeline"]["minHealthy"] == MIN_HEALTHY
    assert doc["timeline"]["start"] == min(start for _, _, start, _, _ in group["spans"])


interval = st.tuples(st.sampled_from("abc"), st.sampled_from(["scheduled", "approved", "started",
                                                              "min_healthy"]),
                     st.integers(0, 20), st.one_of(st.none(), st.integers(1, 10)))


@settings(max_examples=200, deadline=None)
@given(st.lists(interval, max_size=12))
def test_the_budget_line_counts_at_every_moment_the_vms_in_a_down_span(items):
    made = [Span(vm, kind, start, None if length is None else start + length, "e")
            for vm, kind, start, length in items]
    line = down(made)
    for moment in [x / 2 for x in range(0, 70)]:
        expected = len({s.vm for s in made if s.kind != "scheduled" and s.start <= moment
                        and (s.end is None or moment < s.end)})
        level = max(((t, n) for t, n in line if t <= moment), default=(0, 0))[1]
        assert level == expected, (moment, line)
    assert all(a[1] != b[1] for a, b in zip(line, line[1:], strict=False))  # one point per change
