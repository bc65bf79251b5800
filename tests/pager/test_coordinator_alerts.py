"""The coordinator's alerts (view/alerts.py) to PagerDuty and Opsgenie (output/pager.py, output/alerting.py),
against the local stand-ins of tests/support/pager_receiver.py, which check every request against
the services' documented schemas (neither service can run here): triggered when an alert opens,
resolved when it clears, keyed on the alert id, retried through an outage and a 429 with its
Retry-After, and sent again in its current state after a start."""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator.azure import Reach
from se_forwarder.fleet.coordinator.config import load_notify
from se_forwarder.fleet.coordinator.config.notify import pager_key
from se_forwarder.fleet.coordinator.output import alerting as alerting_module
from se_forwarder.fleet.coordinator.output.alert_book import AlertBook
from se_forwarder.fleet.coordinator.output.alerting import Alerting
from se_forwarder.fleet.coordinator.output.pager import PagerHook
from se_forwarder.fleet.coordinator.view.alerts import Alert, Derived, derive
from tests.coordinator.fleet import SET, T0, avset
from tests.support.receiver import Reply
from tests.support.waiting import wait_for

from .conftest import API_KEY, ROUTING_KEY

BREACH = Alert("breach/E1", "breach", "Reboot E1 breaches the budget", "error", {"EventId": "E1"})
SERVICES = ["pagerduty", "opsgenie"]


def hook(kind: str, receiver: Any, **more: Any) -> PagerHook:
    table = {"format": kind, **more}
    if kind == "pagerduty":
        table.update(url=receiver.url, routing_key_env="PD_ROUTING_KEY")
    else:
        table.update(url=receiver.base_url, api_key_env="OG_API_KEY")
    [settings] = load_notify([table])
    return PagerHook(settings, pager_key(settings), "prod").start()


def opened(*alerts: Alert, resolved: tuple[str, ...] = ()) -> Derived:
    return Derived({a.id: a for a in alerts}, frozenset(resolved))


@pytest.mark.parametrize("kind", SERVICES)
def test_an_alert_is_triggered_when_it_opens_and_resolved_when_it_clears(kind, request, keys):
    receiver = request.getfixturevalue(kind)
    pager = hook(kind, receiver)
    try:
        pager.offer(opened(BREACH))
        pager.offer(opened(BREACH))  # the same state again: nothing more
        wait_for(lambda: receiver.alerts.opened, 10, "the trigger")
        pager.offer(opened(resolved=("breach/E1",)))
        wait_for(lambda: receiver.alerts.closed, 10, "the resolve")
    finally:
        pager.close()
    key = "se-forwarder/prod/breach/E1"
    assert receiver.errors == []
    alerts = receiver.alerts
    assert (alerts.opened, alerts.closed, alerts.open) == ({key: 1}, {key: 1}, set())
    assert len(receiver.bodies()) == 2


def test_a_pagerduty_trigger_carries_the_alerts_words_severity_and_details(pagerduty, keys):
    pager = hook("pagerduty", pagerduty)
    try:
        pager.offer(opened(BREACH))
        wait_for(lambda: pagerduty.bodies(), 10, "the trigger")
    finally:
        pager.close()
    [body] = pagerduty.bodies()
    assert body["dedup_key"] == "se-forwarder/prod/breach/E1" and body["routing_key"] == ROUTING_KEY
    payload = body["payload"]
    assert (payload["summary"], payload["severity"], payload["component"], payload["group"]) == (
        "Reboot E1 breaches the budget", "error", "breach", "prod")
    assert payload["custom_details"] == {"EventId": "E1", "Alert": "breach/E1"}


def test_an_opsgenie_alert_takes_its_priority_from_the_severity_and_the_configured_tags(opsgenie, keys):
    pager = hook("opsgenie", opsgenie, tags=["team-infra"])
    try:
        pager.offer(opened(BREACH))
        wait_for(lambda: opsgenie.bodies(), 10, "the create")
    finally:
        pager.close()
    [(path, body)] = opsgenie.bodies()
    assert path == "/v2/alerts" and body["alias"] == "se-forwarder/prod/breach/E1"
    assert (body["priority"], body["tags"]) == ("P2", ["se-forwarder-coordinator", "breach", "team-infra"])


def test_an_outage_and_a_429_are_waited_out_and_nothing_is_lost(pagerduty, keys):
    pagerduty.script(503, 503, Reply(429, {"Retry-After": "2"}, b'{"status":"throttle event"}'))
    pager = hook("pagerduty", pagerduty)
    began = time.monotonic()
    try:
        pager.offer(opened(BREACH))
        pager.offer(opened(resolved=("breach/E1",)))  # cleared before anything got through
        wait_for(lambda: pagerduty.alerts.closed, 30, "the trigger and its resolve")
    finally:
        pager.close()
    assert time.monotonic() - began >= 2  # the 429's Retry-After
    assert [b["event_action"] for b in pagerduty.bodies()] == ["trigger", "resolve"]
    assert pager.failures == 3 and pager.waiting() == 0


def test_a_change_undone_before_it_was_sent_is_not_sent(pagerduty, keys):
    pager = hook("pagerduty", pagerduty)
    try:
        pager.offer(opened(BREACH))
        wait_for(lambda: pagerduty.alerts.opened, 10, "the trigger")
        pagerduty.script(503, 503)
        pager.offer(opened(resolved=("breach/E1",)))
        pager.offer(opened(BREACH))  # open again before the resolve went out
        time.sleep(4)
    finally:
        pager.close()
    assert [b["event_action"] for b in pagerduty.bodies()] == ["trigger"]


def test_only_the_kinds_a_pager_takes_are_sent(pagerduty, keys):
    pager = hook("pagerduty", pagerduty, alerts=["fold-stalled"])
    try:
        pager.offer(opened(BREACH, Alert("fold-stalled", "fold-stalled", "stuck", "critical")))
        wait_for(lambda: pagerduty.alerts.opened, 10, "the trigger")
        time.sleep(0.5)
    finally:
        pager.close()
    assert set(pagerduty.alerts.opened) == {"se-forwarder/prod/fold-stalled"}


def test_breaches_of_the_fold_are_open_while_their_event_is_and_resolved_after():
    fleet = avset()
    fleet.announce("E1", SET[:2], t=T0 + 1)
    result = fleet.decide(T0 + 2)
    found = derive(fleet.state, result)
    assert list(found.open) == ["breach/E1"] and found.open["breach/E1"].severity == "error"
    assert found.open["breach/E1"].summary.startswith("Reboot E1 breaches the budget: at NotBefore")
    fleet.transition("completed", "E1", SET[:2], t=T0 + 3)
    ended = derive(fleet.state, fleet.decide(T0 + 4))
    assert ended == Derived({}, frozenset({"breach/E1", "acknowledge-refused", "name-conflict",
                                           "key-conflict", "recovery-timeout"}))


def test_an_alert_of_an_unknown_kind_or_severity_cannot_be_raised():
    with pytest.raises(ValueError, match="alert kind 'oops'"):
        Alert("oops", "oops", "x")
    with pytest.raises(ValueError, match="alert severity 'page'"):
        Alert("fold-stalled", "fold-stalled", "x", "page")


class Loop:
    """The service's thread for Alerting: answers at once, or not at all while ``stuck``."""

    def __init__(self) -> None:
        self.stuck = False

    def submit(self, func: Any) -> Future[Any]:
        future: Future[Any] = Future()
        if not self.stuck:
            future.set_result(func())
        return future


def test_a_raised_alert_pages_with_one_call_and_clears_with_another(pagerduty, keys, monkeypatch):
    book, loop = AlertBook(), Loop()
    alerts = Alerting([hook("pagerduty", pagerduty)], loop.submit, lambda: Derived({}, frozenset()),
                      lambda: True, book, {})
    try:
        book.raise_(Alert("gate-closed/web", "gate-closed", "gate web closed for 2 h"))
        alerts.look()
        wait_for(lambda: "se-forwarder/prod/gate-closed/web" in pagerduty.alerts.opened, 10, "the trigger")
        book.clear("gate-closed/web")
        alerts.look()
        wait_for(lambda: pagerduty.alerts.closed.get("se-forwarder/prod/gate-closed/web"), 10, "the resolve")
    finally:
        alerts.stop()


def test_a_stuck_loop_a_hub_unread_for_long_and_an_all_refused_feed_page(pagerduty, keys, monkeypatch):
    monkeypatch.setattr(alerting_module, "STALLED_AFTER", 0.5)
    loop = Loop()
    reach = {"hub-read": Reach("hub-read"), "feed-events": Reach("feed-events")}
    alerts = Alerting([hook("pagerduty", pagerduty)], loop.submit, lambda: Derived({}, frozenset()),
                      lambda: True, AlertBook(), reach)
    try:
        loop.stuck = True
        alerts.look()
        time.sleep(0.6)
        state = alerts.look()
        assert state is not None and "fold-stalled" in state.open
        reach["feed-events"].failed("every feed event of the last 10 min was refused (type 3)")
        state = alerts.look()
        assert state is not None and state.open["feed-refused"].summary.startswith("the Azure feed's events")
        wait_for(lambda: len(pagerduty.alerts.opened) == 2, 10, "both triggers")
        loop.stuck = False
        alerts._asked = None  # the stuck look is given up; the loop answers the next one
        reach["feed-events"].succeeded()
        state = alerts.look()
        assert state is not None and state.open == {}
        wait_for(lambda: len(pagerduty.alerts.closed) == 2, 10, "both resolves")
    finally:
        alerts.stop()
    assert pagerduty.errors == []


def test_after_a_start_every_fixed_alert_is_resolved_once_closing_what_a_crash_left_open(pagerduty, keys):
    loop = Loop()
    alerts = Alerting([hook("pagerduty", pagerduty)], loop.submit, lambda: Derived({}, frozenset()),
                      lambda: True, AlertBook(), {})
    try:
        alerts.look()
        alerts.look()
        wait_for(lambda: len(pagerduty.bodies()) >= 7, 10, "the resolves")
        time.sleep(0.5)
    finally:
        alerts.stop()
    assert sorted(b["dedup_key"] for b in pagerduty.bodies()) == [
        "se-forwarder/prod/acknowledge-refused", "se-forwarder/prod/feed-refused",
        "se-forwarder/prod/fold-gap", "se-forwarder/prod/fold-late", "se-forwarder/prod/fold-stalled",
        "se-forwarder/prod/key-conflict", "se-forwarder/prod/name-conflict",
        "se-forwarder/prod/recovery-timeout"]
    assert {b["event_action"] for b in pagerduty.bodies()} == {"resolve"}


def test_a_standby_sends_nothing(pagerduty, keys):
    alerts = Alerting([hook("pagerduty", pagerduty)], Loop().submit, lambda: Derived({}, frozenset()),
                      lambda: False, AlertBook(), {})
    try:
        assert alerts.look() is None
        time.sleep(0.3)
    finally:
        alerts.stop()
    assert pagerduty.bodies() == []


def test_an_instance_holding_the_lease_with_a_gap_sends_its_fold_gap_alert_and_nothing_else(pagerduty, keys):
    book = AlertBook()
    book.raise_(Alert("fold-gap", "fold-gap", "this instance does not act: partition 0 ...", "critical"))
    book.raise_(Alert("gate-closed/web", "gate-closed", "gate web closed for 2 h"))
    alerts = Alerting([hook("pagerduty", pagerduty)], Loop().submit, lambda: opened(BREACH),
                      lambda: False, book, {}, blocked=lambda: True)
    try:
        state = alerts.look()
        assert state is not None and list(state.open) == ["fold-gap"]
        wait_for(lambda: pagerduty.bodies(), 10, "the trigger")
        time.sleep(0.3)
    finally:
        alerts.stop()
    assert [(b["dedup_key"], b["event_action"]) for b in pagerduty.bodies()] == [
        ("se-forwarder/prod/fold-gap", "trigger")]


@pytest.mark.parametrize(("table", "message"), [
    ({"format": "pagerduty", "routing_key": ROUTING_KEY},
     "notify[0].routing_key: a secret never goes in this file; give routing_key_env"),
    ({"format": "pagerduty"}, "notify[0]: give exactly one of routing_key_env or routing_key_file"),
    ({"format": "pagerduty", "routing_key_env": "PD", "url_env": "X"},
     "notify[0].url_env: only for chat formats (teams, slack)"),
    ({"format": "pagerduty", "routing_key_env": "PD", "alerts": ["breach", "outage"]},
     "notify[0].alerts[1]"),
    ({"format": "pagerduty", "routing_key_env": "PD", "alerts": []}, "notify[0].alerts: empty"),
    ({"format": "pagerduty", "routing_key_env": "PD", "url": "http://pager.example.com/v2/enqueue"},
     "notify[0].url: http://pager.example.com/v2/enqueue must be https"),
    ({"format": "opsgenie", "api_key_env": "OG", "region": "apac"}, "notify[0].region"),
    ({"format": "opsgenie", "api_key_env": "OG", "region": "eu", "url": "https://x.example.com"},
     "notify[0]: give region or url, not both"),
    ({"format": "opsgenie", "api_key_env": "OG", "tags": ["two words"]}, "notify[0].tags"),
    ({"format": "opsgenie", "api_key_file": "/k", "severity": {}}, "notify[0]"),
    ({"format": "pager"}, "notify[0].format"),
])
def test_each_bad_pager_setting_is_one_line_naming_it(table, message):
    with pytest.raises(ConfigError) as info:
        load_notify([table])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_key_of_the_wrong_shape_is_refused_without_showing_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PD", "not-a-routing-key")
    [settings] = load_notify([{"format": "pagerduty", "routing_key_env": "PD"}])
    with pytest.raises(ConfigError) as info:
        pager_key(settings)
    assert "not 32 letters and digits" in str(info.value) and "not-a-routing-key" not in str(info.value)
    key_file = tmp_path / "og.key"
    key_file.write_text(f"# the Opsgenie API key\n{API_KEY}\n")
    [settings] = load_notify([{"format": "opsgenie", "api_key_file": str(key_file)}])
    assert pager_key(settings) == API_KEY


def test_check_reads_each_pagers_key_and_reaches_it(pagerduty, opsgenie, keys):
    from se_forwarder.fleet.coordinator.check.notify import notify

    tables = load_notify([{"format": "pagerduty", "routing_key_env": "PD_ROUTING_KEY", "url": pagerduty.url},
                          {"format": "opsgenie", "api_key_env": "OG_API_KEY", "url": opsgenie.base_url}])
    ok, text = notify(tables)
    assert ok is True and text.count(" answers (alerts: breach,") == 2
    assert pagerduty.bodies() == [] and opsgenie.bodies() == []  # nobody paged


def test_check_names_an_opsgenie_key_it_refuses(opsgenie, monkeypatch):
    from se_forwarder.fleet.coordinator.check.notify import notify

    monkeypatch.setenv("OG_API_KEY", "a-key-opsgenie-does-not-know")
    tables = load_notify([{"format": "opsgenie", "api_key_env": "OG_API_KEY", "url": opsgenie.base_url}])
    ok, text = notify(tables)
    assert ok is False and "Opsgenie refuses the API key" in text and "does-not-know" not in text
