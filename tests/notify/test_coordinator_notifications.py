"""The coordinator's chat notifications, from the core's own decisions (a real fold fed with agent
CloudEvents, decisions folded back as the service does) to a local Teams or Slack receiver over real
HTTP that checks each body against the documented shape.

The service thread is the one seam: ``submit`` runs the function at once in these tests (the
service runs it on its own thread); everything after it is the real notifier.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import load_policy
from se_forwarder.fleet.coordinator.config import NotifySettings, from_dict, hook_url, load_notify
from se_forwarder.fleet.coordinator.config.notify import DECISIONS
from se_forwarder.fleet.coordinator.decide import control
from se_forwarder.fleet.coordinator.output import ChatHook, Notifier
from se_forwarder.fleet.coordinator.output import NewDecisions as DecisionFeed
from se_forwarder.notify import describe
from tests.coordinator.fleet import T0, AgentVm, Fleet
from tests.support.chat_receiver import ChatReceiver, wait_messages
from tests.support.receiver import Reply

POLICY = load_policy({"policy": {"group_tag": "group"},
                      "budgets": [{"scope": "group", "max_unavailable": 1}]})
WEB = [AgentVm(f"web-{i}", fd=str(i), tags=(("group", "web"),)) for i in range(3)]


def now_done(func):
    future: Future = Future()
    future.set_result(func())
    return future


def fleet_with_decisions() -> tuple[Fleet, dict[str, str]]:
    """approve A (seen by three VMs), defer B (twice: budget, then paused), breach C, pause, hold B."""
    fleet = Fleet(policy=POLICY)
    fleet.beat(*WEB)
    ids = {"a": "aaaaaaaa-0000-4000-8000-000000000001", "b": "bbbbbbbb-0000-4000-8000-000000000002",
           "c": "cccccccc-0000-4000-8000-000000000003"}
    fleet.announce(ids["a"], [WEB[0]], seen_by=WEB, not_before=T0 + 900)
    fleet.announce(ids["b"], [WEB[1]], seen_by=WEB, not_before=T0 + 1200)
    fleet.announce(ids["c"], [WEB[1], WEB[2]], seen_by=WEB, not_before=T0 + 1800)
    fleet.decide(T0)
    fleet.apply(control.pause(fleet.state, POLICY, T0 + 5, None, "person:alice", "change freeze"))
    fleet.decide(T0 + 6)
    fleet.apply(control.hold(fleet.state, POLICY, T0 + 7, ids["b"], "person:alice", "db migration"))
    return fleet, ids


def notifier_for(fleet: Fleet, *receivers: ChatReceiver, acting: bool = True, **options) -> Notifier:
    options.setdefault("events", ())  # decisions only here; the fleet events: test_fleet_event_notifications
    hooks = [ChatHook(NotifySettings(r.format, url_env="X", **options), r.url).start() for r in receivers]
    return Notifier(hooks, now_done, lambda: fleet.state, lambda: acting, since=T0 - 1)


def test_the_core_decisions_read_as_the_issue_says() -> None:
    fleet, ids = fleet_with_decisions()
    events = DecisionFeed(T0 - 1).take(fleet.state, acting=True)
    lines = {e["id"]: describe(e, datetime_at(T0)).title for e in events}
    approve = next(line for key, line in lines.items() if "/approve/1" in key)
    assert approve == "Coordinator approved Reboot for web-0 (group web, 1/1 used)"
    breach = next(line for key, line in lines.items() if "/breach/" in key)
    assert breach.startswith("Breach ahead: Reboot for web-1, web-2 at 12:30 UTC, in 30 min "
                             "(group web: 2 at once, max 1)")
    assert "Coordinator paused fleet by person:alice: change freeze" in lines.values()
    assert "Coordinator holds Reboot for web-1 by person:alice: db migration" in lines.values()
    sent_to = describe(next(e for e in events if "/approve/" in e["id"]), datetime_at(T0)).facts
    assert ("Sent to", "web-0") in sent_to and ("Budgets", "group web, 1/1 used") in sent_to


def datetime_at(t: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC)


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_one_message_per_fleet_event_in_the_documented_shape(fmt: str) -> None:
    fleet, ids = fleet_with_decisions()
    kinds = sorted(d.kind for d in fleet.state.decisions.values())
    assert kinds.count("defer") >= 2  # B deferred for the budget, then again for the pause
    assert "sent" in kinds  # A's message went out: a record of a decision, never posted
    with ChatReceiver(fmt) as receiver:
        notifier = notifier_for(fleet, receiver)
        assert notifier.look() == len(fleet.state.decisions)
        wanted = [d for d in fleet.state.decisions.values()
                  if d.kind != "sent" and (d.kind != "defer" or "/defer/1-" in d.id)]
        got = wait_messages(receiver, len(wanted), timeout=20 if fmt == "slack" else 10)
        notifier.stop()
        assert receiver.errors == []
        assert len(got) == len(wanted)  # A seen by three VMs: one approval message; B's second defer: none
        assert sum(t.startswith("Coordinator approved") for t in got) == 1
        assert sum(t.startswith("Coordinator deferred Reboot for web-1:") for t in got) == 1
        assert any(t.startswith("Breach ahead") for t in got)
        assert notifier.look() == 0  # nothing twice


def test_a_standby_sends_nothing_and_forgets_what_it_saw() -> None:
    fleet, _ = fleet_with_decisions()
    with ChatReceiver("teams") as receiver:
        notifier = notifier_for(fleet, receiver, acting=False)
        notifier.look()
        notifier._acting = lambda: True  # noqa: SLF001 - it becomes the leader
        assert notifier.look() == 0
        notifier.stop()
        assert receiver.posts() == []


def test_decisions_made_before_the_notifier_started_are_not_sent() -> None:
    fleet, _ = fleet_with_decisions()
    assert DecisionFeed(T0 + 100).take(fleet.state, acting=True) == []


def test_429_and_503_are_retried_and_the_message_arrives() -> None:
    fleet, _ = fleet_with_decisions()
    with ChatReceiver("teams") as receiver:
        receiver.script(Reply(429, {"Retry-After": "1"}), 503)
        notifier = notifier_for(fleet, receiver, decisions=("approve",))
        notifier.look()
        got = wait_messages(receiver, 1)
        notifier.stop()
        assert [r.status for r in receiver.posts()] == [429, 503, 202]
        assert got == ["Coordinator approved Reboot for web-0 (group web, 1/1 used)"]


def test_a_message_the_hook_refuses_is_dropped_and_the_next_one_goes() -> None:
    fleet, _ = fleet_with_decisions()
    with ChatReceiver("slack") as receiver:
        receiver.script(Reply(400, {}, b"invalid_payload"))
        notifier = notifier_for(fleet, receiver, decisions=("approve", "pause"))
        notifier.look()
        got = wait_messages(receiver, 1)
        time.sleep(0.3)
        notifier.stop()
        assert [r.status for r in receiver.posts()] == [400, 200]
        assert got == ["Coordinator paused fleet by person:alice: change freeze"]
        assert notifier.hooks[0].dropped == 1


def test_offering_never_blocks_even_when_the_hook_hangs() -> None:
    fleet, _ = fleet_with_decisions()
    with ChatReceiver("teams") as receiver:
        receiver.script(*[Reply(202, delay=3.0)] * 3)
        hook = ChatHook(NotifySettings("teams", url_env="X"), receiver.url).start()
        events = DecisionFeed(T0 - 1).take(fleet.state, acting=True)
        started = time.monotonic()
        for _ in range(400):
            for event in events:
                hook.offer(event)
        assert time.monotonic() - started < 1.0
        assert hook.queue.qsize() <= 1000 and hook.dropped > 0  # the oldest made room
        while not hook.queue.empty():
            hook.queue.get_nowait()
        hook.close(5)


def test_notify_tables_are_validated_with_one_line() -> None:
    assert load_notify([{"format": "slack", "url_env": "SLACK_URL"}]) == \
        (NotifySettings("slack", "SLACK_URL", "", DECISIONS),)
    for bad, said in [
        ({"format": "discord", "url_env": "X"}, "notify[0].format"),
        ({"format": "teams"}, "exactly one of url_env or url_file"),
        ({"format": "teams", "url_env": "https://x.webhook.office.com/abc"}, "not an environment variable"),
        ({"format": "teams", "url_env": "X", "decisions": ["approve", "retarget"]}, "decisions[1]"),
        ({"format": "teams", "url_env": "X", "colour": "red"}, "notify[0].colour: unknown key"),
    ]:
        with pytest.raises(ConfigError, match=said.replace("[", r"\[").replace("]", r"\]")):
            load_notify([bad])


def test_the_url_comes_from_its_variable_or_file_and_must_be_https(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TEAMS_URL", "https://prod.westeurope.logic.azure.com/workflows/abc?sig=s3cr3t")
    assert hook_url(NotifySettings("teams", url_env="TEAMS_URL")).startswith("https://prod.")
    (tmp_path / "url").write_text("http://hooks.slack.com/services/T/B/Xq7sK2pL9vR4tY8wZ1mN6bC3\n")
    with pytest.raises(ConfigError) as refused:
        hook_url(NotifySettings("slack", url_file=str(tmp_path / "url")))
    assert "must be https" in str(refused.value) and "Xq7sK2pL9vR4tY8wZ1mN6bC3" not in str(refused.value)
    with pytest.raises(ConfigError, match="MISSING_URL is not set"):
        hook_url(NotifySettings("slack", url_env="MISSING_URL"))


def test_coordinator_toml_takes_notify_and_web_tables() -> None:
    raw = {"signing": {"key_file": "/k"},
           "eventhub": {"fully_qualified_namespace": "ns.servicebus.windows.net"},
           "storage": {"account_url": "https://a.blob.core.windows.net"},
           "queues": {"account_url": "https://a.queue.core.windows.net"},
           "api": {"token_file": "/t"},
           "web": {"port": 8080}, "notify": [{"format": "teams", "url_env": "TEAMS_URL"}]}
    settings = from_dict(raw)
    assert settings.web is not None and (settings.web.host, settings.web.port) == ("127.0.0.1", 8080)
    assert settings.notify[0].format == "teams"
    with pytest.raises(ConfigError, match="web.port"):
        from_dict({**raw, "web": {"port": 70000}})
