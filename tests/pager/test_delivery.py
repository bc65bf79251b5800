"""The pagerduty and opsgenie sinks through the real delivery worker and outbox, against local
stand-ins for PagerDuty's Events API v2 and Opsgenie's Alert API that check every request against
the documented schema and answer as the services do (202; 400 or 422 for an invalid request, 401
for a wrong key, 429, 5xx). Retries, Retry-After, dead letters, parking and the cursor are the
worker's, exactly as for every sink."""

from __future__ import annotations

import json
import logging

import pytest

from se_forwarder.outbox import Outbox
from se_forwarder.sinks.base import DeadLetter, Delivered, Park, Retry
from tests.notify.events import agent_event, heartbeat, store, vm
from tests.support.pager_receiver import PagerDutyReceiver
from tests.support.receiver import Reply, make_tls
from tests.support.sinks import backlog, run_worker

from .conftest import API_KEY, ROUTING_KEY, pager_sink

OTHER = "7c1d2e63-bbbb-4ccc-8ddd-000000000002"
SERVICES = ["pagerduty", "opsgenie"]


def receiver_of(kind, request):
    return request.getfixturevalue(kind)


def sink_of(kind, request, **options):
    return request.getfixturevalue("pd_sink" if kind == "pagerduty" else "og_sink")(**options)


def drained(box: Outbox) -> bool:
    return backlog(box, "pager") == 0


def pending(state_dir) -> list:
    with Outbox(state_dir) as box:
        return box.pending("pager", 10)


@pytest.mark.parametrize("kind", SERVICES)
def test_scheduled_triggers_and_completed_resolves_one_alert_per_event_id(kind, request, state_dir) -> None:
    receiver = receiver_of(kind, request)
    store(state_dir, [agent_event("scheduled"), agent_event("started"), agent_event("completed"),
                      agent_event("scheduled", OTHER), agent_event("canceled", OTHER)], sink="pager")

    assert run_worker(sink_of(kind, request), state_dir, drained, 20)

    assert receiver.errors == []
    alerts = receiver.alerts
    assert alerts.opened == {agent_event("x")["subject"]: 1, OTHER: 1}
    assert alerts.closed == alerts.opened and alerts.open == set() and alerts.unmatched == []
    assert alerts.folded == {agent_event("x")["subject"]: 1}  # started: added to the open alert


def test_a_hardware_failure_that_arrives_started_opens_the_alert_itself(pagerduty, pd_sink,
                                                                       state_dir) -> None:
    store(state_dir, [agent_event("started", status="Started", not_before=None),
                      agent_event("completed", status="Started", not_before=None)], sink="pager")

    assert run_worker(pd_sink(), state_dir, drained, 20)

    [trigger, resolve] = pagerduty.bodies()
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert trigger["payload"]["summary"] == "web-3 (FD 1, zone 2): Reboot started"
    assert pagerduty.alerts.closed == pagerduty.alerts.opened


def test_severity_follows_the_event_type_and_the_configured_table(pagerduty, pd_sink, state_dir) -> None:
    store(state_dir, [agent_event("scheduled", event_type="Freeze"),
                      agent_event("scheduled", OTHER, event_type="Preempt")], sink="pager")

    assert run_worker(pd_sink(severity={"Freeze": "error"}), state_dir, drained, 20)

    assert [b["payload"]["severity"] for b in pagerduty.bodies()] == ["error", "critical"]


def test_priority_follows_the_event_type_and_configured_tags_are_added(opsgenie, og_sink, state_dir) -> None:
    store(state_dir, [agent_event("scheduled", event_type="Redeploy")], sink="pager")

    assert run_worker(og_sink(priority={"Redeploy": "P1"}, tags=["team-infra"]), state_dir, drained, 20)

    [(path, body)] = opsgenie.bodies()
    assert path == "/v2/alerts"
    assert body["priority"] == "P1"
    assert body["tags"] == ["azure-scheduled-events", "Redeploy", "Platform", "team-infra"]


@pytest.mark.parametrize("kind", SERVICES)
def test_what_pages_nothing_is_confirmed_without_a_request(kind, request, state_dir) -> None:
    receiver = receiver_of(kind, request)
    batch = store(state_dir, [
        agent_event("approved", ApprovedBy="cli"), heartbeat(),
        agent_event("scheduled", OTHER, EventSource="User"),  # a user's own reboot
        agent_event("scheduled", "peer-event", machine=vm("web-4"), AffectsThisVm=False),  # a peer's
        agent_event("scheduled", "freeze", event_type="Freeze"),
    ], sink="pager")

    outcomes = sink_of(kind, request, event_types=["Reboot"]).deliver(batch).outcomes

    assert outcomes == [Delivered()] * 5
    assert receiver.requests == []


def test_user_events_and_peers_page_when_asked_for(pagerduty, pd_sink, state_dir) -> None:
    batch = store(state_dir, [agent_event("scheduled", OTHER, EventSource="User"),
                              agent_event("scheduled", "peer", AffectsThisVm=False)], sink="pager")
    sink = pd_sink(sources=["Platform", "User"], only_this_vm=False)

    assert run_worker(sink, state_dir, drained, 20)

    assert [b["dedup_key"] for b in pagerduty.bodies()] == [OTHER, "peer"]
    assert batch


@pytest.mark.parametrize("kind", SERVICES)
def test_one_request_per_delivery_call_so_the_cursor_moves_after_each(kind, request, state_dir) -> None:
    receiver = receiver_of(kind, request)
    batch = store(state_dir, [agent_event("approved", ApprovedBy="cli"), agent_event("scheduled"),
                              agent_event("started"), agent_event("completed")], sink="pager")

    outcomes = sink_of(kind, request).deliver(batch).outcomes

    assert outcomes == [Delivered(), Delivered()]  # the approval (nothing to send) and one request
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("kind", SERVICES)
def test_429_with_retry_after_is_honoured_then_delivered_in_order(kind, request, state_dir) -> None:
    receiver = receiver_of(kind, request)
    receiver.script(Reply(429, {"Retry-After": "2", "Content-Type": "application/json"},
                          b'{"message":"Request limit exceeded"}'))
    store(state_dir, [agent_event("scheduled"), agent_event("completed")], sink="pager")

    assert run_worker(sink_of(kind, request), state_dir, drained, 30)

    posts = [r for r in receiver.requests if r.method == "POST"]
    assert [r.status for r in posts] == [429, 202, 202]
    assert posts[1].at - posts[0].at >= 1.9
    assert receiver.alerts.closed == receiver.alerts.opened == {agent_event("x")["subject"]: 1}


@pytest.mark.parametrize("kind", SERVICES)
def test_503_and_a_receiver_outage_are_retried_and_nothing_is_lost(kind, request, state_dir) -> None:
    receiver = receiver_of(kind, request)
    receiver.script(503)
    store(state_dir, [agent_event("scheduled")], sink="pager")
    sink = sink_of(kind, request)

    [outcome] = sink.deliver(pending(state_dir)).outcomes
    assert isinstance(outcome, Retry) and "HTTP 503" in outcome.reason
    receiver.stop()
    store(state_dir, [agent_event("started"), agent_event("completed")], sink="pager")
    [outcome] = sink.deliver(pending(state_dir)).outcomes
    assert isinstance(outcome, Retry) and "cannot connect" in outcome.reason

    receiver.start()
    assert run_worker(sink, state_dir, drained, 30)
    assert receiver.alerts.closed == receiver.alerts.opened == {agent_event("x")["subject"]: 1}
    with Outbox(state_dir) as box:
        assert box.dead_letters("pager") == []


def test_a_routing_key_pagerduty_refuses_parks_the_sink_and_keeps_the_backlog(
        state_dir, monkeypatch, caplog) -> None:
    other_key = "0therR0ut1ngKey0f32LettersAndD1g"
    monkeypatch.setenv("PD_ROUTING_KEY", other_key)
    with PagerDutyReceiver(ROUTING_KEY) as pagerduty:  # knows only its own integration's key
        store(state_dir, [agent_event("scheduled"), agent_event("completed")], sink="pager")
        sink = pager_sink("pagerduty", url=pagerduty.url, routing_key_env="PD_ROUTING_KEY")

        with caplog.at_level(logging.DEBUG):
            assert run_worker(sink, state_dir, lambda box: box.parked("pager") is not None, 20)

    with Outbox(state_dir) as box:
        state = box.sink_status("pager")
    assert state.backlog == 2 and state.dead_letters == 0
    assert "PagerDuty refuses the routing key" in state.parked and "Invalid routing key" in state.parked
    assert other_key not in state.parked and other_key not in caplog.text


def test_an_event_pagerduty_finds_invalid_is_dead_lettered_and_the_next_goes_on(
        pagerduty, pd_sink, state_dir) -> None:
    pagerduty.script(Reply(400, {"Content-Type": "application/json"},
                           b'{"status":"invalid event","message":"Event object is invalid",'
                           b'"errors":["\'payload.summary\' is too long"]}'))
    store(state_dir, [agent_event("scheduled"), agent_event("completed")], sink="pager")

    assert run_worker(pd_sink(), state_dir, drained, 20)

    with Outbox(state_dir) as box:
        [(_, reason, _)] = box.dead_letters("pager")
    assert reason.startswith("HTTP 400") and "is too long" in reason
    assert [b["event_action"] for b in pagerduty.bodies()] == ["resolve"]


@pytest.mark.parametrize(("status", "words"), [
    (401, "Opsgenie refuses the API key (a key of an EU account works only with region = \"eu\")"),
    (403, "Opsgenie does not let this key create or close alerts"),
])
def test_an_api_key_opsgenie_refuses_parks_the_sink(status, words, opsgenie, og_sink, state_dir) -> None:
    opsgenie.script(Reply(status, {"Content-Type": "application/json"},
                          b'{"message":"Could not authenticate"}'))
    batch = store(state_dir, [agent_event("scheduled")], sink="pager")

    [outcome] = og_sink().deliver(batch).outcomes

    assert isinstance(outcome, Park) and words in outcome.reason and API_KEY not in outcome.reason


def test_a_wrong_api_key_is_refused_by_opsgenie_and_by_check(opsgenie, state_dir, monkeypatch) -> None:
    monkeypatch.setenv("OG_API_KEY", "not-the-integration-key")
    sink = pager_sink("opsgenie", url=opsgenie.base_url, api_key_env="OG_API_KEY")

    [outcome] = sink.deliver(store(state_dir, [agent_event("scheduled")], sink="pager")).outcomes

    assert isinstance(outcome, Park) and "Opsgenie refuses the API key" in outcome.reason
    assert sink.check().startswith(f"HTTP 401 from {opsgenie.base_url}: Opsgenie refuses the API key")


def test_an_opsgenie_422_dead_letters_that_event(opsgenie, og_sink, state_dir) -> None:
    opsgenie.script(Reply(422, {"Content-Type": "application/json"},
                          b'{"message":"Request body is not processable. message is too long"}'))
    [outcome] = og_sink().deliver(store(state_dir, [agent_event("scheduled")], sink="pager")).outcomes

    assert isinstance(outcome, DeadLetter) and "not processable" in outcome.reason


def test_closing_an_alert_opsgenie_says_does_not_exist_has_nothing_left_to_do(opsgenie, og_sink,
                                                                               state_dir) -> None:
    opsgenie.script(Reply(404, {"Content-Type": "application/json"},
                          b'{"message":"Alert with alias [x] does not exist"}'))
    batch = store(state_dir, [agent_event("canceled")], sink="pager")

    assert og_sink().deliver(batch).outcomes == [Delivered()]


def test_tls_is_verified_against_the_ca_file_given(tmp_path, state_dir, keys) -> None:
    tls = make_tls(tmp_path / "tls")
    with PagerDutyReceiver(ROUTING_KEY, tls=tls) as pagerduty:
        store(state_dir, [agent_event("scheduled")], sink="pager")
        unverified = pager_sink("pagerduty", url=pagerduty.url, routing_key_env="PD_ROUTING_KEY")
        verified = pager_sink("pagerduty", url=pagerduty.url, routing_key_env="PD_ROUTING_KEY",
                              ca_file=str(tls.ca_cert))

        [refused] = unverified.deliver(pending(state_dir)).outcomes
        assert isinstance(refused, Retry)
        assert refused.reason.startswith(f"TLS verification failed for {pagerduty.url}")
        assert refused.reason.endswith("give ca_file (the receiver's CA bundle)")
        assert verified.deliver(pending(state_dir)).outcomes == [Delivered()]
        assert verified.check() is None
    assert pagerduty.alerts.opened == {agent_event("x")["subject"]: 1}


def test_the_request_carries_the_key_only_where_the_service_expects_it(opsgenie, og_sink, state_dir) -> None:
    og_sink().deliver(store(state_dir, [agent_event("scheduled")], sink="pager"))

    [post] = opsgenie.requests
    assert post.headers["authorization"] == f"GenieKey {API_KEY}"
    assert API_KEY not in post.body.decode()
    assert json.loads(post.body)["alias"] == agent_event("x")["subject"]
