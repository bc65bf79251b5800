"""The webhook sink with ``format = "teams"`` and ``"slack"``, through the real delivery worker and outbox,
against local stand-ins that check each body against the documented shape and answer as the
services do (Teams Workflows: 202; Slack: 200 ``ok``, 400 ``invalid_payload``, 404 ``no_service``).

Retries, dead letters, parking and the cursor are the worker's, exactly as for CloudEvents webhooks.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from se_forwarder.outbox import Outbox
from se_forwarder.sinks.base import DeadLetter, Delivered, Park, Retry
from tests.support.chat_receiver import ChatReceiver
from tests.support.receiver import Reply
from tests.support.sinks import backlog, run_worker

from .conftest import chat_sink
from .events import NOW, agent_event, decision, heartbeat, store
from .shapes import texts


def footer_ids(receiver: ChatReceiver) -> list[str]:
    """The CloudEvent id each accepted message names in its footer, in arrival order."""
    return [t.split(" · ", 1)[1] for m in receiver.messages() for t in texts(m)
            if t.startswith("se-forwarder · ")]


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_each_event_becomes_one_message_of_the_documented_shape(fmt, request, state_dir) -> None:
    receiver = request.getfixturevalue(fmt)
    events = [agent_event("scheduled"), agent_event("approved", ApprovedBy="cli"),
              agent_event("started"), decision("approve", VmName="web-3")]
    stored = store(state_dir, events)

    assert run_worker(chat_sink(receiver.url, fmt), state_dir, lambda box: backlog(box, "chat") == 0, 20)

    assert receiver.errors == []
    assert footer_ids(receiver) == [e.ce_id for e in stored]
    assert [r.status for r in receiver.posts()] == [202 if fmt == "teams" else 200] * 4
    first = receiver.messages()[0]
    # sent now, for an event in 2033: the date is spelled out
    line = "web-3 (FD 1, zone 2): Reboot scheduled for Mon 19 Sep 2033 14:30 UTC, in "
    assert any(t.lstrip("*").startswith(line) for t in texts(first))


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_no_standard_webhooks_or_cloudevents_headers_are_sent(fmt, request, state_dir) -> None:
    receiver = request.getfixturevalue(fmt)
    sink = chat_sink(receiver.url, fmt)

    assert sink.deliver(store(state_dir, [agent_event("scheduled")])).outcomes == [Delivered()]

    [post] = receiver.posts()
    assert post.headers["content-type"] == "application/json"
    assert not [h for h in post.headers if h.startswith(("webhook-", "ce-"))]


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_heartbeats_are_confirmed_without_sending_anything(fmt, request, state_dir) -> None:
    receiver = request.getfixturevalue(fmt)
    sink = chat_sink(receiver.url, fmt)
    later = heartbeat(at=NOW + timedelta(minutes=1))
    batch = store(state_dir, [heartbeat(), agent_event("scheduled"), later])

    assert sink.deliver(batch).outcomes == [Delivered()] * 3

    assert footer_ids(receiver) == [batch[1].ce_id]


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_429_with_retry_after_is_honoured_then_delivered_in_order(fmt, request, state_dir) -> None:
    receiver = request.getfixturevalue(fmt)
    receiver.script(Reply(429, {"Retry-After": "2"}, b"rate_limited"))
    stored = store(state_dir, [agent_event("scheduled"), agent_event("started")])

    assert run_worker(chat_sink(receiver.url, fmt), state_dir, lambda box: backlog(box, "chat") == 0, 30)

    first, second = receiver.posts()[:2]
    assert (first.status, second.status) == (429, 202 if fmt == "teams" else 200)
    assert second.at - first.at >= 1.9
    assert footer_ids(receiver) == [e.ce_id for e in stored]


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_503_is_retried_and_nothing_is_lost(fmt, request, state_dir) -> None:
    receiver = request.getfixturevalue(fmt)
    receiver.script(503, 503)
    stored = store(state_dir, [agent_event("scheduled")])
    sink = chat_sink(receiver.url, fmt)

    [outcome] = sink.deliver(stored).outcomes
    assert isinstance(outcome, Retry) and "HTTP 503" in outcome.reason

    assert run_worker(sink, state_dir, lambda box: backlog(box, "chat") == 0, 30)
    assert [r.status for r in receiver.posts()] == [503, 503, 202 if fmt == "teams" else 200]
    with Outbox(state_dir) as box:
        assert box.dead_letters("chat") == []


def test_slack_invalid_payload_dead_letters_that_message_and_the_next_goes_on(slack, state_dir) -> None:
    stored = store(state_dir, [agent_event("scheduled"), agent_event("started")])
    slack.respond_with(lambda r: Reply(400, {"Content-Type": "text/html"}, b"invalid_payload")
                       if b"scheduled" in r.body else None)
    slack.script()  # the started one gets the default "ok"

    assert run_worker(chat_sink(slack.url, "slack"), state_dir, lambda box: backlog(box, "chat") == 0, 20)

    with Outbox(state_dir) as box:
        [(seq, reason, _)] = box.dead_letters("chat")
    assert seq == stored[0].seq
    assert reason.startswith("HTTP 400") and reason.endswith(": invalid_payload")


def test_teams_400_dead_letters_that_message(teams, state_dir) -> None:
    error = b'{"error":{"code":"InvalidRequestContent","message":"card does not parse"}}'
    teams.script(Reply(400, {"Content-Type": "application/json"}, error))
    sink = chat_sink(teams.url, "teams")

    outcomes = sink.deliver(store(state_dir, [agent_event("scheduled"), agent_event("started")])).outcomes

    assert isinstance(outcomes[0], DeadLetter) and "InvalidRequestContent" in outcomes[0].reason
    assert outcomes[1] == Delivered()


@pytest.mark.parametrize(("status", "body"), [
    (404, b"no_service"), (403, b"invalid_token"), (404, b"channel_not_found"),
    (410, b"channel_is_archived"), (403, b"action_prohibited"),
])
def test_a_slack_hook_that_refuses_everything_parks_the_sink_and_keeps_the_backlog(
    status, body, slack, state_dir
) -> None:
    store(state_dir, [agent_event("scheduled"), agent_event("started"), agent_event("completed")])
    slack.respond_with(lambda r: Reply(status, {"Content-Type": "text/html"}, body))

    assert run_worker(chat_sink(slack.url, "slack"), state_dir,
                      lambda box: box.parked("chat") is not None, 20)

    with Outbox(state_dir) as box:
        state = box.sink_status("chat")
        assert state.backlog == 3 and state.dead_letters == 0
        assert body.decode() in state.parked
    assert len(slack.posts()) == 1


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_deleted_or_disabled_teams_workflow_parks_the_sink(status, teams, state_dir) -> None:
    error = b'{"error":{"code":"WorkflowNotFound"}}'
    teams.script(Reply(status, {"Content-Type": "application/json"}, error))
    sink = chat_sink(teams.url, "teams")

    [outcome] = sink.deliver(store(state_dir, [agent_event("scheduled")])).outcomes

    assert isinstance(outcome, Park)
    assert "the teams hook refuses every message" in outcome.reason
    assert "WorkflowNotFound" in outcome.reason


def test_slack_posts_are_spaced_by_a_second(slack, state_dir) -> None:
    sink = chat_sink(slack.url, "slack")

    events = [agent_event("scheduled"), agent_event("started"), agent_event("completed")]
    sink.deliver(store(state_dir, events))

    times = [r.at for r in slack.posts()]
    assert [round(b - a, 1) >= 0.9 for a, b in zip(times, times[1:], strict=False)] == [True, True]


def test_completed_says_how_long_after_the_started_the_sink_delivered(teams, state_dir) -> None:
    events = [agent_event("started", observed=NOW),
              agent_event("completed", observed=NOW + timedelta(minutes=4))]

    chat_sink(teams.url, "teams").deliver(store(state_dir, events))

    lines = [texts(m)[0] for m in teams.messages()]
    assert lines == ["web-3 (FD 1, zone 2): Reboot started",
                     "web-3 (FD 1, zone 2): Reboot completed after 4 min"]


def test_events_chooses_what_is_posted_and_the_rest_is_confirmed(teams, state_dir) -> None:
    batch = store(state_dir, [agent_event("scheduled"), agent_event("approved", ApprovedBy="cli"),
                              agent_event("started"), decision("breach")])
    sink = chat_sink(teams.url, "teams", events=["scheduled", "coordinator.breach"])

    assert sink.deliver(batch).outcomes == [Delivered()] * 4

    assert footer_ids(teams) == [batch[0].ce_id, batch[3].ce_id]
