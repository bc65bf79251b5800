"""The coordinator's chat messages about the fleet's maintenance events: one per EventId and stage
(Scheduled, Started, completed or canceled), however many VMs report it, from a real fold fed with
agent CloudEvents to a local Teams or Slack receiver over real HTTP that checks each body against
the documented shape.

The service thread is the one seam: ``submit`` runs the function at once in these tests (the
service runs it on its own thread); everything after it is the real notifier.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import Future
from datetime import UTC, datetime

import pytest

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import load_policy
from se_forwarder.fleet.coordinator.config import NotifySettings, load_notify
from se_forwarder.fleet.coordinator.config.notify import DECISIONS, EVENTS
from se_forwarder.fleet.coordinator.output import ChatHook, Notifier
from se_forwarder.fleet.coordinator.output import EventStages as EventFeed
from se_forwarder.notify import describe
from se_forwarder.notify.describe import when_text
from se_forwarder.notify.fleet import vms_label
from tests.coordinator.fleet import T0, AgentVm, Fleet
from tests.support.chat_receiver import ChatReceiver

POLICY = load_policy({"policy": {"group_tag": "group"},
                      "budgets": [{"scope": "group", "max_unavailable": 1}]})
WEB = [AgentVm(f"web-{i}", fd=str(i % 3), zone="2", tags=(("group", "web"),)) for i in range(12)]
ONE = "aaaaaaaa-0000-4000-8000-000000000001"  # affects web-3, seen by all twelve
ALL = "bbbbbbbb-0000-4000-8000-000000000002"  # affects all twelve
GONE = "cccccccc-0000-4000-8000-000000000003"  # canceled before it started


def now_done(func):
    future: Future = Future()
    future.set_result(func())
    return future


def notifier_for(fleet: Fleet, *receivers: ChatReceiver, since: float, acting: bool = True,
                 events: tuple[str, ...] = EVENTS) -> Notifier:
    hooks = [ChatHook(NotifySettings(r.format, url_env="X", decisions=(), events=events), r.url).start()
             for r in receivers]
    return Notifier(hooks, now_done, lambda: fleet.state, lambda: acting, since=since, policy=POLICY)


def titles(receiver: ChatReceiver) -> list[str]:
    if receiver.format == "slack":
        return [body["text"] for body in receiver.messages()]
    return [body["attachments"][0]["content"]["body"][0]["text"] for body in receiver.messages()]


def wait_messages(receiver: ChatReceiver, count: int, timeout: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(receiver.accepted()) < count:
        time.sleep(0.05)
    return titles(receiver)


def fleet_now() -> tuple[Fleet, float]:
    """Twelve VMs of group web (FD 0, 1, 2; zone 2) heard from now (the messages say "in 15 min")."""
    now = float(int(time.time()))
    fleet = Fleet(policy=POLICY)
    fleet.beat(*WEB, t=now)
    return fleet, now


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_an_event_many_vms_report_is_one_message_per_stage(fmt: str) -> None:
    fleet, now = fleet_now()
    with ChatReceiver(fmt) as receiver:
        notifier = notifier_for(fleet, receiver, since=now - 1)
        assert notifier.look() == 0
        fleet.announce(ONE, [WEB[3]], seen_by=WEB, t=now, not_before=now + 900)
        fleet.announce(ALL, WEB, t=now, not_before=now + 1800)
        assert notifier.look() == 2  # twelve VMs reported each: one message per event
        fleet.transition("started", ALL, WEB, t=now + 1800)
        assert notifier.look() == 1
        fleet.transition("completed", ALL, WEB, t=now + 2040)
        assert notifier.look() == 1
        assert notifier.look() == 0  # nothing twice
        got = wait_messages(receiver, 4, timeout=20 if fmt == "slack" else 10)
        notifier.stop()
    assert receiver.errors == []
    assert got[0] == (f"web-3 (group web, FD 0, zone 2): Reboot scheduled for "
                      f"{when_text(at(now + 900), at(now))}, in 15 min (Platform)")
    everyone = "12 VMs: web-0, web-1, web-2 and 9 more (group web, FDs 0, 1, 2, zone 2)"
    assert re.fullmatch(re.escape(everyone) + r": Reboot scheduled for .*, in 30 min \(Platform\)", got[1])
    assert got[2:] == [f"{everyone}: Reboot started", f"{everyone}: Reboot completed after 4 min"]


def test_the_message_lists_the_event_and_its_vms_as_facts() -> None:
    fleet, now = fleet_now()
    feed = EventFeed(now - 1, POLICY)
    fleet.announce(ALL, WEB, t=now, not_before=now + 1800)
    [(event, started)] = feed.take(fleet.state, acting=True)
    notice = describe(event, at(now), started)
    facts = dict(notice.facts)
    assert facts["Event"] == ALL and facts["Status"] == "Scheduled" and facts["Source"] == "Platform"
    assert facts["Resources"] == ", ".join(f"web-{i}" for i in range(10)) + " and 2 more"
    assert event["id"] == f"{ALL}/scheduled"


def test_a_standby_sends_nothing_and_a_new_leader_only_what_happens_after() -> None:
    fleet, now = fleet_now()
    with ChatReceiver("teams") as receiver:
        notifier = notifier_for(fleet, receiver, since=now - 1, acting=False)
        fleet.announce(ALL, WEB, t=now, not_before=now + 1800)
        assert notifier.look() == 0
        notifier._acting = lambda: True  # noqa: SLF001 - it becomes the leader
        assert notifier.look() == 0  # the standby saw it Scheduled: not announced again
        fleet.transition("started", ALL, WEB, t=now + 1800)
        assert notifier.look() == 1
        got = wait_messages(receiver, 1)
        time.sleep(0.3)
        notifier.stop()
    assert [t.rsplit(": ", 1)[-1] for t in got] == ["Reboot started"]


def test_events_from_before_the_notifier_started_are_not_announced() -> None:
    fleet = Fleet(policy=POLICY)
    fleet.beat(*WEB)
    fleet.announce(ALL, WEB, t=T0, not_before=T0 + 1800)
    feed = EventFeed(T0 + 100, POLICY)
    assert feed.take(fleet.state, acting=True) == []  # folded from the hub's backlog: old news
    fleet.transition("started", ALL, WEB, t=T0 + 1800)
    assert [e["id"] for e, _ in feed.take(fleet.state, acting=True)] == [f"{ALL}/started"]


def test_stages_passed_between_two_looks_are_sent_in_order_but_not_a_stale_scheduled() -> None:
    fleet = Fleet(policy=POLICY)
    fleet.beat(*WEB)
    feed = EventFeed(T0 - 1, POLICY)
    fleet.announce(ALL, WEB, t=T0, not_before=T0 + 900)
    fleet.transition("started", ALL, WEB, t=T0 + 900)
    fleet.announce(GONE, [WEB[5]], seen_by=WEB, t=T0 + 10, not_before=T0 + 1200)
    fleet.transition("canceled", GONE, [WEB[5]], t=T0 + 60)
    taken = feed.take(fleet.state, acting=True)
    assert [e["id"].split("-")[0] + "/" + e["id"].rsplit("/", 1)[-1] for e, _ in taken] == [
        "cccccccc/canceled", "bbbbbbbb/started"]  # first seen past Scheduled: that is old news
    canceled = describe(taken[0][0], at(T0 + 60), taken[0][1])
    assert canceled.title == "web-5 (group web, FD 2, zone 2): Reboot canceled (was due 12:20 UTC)"
    fleet.transition("completed", GONE, [WEB[5]], t=T0 + 70)  # a late report: already ended
    assert feed.take(fleet.state, acting=True) == []
    other = "dddddddd-0000-4000-8000-000000000004"
    fleet.announce(other, WEB[:2], t=T0 + 1000, not_before=T0 + 1100)
    assert [e["id"] for e, _ in feed.take(fleet.state, acting=True)] == [f"{other}/scheduled"]
    fleet.transition("started", other, WEB[:2], t=T0 + 1100)
    fleet.transition("completed", other, WEB[:2], t=T0 + 1400)  # started and ended between two looks
    [(started, _), (completed, since)] = feed.take(fleet.state, acting=True)
    assert started["id"] == f"{other}/started"
    assert describe(completed, at(T0 + 1400), since).title == \
        "web-0, web-1 (group web, FDs 0, 1, zone 2): Reboot completed after 5 min"


def test_the_events_key_chooses_the_stages_sent() -> None:
    fleet, now = fleet_now()
    with ChatReceiver("teams") as ended, ChatReceiver("slack") as none:
        notifier = notifier_for(fleet, ended, since=now - 1, events=("completed",))
        quiet = ChatHook(NotifySettings("slack", url_env="X", events=()), none.url).start()
        notifier.hooks.append(quiet)
        fleet.announce(ALL, WEB, t=now, not_before=now + 1800)
        fleet.announce(GONE, [WEB[5]], seen_by=WEB, t=now, not_before=now + 1200)
        assert notifier.look() == 2
        fleet.transition("started", ALL, WEB, t=now + 1800)
        fleet.transition("canceled", GONE, [WEB[5]], t=now + 60)
        fleet.transition("completed", ALL, WEB, t=now + 1860)
        assert notifier.look() == 3  # each hook takes what its events name
        got = wait_messages(ended, 2)
        time.sleep(0.3)
        notifier.stop()
    assert [t.rsplit(": ", 1)[-1] for t in got] == ["Reboot canceled (was due "
                                                   f"{when_text(at(now + 1200), datetime.now(UTC))})",
                                                   "Reboot completed after 1 min"]
    assert none.posts() == [] and ended.errors == []


def test_the_vms_are_summed_up_with_where_they_are() -> None:
    assert vms_label([{"name": "web-3", "fault_domain": "1", "zone": "2"}]) == "web-3 (FD 1, zone 2)"
    assert vms_label([{"name": "a"}, {"name": "b", "group": "web"}]) == "a, b (group web)"
    many = [{"name": f"db-{i}", "group": "db", "fault_domain": str(i)} for i in range(12)]
    assert vms_label(many) == "12 VMs: db-0, db-1, db-2 and 9 more (group db, FDs 0, 1, 2, 3 and 8 more)"
    assert vms_label([]) == "unknown VMs"


def test_the_events_key_is_validated_with_one_line() -> None:
    assert load_notify([{"format": "teams", "url_env": "X"}])[0].events == EVENTS
    assert load_notify([{"format": "teams", "url_env": "X", "events": ["started", "started"]}])[0].events \
        == ("started",)
    assert load_notify([{"format": "teams", "url_env": "X", "decisions": [], "events": ["completed"]}]) == \
        (NotifySettings("teams", "X", "", (), ("completed",)),)
    assert load_notify([{"format": "teams", "url_env": "X", "events": []}])[0].decisions == DECISIONS
    for bad, said in [
        ({"events": "all"}, "notify[0].events: must be a list of scheduled, started, completed"),
        ({"events": ["scheduled", "begun"]}, "notify[0].events[1]: 'begun' is not one of scheduled, started, "
                                             "completed"),
        ({"events": [], "decisions": [], "alerts": []},
         "notify[0]: decisions, events and alerts are all empty"),
        ({"decisions": "approve"}, "notify[0].decisions: must be a list"),
    ]:
        with pytest.raises(ConfigError) as refused:
            load_notify([{"format": "teams", "url_env": "X", **bad}])
        assert str(refused.value).startswith(said) and "\n" not in str(refused.value)
