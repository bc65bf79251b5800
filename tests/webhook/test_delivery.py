"""Delivery semantics: what each answer of the receiver does to the events, through the real worker.

2xx only is success; 3xx is a failure and never followed; 410 parks; 408/429/502/503/504, other 5xx,
timeouts and refused connections are retried (honouring Retry-After); other 4xx dead-letter the
event and the next one goes on.
"""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime, timedelta

import pytest

from se_forwarder.outbox import Outbox
from se_forwarder.sinks import SinkContext, webhook
from se_forwarder.sinks.base import DeadLetter, Delivered, Park, Retry
from tests.support.receiver import Receiver, Reply
from tests.support.sinks import backlog, make_sink, record_events, run_worker


def test_503_with_retry_after_three_times_then_200_loses_and_reorders_nothing(
    receiver, state_dir, secret_env
):
    events = record_events(state_dir, 4)
    receiver.script(*[Reply(503, {"Retry-After": "2"}, b"busy")] * 3)
    sink = make_sink(url=receiver.url, secret_env=secret_env)

    assert run_worker(sink, state_dir, lambda box: backlog(box) == 0, timeout=30)

    assert receiver.accepted_ids() == [e.ce_id for e in events]
    attempts = [r for r in receiver.posts() if r.ids == [events[0].ce_id]]
    assert [r.status for r in attempts] == [503, 503, 503, 200]
    assert {r.webhook_id for r in attempts} == {events[0].ce_id}
    gaps = [b.at - a.at for a, b in zip(attempts, attempts[1:], strict=False)]
    assert min(gaps) >= 1.9  # Retry-After: 2 honoured
    assert receiver.errors == []


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried_with_the_servers_retry_after(status, receiver, state_dir):
    receiver.script(Reply(status, {"Retry-After": "7"}))
    sink = make_sink(url=receiver.url)

    [outcome] = sink.deliver(record_events(state_dir, 2)).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.after == 7
    assert f"HTTP {status}" in outcome.reason
    assert len(receiver.posts()) == 1  # the second event waits behind the first


def test_410_parks_the_sink_and_keeps_its_whole_backlog_until_resumed(receiver, state_dir):
    events = record_events(state_dir, 3)
    receiver.script(Reply(410, body=b"hook deleted"))
    sink = make_sink(url=receiver.url)

    assert run_worker(sink, state_dir, lambda box: box.parked("hook") is not None, timeout=10)

    with Outbox(state_dir) as box:
        status = box.sink_status("hook")
        assert "410" in status.parked
        assert status.backlog == 3
        assert status.dead_letters == 0
        box.resume("hook")
    assert len(receiver.posts()) == 1
    assert run_worker(make_sink(url=receiver.url), state_dir,
                      lambda box: backlog(box) == 0, timeout=10)
    assert receiver.accepted_ids() == [e.ce_id for e in events]


def test_400_dead_letters_that_event_with_the_reason_and_delivers_the_next(receiver, state_dir):
    events = record_events(state_dir, 3)
    bad = events[1].ce_id
    receiver.respond_with(
        lambda request: Reply(400, body=b'{"error": "unknown field Foo"}') if request.ids == [bad] else None
    )
    sink = make_sink(url=receiver.url)

    assert run_worker(sink, state_dir, lambda box: backlog(box) == 0, timeout=10)

    assert receiver.accepted_ids() == [events[0].ce_id, events[2].ce_id]
    with Outbox(state_dir) as box:
        [(seq, reason, _at)] = box.dead_letters("hook")
    assert seq == events[1].seq
    assert "HTTP 400" in reason and "unknown field Foo" in reason


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_4xx_are_permanent_for_the_event(status, receiver, state_dir):
    receiver.script(status)
    sink = make_sink(url=receiver.url)

    outcomes = sink.deliver(record_events(state_dir, 2)).outcomes

    assert isinstance(outcomes[0], DeadLetter) and f"HTTP {status}" in outcomes[0].reason
    assert outcomes[1] == Delivered()


def test_a_302_is_not_followed_and_counts_as_a_failure(receiver, state_dir):
    receiver.route("/elsewhere", Reply(200))
    receiver.script(Reply(302, {"Location": f"http://127.0.0.1:{receiver.port}/elsewhere"}))
    sink = make_sink(url=receiver.url)

    [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert isinstance(outcome, Retry)
    assert "302" in outcome.reason and "not followed" in outcome.reason
    assert [r.path for r in receiver.requests] == ["/hook"]


def test_a_refused_batch_is_split_until_only_the_bad_event_is_dead_lettered(receiver, state_dir):
    events = record_events(state_dir, 8)
    bad = events[5].ce_id
    receiver.respond_with(lambda request: Reply(422) if bad in request.ids else None)
    sink = make_sink(url=receiver.url, mode="batch")

    outcomes = sink.deliver(events).outcomes

    assert [type(o) for o in outcomes] == [Delivered] * 5 + [DeadLetter] + [Delivered] * 2
    assert receiver.accepted_ids() == [e.ce_id for e in events if e.ce_id != bad]


def test_a_batch_is_resent_with_the_same_webhook_id_even_when_more_events_arrived(
    receiver, state_dir, secret_env
):
    events = record_events(state_dir, 5)
    receiver.script(503)
    sink = make_sink(url=receiver.url, mode="batch", secret_env=secret_env)

    assert isinstance(sink.deliver(events[:3]).outcomes[0], Retry)
    assert sink.deliver(events).outcomes == [Delivered()] * 5

    failed, resent, rest = receiver.posts()
    assert resent.webhook_id == failed.webhook_id
    assert resent.ids == failed.ids == [e.ce_id for e in events[:3]]
    assert rest.ids == [e.ce_id for e in events[3:]]


def test_a_closed_port_is_retried_with_one_clear_reason(state_dir):
    with Receiver() as receiver:
        url = receiver.url + "?code=function-key-secret"
    sink = make_sink(url=url)

    [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.reason.startswith("cannot connect to http://127.0.0.1:")
    assert "refused" in outcome.reason.lower()
    assert "function-key-secret" not in outcome.reason
    assert "\n" not in outcome.reason


def test_a_receiver_slower_than_read_timeout_is_retried(receiver, state_dir):
    receiver.script(Reply(200, delay=1.5))
    sink = make_sink(url=receiver.url, read_timeout=0.3)

    [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert isinstance(outcome, Retry)
    assert "within 0.3 s" in outcome.reason


def test_a_worker_started_during_an_outage_delivers_everything_once_the_receiver_is_back(state_dir):
    events = record_events(state_dir, 20)
    receiver = Receiver().start()
    receiver.stop()  # the port is known and closed
    sink = make_sink(url=receiver.url, connect_timeout=1)
    assert run_worker(sink, state_dir, lambda box: box.sink_status("hook").last_error is not None,
                      timeout=10)

    receiver.start()
    try:
        assert run_worker(make_sink(url=receiver.url), state_dir, lambda box: backlog(box) == 0,
                          timeout=20)
        assert receiver.accepted_ids() == [e.ce_id for e in events]
    finally:
        receiver.stop()


def test_park_outcome_is_the_last_one_reported(receiver, state_dir):
    receiver.script(200, 410)
    sink = make_sink(url=receiver.url)

    outcomes = sink.deliver(record_events(state_dir, 3)).outcomes

    assert outcomes[0] == Delivered()
    assert isinstance(outcomes[1], Park)
    assert len(outcomes) == 2


def test_a_retry_after_that_is_not_ascii_digits_counts_as_absent_instead_of_raising(receiver, state_dir):
    receiver.script(Reply(503, {"Retry-After": "\u00b2"}))  # a Latin-1 "digit" that float() refuses
    sink = make_sink(url=receiver.url)

    [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert outcome == Retry(f"HTTP 503 Service Unavailable from {receiver.url}", None)


def test_a_retry_after_http_date_is_honoured_as_seconds_from_now(receiver, state_dir):
    when = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    receiver.script(Reply(429, {"Retry-After": when}))
    sink = make_sink(url=receiver.url)

    [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert isinstance(outcome, Retry) and 115 <= outcome.after <= 120


def test_a_restarted_sink_resends_the_failed_batch_with_the_same_webhook_id(
    receiver, state_dir, secret_env
):
    events = record_events(state_dir, 5)
    receiver.script(503)
    ctx = SinkContext(state_dir)
    before = webhook.create("hook", webhook.validate(
        {"url": receiver.url, "mode": "batch", "secret_env": secret_env}, "sinks[0]"), ctx)
    assert isinstance(before.deliver(events[:3]).outcomes[0], Retry)
    before.close()

    after = webhook.create("hook", webhook.validate(
        {"url": receiver.url, "mode": "batch", "secret_env": secret_env}, "sinks[0]"), ctx)
    assert after.deliver(events).outcomes == [Delivered()] * 5

    failed, resent, rest = receiver.posts()
    assert resent.webhook_id == failed.webhook_id
    assert resent.ids == failed.ids == [e.ce_id for e in events[:3]]
    assert rest.ids == [e.ce_id for e in events[3:]]
    assert receiver.errors == []
