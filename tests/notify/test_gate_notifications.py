"""A coordinator's gate that closes, and opens again, as chat messages: the real notifier, from a
fold whose gate verdicts change, to a local Slack and Teams receiver over real HTTP that checks each
body against the documented shape (as test_coordinator_notifications.py does for decisions)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import replace

import pytest

from se_forwarder.fleet.coordinator.config import NotifySettings
from se_forwarder.fleet.coordinator.fold.gates import GateVerdict, fold_gate
from se_forwarder.fleet.coordinator.output import ChatHook, Notifier
from tests.coordinator.fleet import T0, Fleet
from tests.support.chat_receiver import ChatReceiver

CLOSED = GateVerdict("api-alerts", "alertmanager", "group:vmss/s/rg/api", False,
                     "1 alert fires in Alertmanager: HighErrorRate (service=api)",
                     ("HighErrorRate (service=api)",), checked=T0)


def now_done(func):
    future: Future = Future()
    future.set_result(func())
    return future


def title(receiver: ChatReceiver, body: dict) -> str:
    if receiver.format == "slack":
        return body["text"]
    return body["attachments"][0]["content"]["body"][0]["text"]


@pytest.mark.parametrize("fmt", ["slack", "teams"])
def test_a_gate_that_closes_and_opens_again_is_two_messages(fmt):
    fleet = Fleet()
    with ChatReceiver(fmt) as receiver:
        hook = ChatHook(NotifySettings(fmt, url_env="X", events=()), receiver.url).start()
        notifier = Notifier([hook], now_done, lambda: fleet.state, lambda: True, since=T0 - 1)
        fold_gate(fleet.state.gates, CLOSED)
        assert notifier.look() == 1
        fold_gate(fleet.state.gates, replace(CLOSED, checked=T0 + 1))  # still closed: nothing new
        assert notifier.look() == 0
        fold_gate(fleet.state.gates, replace(CLOSED, open=True, reason="no matching alert fires", alerts=(),
                                             checked=T0 + 30))
        assert notifier.look() == 1
        hook.close(10)
        said = [title(receiver, body) for body in receiver.messages()]
    assert said == ["Gate api-alerts closed: no early approval in group api: 1 alert fires in Alertmanager: "
                    "HighErrorRate (service=api)",
                    "Gate api-alerts is open again: early approval in group api goes on"]


def test_a_gate_open_from_its_first_answer_is_not_announced():
    fleet = Fleet()
    with ChatReceiver("slack") as receiver:
        hook = ChatHook(NotifySettings("slack", url_env="X", events=()), receiver.url).start()
        notifier = Notifier([hook], now_done, lambda: fleet.state, lambda: True, since=T0 - 1)
        fold_gate(fleet.state.gates, replace(CLOSED, open=True, reason="no matching alert fires", alerts=()))
        assert notifier.look() == 0
        hook.close(5)


def test_a_hook_without_gate_in_its_decisions_gets_no_gate_message():
    fleet = Fleet()
    with ChatReceiver("slack") as receiver:
        hook = ChatHook(NotifySettings("slack", url_env="X", decisions=("approve",), events=()),
                        receiver.url).start()
        notifier = Notifier([hook], now_done, lambda: fleet.state, lambda: True, since=T0 - 1)
        fold_gate(fleet.state.gates, CLOSED)
        assert notifier.look() == 0
        hook.close(5)
