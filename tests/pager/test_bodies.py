"""The alert bodies as pure functions, checked against the services' documented schemas
(tests/support/pager_receiver.py holds the same checks the stand-ins apply to every request)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.notify import opsgenie, pagerduty
from se_forwarder.notify.pager import page_of
from tests.notify.events import NOW, agent_event, decision, heartbeat, vm
from tests.support.pager_receiver import opsgenie_problems, pagerduty_problems

from .conftest import ROUTING_KEY

EVENT_ID = "6b0c1f52-aaaa-4bbb-8ccc-000000000001"


@pytest.mark.parametrize(("state", "action"), [("scheduled", "trigger"), ("started", "trigger"),
                                               ("completed", "resolve"), ("canceled", "resolve")])
def test_each_transition_opens_or_closes_the_alert_keyed_on_its_event_id(state, action) -> None:
    page = page_of(agent_event(state), NOW)

    assert page is not None
    assert (page.action, page.key, page.state) == (action, EVENT_ID, state)


@pytest.mark.parametrize("event", [agent_event("approved", ApprovedBy="cli"), agent_event("prepared"),
                                   heartbeat(), decision("approve"), {"type": "x"}, "not an object"],
                         ids=["approved", "prepared", "heartbeat", "decision", "other type", "not a dict"])
def test_nothing_else_pages(event) -> None:
    assert page_of(event, NOW) is None


def test_the_summary_and_details_say_who_what_and_when() -> None:
    page = page_of(agent_event("scheduled", machine=vm("web-7", zone="3")), NOW)

    assert page is not None
    assert page.summary.startswith("web-7 (FD 1, zone 3): Reboot scheduled for ")
    assert page.source == "web-7"
    assert page.details["Event"] == EVENT_ID
    assert page.details["State"] == "scheduled"
    assert page.details["CloudEvent"] == f"{EVENT_ID}/scheduled"


def test_a_pagerduty_trigger_and_resolve_follow_the_events_api_v2_schema() -> None:
    trigger = pagerduty.event(page_of(agent_event("scheduled"), NOW), ROUTING_KEY, "warning")
    resolve = pagerduty.event(page_of(agent_event("completed"), NOW), ROUTING_KEY, "warning")

    assert pagerduty_problems(trigger) == []
    assert pagerduty_problems(resolve) == []
    assert trigger["event_action"] == "trigger" and resolve["event_action"] == "resolve"
    assert trigger["dedup_key"] == resolve["dedup_key"] == EVENT_ID
    assert trigger["payload"]["severity"] == "warning"
    assert trigger["payload"]["class"] == "Reboot"
    assert resolve == {"routing_key": ROUTING_KEY, "event_action": "resolve", "dedup_key": EVENT_ID}


def test_a_summary_longer_than_1024_characters_is_cut_with_an_ellipsis() -> None:
    body = pagerduty.trigger(ROUTING_KEY, "alert-1", "x" * 5000, "coordinator", "error")

    assert len(body["payload"]["summary"]) == 1024
    assert body["payload"]["summary"].endswith("…")


def test_a_key_too_long_for_the_service_becomes_the_same_digest_for_trigger_and_resolve() -> None:
    long_id = "breach/" + "g" * 600

    trigger = pagerduty.trigger(ROUTING_KEY, long_id, "s", "coordinator", "critical")
    resolve = pagerduty.resolve(ROUTING_KEY, long_id)
    create = opsgenie.create(long_id, "m")

    assert trigger["dedup_key"] == resolve["dedup_key"] and len(trigger["dedup_key"]) <= 255
    assert create["alias"] == opsgenie.alias(long_id) and len(create["alias"]) <= 512
    assert opsgenie.close_path(long_id) == f"/v2/alerts/{create['alias']}/close?identifierType=alias"


def test_a_coordinator_alert_uses_the_builders_with_its_own_id() -> None:
    body = pagerduty.trigger(ROUTING_KEY, "prod/breach/zone-2", "Breach ahead: zone 2", "coordinator prod",
                             "critical", custom_details={"Scope": "zone 2"})

    assert pagerduty_problems(body) == []
    assert body["dedup_key"] == "prod/breach/zone-2"


def test_an_unknown_severity_or_priority_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="severity 'high'"):
        pagerduty.trigger(ROUTING_KEY, "k", "s", "src", "high")
    with pytest.raises(ValueError, match="priority 'P0'"):
        opsgenie.create("k", "m", priority="P0")


def test_an_opsgenie_create_and_close_follow_the_alert_api_schema() -> None:
    path, create = opsgenie.request(page_of(agent_event("started"), NOW), "P2")
    close_path, close = opsgenie.request(page_of(agent_event("canceled"), NOW), "P2")

    assert path == "/v2/alerts" and opsgenie_problems(create, closing=False) == []
    assert close_path == f"/v2/alerts/{EVENT_ID}/close?identifierType=alias"
    assert opsgenie_problems(close, closing=True) == []
    assert create["alias"] == EVENT_ID and create["priority"] == "P2" and create["entity"] == "web-3"
    assert create["tags"] == ["azure-scheduled-events", "Reboot", "Platform"]
    assert all(isinstance(v, str) for v in create["details"].values())


def test_an_alias_with_a_slash_is_quoted_in_the_close_path() -> None:
    assert opsgenie.close_path("a/b c") == "/v2/alerts/a%2Fb%20c/close?identifierType=alias"


def test_opsgenie_limits_cut_message_tags_and_details() -> None:
    body = opsgenie.create("k", "m" * 500, tags=[f"t{i}" for i in range(40)] + ["x" * 80],
                           details={f"key{i}": "v" * 500 for i in range(40)})

    assert len(body["message"]) == 130
    assert len(body["tags"]) == 20
    assert opsgenie_problems(body, closing=False) == []


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(event_id=texts.filter(str.strip), name=texts, description=texts, event_type=texts, source=texts,
       offset=st.integers(-10_000, 10_000_000))
def test_any_event_the_agent_reports_makes_bodies_both_services_accept(event_id, name, description,
                                                                        event_type, source, offset) -> None:
    for state in ("scheduled", "started", "completed", "canceled"):
        event = agent_event(state, event_id, event_type=event_type, machine=vm(name),
                            not_before=NOW + timedelta(seconds=offset), Description=description,
                            EventSource=source)
        page = page_of(event, NOW)
        if page is None:  # an EventId of control characters only: no key to page with
            continue
        assert pagerduty_problems(pagerduty.event(page, ROUTING_KEY, "info")) == []
        path, body = opsgenie.request(page, "P5")
        assert opsgenie_problems(body, closing=page.action == "resolve") == []
        assert path.startswith("/v2/alerts")
