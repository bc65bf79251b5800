"""What goes on the wire: CloudEvents HTTP binding modes, Standard Webhooks signatures, headers.

Every delivery is parsed by the receiver with the cloudevents SDK and every signature verified with
the standardwebhooks library; ``receiver.errors`` collects whatever did not parse or verify.
"""

from __future__ import annotations

import json

import pytest
from dateutil.parser import isoparse

from se_forwarder.sinks.base import Delivered
from se_forwarder.sinks.webhook import batch_id
from tests.support.receiver import Receiver
from tests.support.sinks import make_sink, new_secret, record_events


@pytest.mark.parametrize("mode", ["structured", "binary", "batch"])
def test_every_mode_delivers_cloudevents_equal_to_the_stored_ones(mode, receiver, state_dir, secret_env):
    events = record_events(state_dir, 3)
    sink = make_sink(url=receiver.url, mode=mode, secret_env=secret_env)

    assert sink.deliver(events).outcomes == [Delivered()] * 3

    assert receiver.errors == []
    assert {r.mode for r in receiver.posts()} == {mode}
    received = [e for r in receiver.posts() for e in r.events]
    assert len(received) == 3
    for got, stored in zip(received, events, strict=True):
        want = json.loads(stored.payload)
        for attr in ("specversion", "id", "type", "source", "subject", "datacontenttype"):
            assert got.get_attributes()[attr] == want[attr]
        assert got.get_time() == isoparse(want["time"])
        # binary mode carries extensions as header strings: the incarnation arrives as "1"
        for ext in ("eventtype", "eventstatus", "incarnation", "vmid"):
            assert str(got.get_extension(ext)) == str(want[ext])
        assert got.get_data() == want["data"]


def test_structured_mode_sends_no_ce_headers(receiver, state_dir):
    sink = make_sink(url=receiver.url)

    sink.deliver(record_events(state_dir, 2))

    for request in receiver.posts():
        assert request.headers["content-type"] == "application/cloudevents+json"
        assert [h for h in request.headers if h.startswith("ce-")] == []


def test_binary_mode_puts_attributes_in_ce_headers_and_only_data_in_the_body(receiver, state_dir):
    [event] = record_events(state_dir, 1)
    sink = make_sink(url=receiver.url, mode="binary")

    sink.deliver([event])

    [request] = receiver.posts()
    assert request.headers["ce-id"] == event.ce_id
    assert request.headers["ce-specversion"] == "1.0"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.body) == json.loads(event.payload)["data"]


def test_batch_mode_sends_one_json_array_in_outbox_order(receiver, state_dir):
    events = record_events(state_dir, 5)
    sink = make_sink(url=receiver.url, mode="batch")

    sink.deliver(events)

    [request] = receiver.posts()
    assert request.headers["content-type"] == "application/cloudevents-batch+json"
    assert request.ids == [e.ce_id for e in events]


def test_batches_are_cut_at_batch_max_events(receiver, state_dir):
    events = record_events(state_dir, 7)
    sink = make_sink(url=receiver.url, mode="batch", batch_max_events=3)

    assert sink.deliver(events).outcomes == [Delivered()] * 7

    assert [len(r.events) for r in receiver.posts()] == [3, 3, 1]
    assert receiver.accepted_ids() == [e.ce_id for e in events]


def test_batches_are_cut_at_batch_max_bytes(receiver, state_dir):
    events = record_events(state_dir, 6)
    one = len(events[0].payload)
    sink = make_sink(url=receiver.url, mode="batch", batch_max_bytes=max(1024, 2 * one + 50))

    sink.deliver(events)

    assert all(len(r.body) <= max(1024, 2 * one + 50) for r in receiver.posts())
    assert len(receiver.posts()) >= 3
    assert receiver.accepted_ids() == [e.ce_id for e in events]


@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_the_webhook_id_is_the_cloudevent_id(mode, receiver, state_dir, secret_env):
    events = record_events(state_dir, 3)
    sink = make_sink(url=receiver.url, mode=mode, secret_env=secret_env)

    sink.deliver(events)

    assert [r.webhook_id for r in receiver.posts()] == [e.ce_id for e in events]
    assert all(r.verified_with == [0] for r in receiver.posts())
    assert all(r.headers["webhook-signature"].startswith("v1,") for r in receiver.posts())


def test_a_batch_webhook_id_is_derived_from_the_ids_it_carries(receiver, state_dir, secret_env):
    events = record_events(state_dir, 4)
    sink = make_sink(url=receiver.url, mode="batch", batch_max_events=2, secret_env=secret_env)

    sink.deliver(events)

    first, second = receiver.posts()
    assert first.webhook_id == batch_id([e.ce_id for e in events[:2]])
    assert second.webhook_id == batch_id([e.ce_id for e in events[2:]])
    assert first.webhook_id != second.webhook_id
    assert receiver.errors == []


def test_during_a_rotation_every_configured_secret_signs(state_dir, tmp_path, monkeypatch):
    old, new, newer = new_secret(), new_secret(), new_secret()
    monkeypatch.setenv("HOOK_SECRET_OLD", old)
    secret_file = tmp_path / "hook.secrets"
    secret_file.write_text(f"# one secret a line\n{new}\n{newer}\n")
    with Receiver(secrets=[old, new, newer]) as receiver:
        sink = make_sink(url=receiver.url, secret_env=["HOOK_SECRET_OLD"],
                         secret_file=str(secret_file))

        sink.deliver(record_events(state_dir, 2))

        assert receiver.errors == []
        for request in receiver.posts():
            assert request.verified_with == [0, 1, 2]
            assert len(request.headers["webhook-signature"].split(" ")) == 3


def test_a_receiver_with_only_the_new_secret_still_verifies_rotated_deliveries(state_dir, monkeypatch):
    old, new = new_secret(), new_secret()
    monkeypatch.setenv("OLD", old)
    monkeypatch.setenv("NEW", new)
    with Receiver(secrets=[new]) as receiver:
        make_sink(url=receiver.url, secret_env=["OLD", "NEW"]).deliver(record_events(state_dir, 1))

        assert receiver.errors == []
        assert receiver.posts()[0].verified_with == [0]


def test_without_a_secret_nothing_is_signed(state_dir):
    with Receiver() as receiver:
        make_sink(url=receiver.url).deliver(record_events(state_dir, 1))

        [request] = receiver.posts()
        assert "webhook-signature" not in request.headers
        assert receiver.errors == []


def test_static_headers_are_sent_with_values_from_text_env_and_file(receiver, state_dir, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("HOOK_API_KEY", "key-from-env")
    key_file = tmp_path / "tenant"
    key_file.write_text("tenant-from-file\n")
    sink = make_sink(url=receiver.url, headers={
        "X-Team": "sre", "X-Api-Key": {"env": "HOOK_API_KEY"}, "X-Tenant": {"file": str(key_file)},
    })

    sink.deliver(record_events(state_dir, 1))

    [request] = receiver.posts()
    assert request.headers["x-team"] == "sre"
    assert request.headers["x-api-key"] == "key-from-env"
    assert request.headers["x-tenant"] == "tenant-from-file"
    assert request.headers["user-agent"].startswith("se-forwarder/")
