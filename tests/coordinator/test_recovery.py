"""A slot frees on observed recovery (decide/recovery.py), and a failing probe counts its VM down
(decide/availability.py): the decision pass on folds fed by hand."""

from __future__ import annotations

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import Policy, status
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.config.policy import load_policy
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
