"""A slot frees on observed recovery (decide/recovery.py), and a failing probe counts its VM down
(decide/availability.py): the decision pass on folds fed by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import Policy, status
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.config.policy import Budget, load_policy
from se_forwarder.fleet.coordinator.fold.dispatch import Sender
from se_forwarder.fleet.coordinator.fold.retention import prune
from se_forwarder.fleet.coordinator.view.alerts import derive

from .fleet import SET, T0, Fleet, approvals, avset, heartbeat, report

RECOVERED = {"free_slot": "recovered", "min_healthy": 0.0, "recover_timeout": 600.0,
             "heartbeat_timeout": 3600.0}


def rebooted(policy: Policy, *, completed: float = T0 + 100) -> Fleet:
    """web-0's Reboot E1 completed at ``completed``; web-1 has E2 Scheduled, in the same group."""
    f = avset(policy)
    f.fold(recovered(SET[0], "OLD", T0 - 3500))
    f.announce("E1", [SET[0]], t=T0, not_before=T0 + 900)
    f.transition("started", "E1", [SET[0]], t=T0 + 10)
    f.transition("completed", "E1", [SET[0]], t=completed)
    f.announce("E2", [SET[1]], t=T0 + 20, not_before=T0 + 3000)
    return f


def recovered(vm, event_id: str, t: float) -> dict:
    return report("recovered", vm, event_id, t, extra={"CompletedUtc": None, "RecoverHook": "not-run"})


def beat(f: Fleet, vm, t: float, verdict: str | None, reason: str = "HTTP 503") -> None:
    event = heartbeat(vm, t)
    event["data"]["Health"] = None if verdict is None else {
        "Verdict": verdict, "Probe": "web" if verdict == "unhealthy" else None,
        "Reason": reason if verdict == "unhealthy" else None, "Probes": 1}
    f.fold(event)


def test_by_default_the_clock_frees_the_slot_min_healthy_after_the_event_ended():
    f = rebooted(Policy(min_healthy=60.0))
    assert f.decide(T0 + 150).unavailable[SET[0].key] == "completed"
    assert approvals(f.decide(T0 + 161)) == ["E2"]


def test_with_recovered_the_vm_stays_down_after_min_healthy_until_its_agent_reports_recovered():
    f = rebooted(Policy(**RECOVERED))
    result = f.decide(T0 + 150)
    assert result.unavailable[SET[0].key] == "recovering"
    assert approvals(result) == []
    assert f.verdict(result, "E2").code == "budget"
    f.fold(recovered(SET[0], "E1", T0 + 170))
    assert approvals(f.decide(T0 + 171)) == ["E2"]


def test_min_healthy_still_applies_after_an_early_recovered():
    f = rebooted(Policy(**{**RECOVERED, "min_healthy": 300.0}))
    f.fold(recovered(SET[0], "E1", T0 + 110))
    assert f.decide(T0 + 200).unavailable[SET[0].key] == "completed"
    assert approvals(f.decide(T0 + 401)) == ["E2"]


def test_a_peers_recovered_does_not_free_another_vm():
    f = rebooted(Policy(**RECOVERED))
    f.fold(recovered(SET[1], "E1", T0 + 170))  # web-1 says "recovered" of web-0's event
    assert f.decide(T0 + 180).unavailable[SET[0].key] == "recovering"


def test_an_unverified_recovered_frees_nothing():
    f = rebooted(Policy(**RECOVERED))
    fold_event(f.state, recovered(SET[0], "E1", T0 + 170), sender=Sender(SET[0].key, verified=False))
    assert f.decide(T0 + 180).unavailable[SET[0].key] == "recovering"


def test_past_recover_timeout_the_vm_stays_down_and_an_alert_opens_until_it_recovers():
    f = rebooted(Policy(**RECOVERED))
    result = f.decide(T0 + 100 + 601)
    assert result.unavailable[SET[0].key] == "not-recovered"
    assert approvals(result) == []
    assert [(o.vm, o.event_id) for o in result.overdue] == [(SET[0].key, "E1")]
    alert = derive(f.state, result).open["recovery-timeout"]
    assert "web-0 (E1)" in alert.summary and alert.severity == "error"
    shown = status(f.state, f.policy, T0 + 701, result)
    assert [a["kind"] for a in shown["alerts"]] == ["recovery-timeout"]
    assert shown["health"][0]["reason"] == "not-recovered" and shown["health"][0]["eventId"] == "E1"
    f.fold(recovered(SET[0], "E1", T0 + 800))
    later = f.decide(T0 + 801)
    assert approvals(later) == ["E2"]
    assert "recovery-timeout" in derive(f.state, later).resolved


def test_retention_keeps_an_event_a_vm_has_not_recovered_from():
    f = rebooted(Policy(**RECOVERED, forget_after=7 * 86400))
    later = T0 + 3 * 86400
    prune(f.state, f.policy, later)
    assert "e1" in f.state.events
    assert f.decide(later).unavailable.get(SET[0].key) == "not-recovered"
    f.fold(recovered(SET[0], "E1", later + 1))
    prune(f.state, f.policy, later + 2)
    assert "e1" not in f.state.events


def test_a_failing_probe_counts_its_vm_down_in_every_budget_with_no_event():
    f = avset(Policy())
    beat(f, SET[0], T0 + 5, "unhealthy")
    f.announce("E2", [SET[1]], t=T0 + 20, not_before=T0 + 3000)
    result = f.decide(T0 + 30)
    assert result.unavailable[SET[0].key] == "unhealthy"
    assert approvals(result) == []
    shown = status(f.state, f.policy, T0 + 30, result)
    assert shown["health"] == [{"name": "web-0", "vmId": SET[0].vm_id, "reason": "unhealthy",
                                "detail": "probe failing: web: HTTP 503", "eventId": None, "sinceUtc": None}]
    beat(f, SET[0], T0 + 40, "healthy")
    assert approvals(f.decide(T0 + 41)) == ["E2"]


@pytest.mark.parametrize("verdict", ["healthy", "unknown", None])
def test_only_an_unhealthy_verdict_counts_a_vm_down(verdict):
    f = avset(Policy())
    beat(f, SET[0], T0 + 5, verdict)
    assert SET[0].key not in f.decide(T0 + 6).unavailable


@pytest.mark.parametrize(("table", "line"), [
    ({"free_slot": "soon"}, "policy.free_slot: 'soon' is not one of min_healthy, recovered"),
    ({"recover_timeout": "forever"},
     "policy.recover_timeout: 'forever' is not a duration like 30s, 10m or 2h"),
    ({"recover_timeout": 0}, "policy.recover_timeout: 0 is out of range (1s..1d)"),
])
def test_bad_recovery_settings_get_one_line(table, line):
    with pytest.raises(ConfigError) as caught:
        load_policy({"policy": table})
    assert str(caught.value) == line


def test_recovery_settings_are_read():
    policy = load_policy({"policy": {"free_slot": "recovered", "recover_timeout": "15m"}})
    assert (policy.free_slot, policy.recover_timeout) == ("recovered", 900.0)
    assert load_policy({}).free_slot == "min_healthy"


def test_the_timeline_shows_the_wait_for_recovery_and_counts_it_down():
    from se_forwarder.fleet.coordinator.decide import index
    from se_forwarder.fleet.coordinator.view.timeline import down, spans

    f = rebooted(Policy(**{**RECOVERED, "min_healthy": 30.0}))
    f.fold(recovered(SET[0], "E1", T0 + 170))
    found = [(s.kind, s.start, s.end) for s in spans(f.state, f.policy, index(f.state, f.policy))
             if s.event == "e1" and s.vm == SET[0].key]
    assert ("min_healthy", T0 + 100, T0 + 130) in found
    assert ("recovering", T0 + 130, T0 + 170) in found
    line = down(s for s in spans(f.state, f.policy, index(f.state, f.policy)) if s.vm == SET[0].key)
    assert line[-1] == (T0 + 170, 0)


# -- free_slot per budget ------------------------------------------------------------------------------

def per_budget(*budgets: Budget, **policy: object) -> Policy:
    return Policy(**{**RECOVERED, "free_slot": "min_healthy", **policy, "budgets": budgets})  # type: ignore[arg-type]


def test_a_budget_with_recovered_holds_its_slot_until_recovered_when_the_policy_frees_on_the_clock():
    f = rebooted(per_budget(Budget("group", count=1, free_slot="recovered")))
    result = f.decide(T0 + 150)
    assert result.unavailable[SET[0].key] == "recovering" and approvals(result) == []
    assert f.verdict(result, "E2").code == "budget"
    f.fold(recovered(SET[0], "E1", T0 + 170))
    assert approvals(f.decide(T0 + 171)) == ["E2"]


def test_a_budget_with_min_healthy_frees_on_the_clock_while_the_vm_still_counts_down_elsewhere():
    f = rebooted(per_budget(Budget("group", count=1, free_slot="min_healthy"), Budget("fleet", count=2),
                            free_slot="recovered"))
    result = f.decide(T0 + 150, apply=False)
    assert result.unavailable[SET[0].key] == "recovering"  # still waited for, and shown so
    assert {result.index.kind_of[s]: n for s, n in result.used.items() if n} == {"fleet": 1}
    assert approvals(result) == ["E2"]  # the group's slot is free; the fleet has room for a second


def test_with_every_budget_on_min_healthy_nothing_waits_for_recovery():
    f = rebooted(per_budget(Budget("group", count=1, free_slot="min_healthy"), free_slot="recovered"))
    result = f.decide(T0 + 150)
    assert SET[0].key not in result.unavailable and approvals(result) == ["E2"]


def test_a_recovering_vm_counts_only_in_the_budgets_that_wait_for_its_recovery():
    f = rebooted(per_budget(Budget("group", count=1), Budget("fleet", count=1, free_slot="recovered")))
    result = f.decide(T0 + 150)
    assert approvals(result) == []
    assert f.verdict(result, "E2").code == "budget" and "fleet" in f.verdict(result, "E2").reason


def test_a_vm_in_no_scope_of_a_budget_that_waits_is_not_held_for_its_recovery():
    from se_forwarder.fleet.coordinator.decide import index
    from se_forwarder.fleet.coordinator.view.timeline import spans

    f = rebooted(per_budget(Budget("group", count=1), Budget("zone", count=1, free_slot="recovered")))
    result = f.decide(T0 + 150, apply=False)  # the availability set's VMs have no zone
    assert SET[0].key not in result.unavailable and approvals(result) == ["E2"]
    assert not [s for s in spans(f.state, f.policy, index(f.state, f.policy)) if s.kind == "recovering"]
    assert not result.overdue and not f.decide(T0 + 100 + 601, apply=False).overdue


def test_an_approval_for_a_recovering_vm_counts_it_in_every_scope_again():
    f = rebooted(per_budget(Budget("group", count=1)))  # the group frees web-0 on the clock
    f.announce("E3", [SET[0]], t=T0 + 120, not_before=T0 + 2000)  # web-0's next event, due first
    result = f.decide(T0 + 150, apply=False)
    assert approvals(result) == ["E3"]
    assert f.verdict(result, "E2").code == "budget"  # web-0 is taken again: no room for web-1


@pytest.mark.parametrize(("group_frees", "last_step"),
                         [("recovered", (T0 + 170, 0)), ("min_healthy", (T0 + 130, 0))])
def test_the_pages_group_line_counts_the_wait_for_recovery_only_when_the_groups_budget_waits(group_frees,
                                                                                           last_step):
    from se_forwarder.fleet.coordinator.view.page import page_view

    f = rebooted(per_budget(Budget("group", count=1, free_slot=group_frees), Budget("fleet", count=5),
                            free_slot="recovered", min_healthy=30.0))
    f.fold(recovered(SET[0], "E1", T0 + 170))
    [group] = [g for g in page_view(f.state, f.policy, T0 + 200)["groups"] if g["peak"]]
    assert tuple(group["down"][-1]) == last_step


@settings(max_examples=60, deadline=None)
@given(completed=st.floats(100, 200), recovered_after=st.one_of(st.none(), st.floats(0, 300)),
       at=st.floats(100, 600), min_healthy=st.sampled_from([0.0, 60.0]), fleet_max=st.integers(1, 3),
       second=st.booleans())
def test_every_budget_recovered_decides_as_a_fleet_wide_recovered(completed, recovered_after, at, min_healthy,
                                                                  fleet_max, second):
    budgets = (Budget("group", count=1), Budget("fleet", count=fleet_max))
    fleet_wide = Policy(**{**RECOVERED, "min_healthy": min_healthy, "budgets": budgets})  # type: ignore[arg-type]
    each = per_budget(*(replace(b, free_slot="recovered") for b in budgets), min_healthy=min_healthy)
    results = []
    for policy in (fleet_wide, each):
        f = rebooted(policy, completed=T0 + completed)
        if second:
            f.announce("E3", [SET[0]], t=T0 + 30, not_before=T0 + 2000)
        if recovered_after is not None:
            f.fold(recovered(SET[0], "E1", T0 + completed + recovered_after))
        r = f.decide(T0 + max(at, completed), apply=False)
        results.append((r.unavailable, dict(r.used), [(d.kind, d.event_id, d.reason) for d in r.decisions]))
    assert results[0] == results[1]


def test_a_budgets_free_slot_is_read_and_a_bad_one_is_one_line():
    policy = load_policy({"budgets": [{"scope": "group", "max_unavailable": 1, "free_slot": "recovered"},
                                      {"scope": "zone", "max_unavailable": 1}]})
    assert policy.free_slot_of("group") == "recovered" and policy.free_slot_of("zone") == "min_healthy"
    assert policy.waits_for_recovery and policy.on_clock == {"zone"}
    with pytest.raises(ConfigError) as caught:
        load_policy({"budgets": [{"scope": "group", "max_unavailable": 1, "free_slot": "later"}]})
    assert str(caught.value) == "budgets[0].free_slot: 'later' is not one of min_healthy, recovered"
