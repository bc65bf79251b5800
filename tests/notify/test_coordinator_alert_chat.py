"""The coordinator's alerts in chat: a ``recovery-timeout`` alert of the fold says so once in Teams
and Slack when it opens and once when it is resolved, to a local receiver over real HTTP that checks
each body against the documented shape. ``submit`` runs the function at once (the service runs it on
its own thread); everything after it is the real notifier."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from se_forwarder.fleet.coordinator import Policy
from se_forwarder.fleet.coordinator.config import NotifySettings, load_notify
from se_forwarder.fleet.coordinator.output import ChatHook, Notifier
from se_forwarder.fleet.coordinator.view.alerts import derive
from tests.coordinator.fleet import SET, T0, avset, report
from tests.support.chat_receiver import ChatReceiver, wait_messages

POLICY = Policy(free_slot="recovered", min_healthy=0.0, recover_timeout=60.0, heartbeat_timeout=3600.0)


def now_done(func):
    future: Future = Future()
    future.set_result(func())
    return future


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_a_recovery_timeout_says_so_when_it_opens_and_when_it_is_resolved(fmt):
    fleet = avset(POLICY)
    fleet.fold(report("recovered", SET[0], "OLD", T0 - 3500))
    fleet.transition("completed", "E1", [SET[0]], t=T0)
    clock = {"now": T0 + 61}
    with ChatReceiver(fmt) as receiver:
        hook = ChatHook(NotifySettings(fmt, url_env="X", decisions=(), events=()), receiver.url).start()
        notifier = Notifier([hook], now_done, lambda: fleet.state, lambda: True, since=T0 - 1)
        notifier._derived = lambda: derive(fleet.state, fleet.decide(clock["now"], apply=False))  # noqa: SLF001
        try:
            assert notifier.look() == 1
            assert notifier.look() == 0  # still open: said once
            fleet.fold(report("recovered", SET[0], "E1", T0 + 70))
            clock["now"] = T0 + 71
            assert notifier.look() == 1
            lines = wait_messages(receiver, 2)
        finally:
            notifier.stop()
        assert receiver.errors == []
    assert lines[0].startswith("Alert (recovery-timeout): 1 VM(s) not recovered after their maintenance "
                               "ended, each still counted unavailable: web-0 (E1)")
    assert lines[1].startswith("Resolved (recovery-timeout): ")


def test_a_chat_hook_takes_the_new_alert_kinds_by_default_and_any_kind_named():
    [default] = load_notify([{"format": "teams", "url_env": "X"}])
    assert default.alerts == ("recovery-timeout",)
    [none] = load_notify([{"format": "slack", "url_env": "X", "alerts": []}])
    assert none.alerts == ()
    [named] = load_notify([{"format": "slack", "url_env": "X", "alerts": ["breach"]}])
    assert named.alerts == ("breach",)


def test_an_alert_a_running_part_raised_reaches_chat_too(monkeypatch):
    """A gate's ``gate-closed`` is raised by the part that watches it (output/alert_book.py), not
    derived from the fold: the notifier built from the settings takes both."""
    from types import SimpleNamespace

    from se_forwarder.fleet.coordinator.output.alert_book import AlertBook
    from se_forwarder.fleet.coordinator.view.alerts import Alert

    fleet = avset(POLICY)
    fleet.fold(report("recovered", SET[0], "OLD", T0 - 3500))
    book = AlertBook()
    service = SimpleNamespace(submit=now_done, state=fleet.state, acting=lambda: True, policy=POLICY,
                              evaluation=fleet.decide(T0 + 1, apply=False), alerts=book)
    with ChatReceiver("slack") as receiver:
        monkeypatch.setenv("SE_TEST_SLACK_URL", receiver.url)
        [settings] = load_notify([{"format": "slack", "url_env": "SE_TEST_SLACK_URL", "decisions": [],
                                   "events": [], "alerts": ["gate-closed"]}])
        notifier = Notifier.from_settings([settings], service).start()
        try:
            assert notifier.look() == 0
            book.raise_(Alert("gate-closed/prod", "gate-closed", "gate prod is closed: HighErrorRate fires"))
            assert notifier.look() == 1
            lines = wait_messages(receiver, 1)
        finally:
            notifier.stop()
    assert lines == ["Alert (gate-closed): gate prod is closed: HighErrorRate fires"]
