"""A feed whose every event is refused at the edge is said as loudly as one that does not answer
(input/feed_watch.py): the ``feed-events`` part fails, ``/healthz`` is degraded and then unhealthy,
``status`` and the page name it; one event folded, or a quiet window, and it is read again."""

from __future__ import annotations

import time

from se_forwarder.fleet.coordinator.api import render_status
from se_forwarder.fleet.coordinator.azure import parts
from se_forwarder.fleet.coordinator.config import AzureSettings
from se_forwarder.fleet.coordinator.config.hub import Access, EventHubSettings
from se_forwarder.fleet.coordinator.fold import FleetState
from se_forwarder.fleet.coordinator.input.azure import AzureInput
from se_forwarder.fleet.coordinator.input.feed_watch import PART, WINDOW, FeedWatch
from se_forwarder.fleet.coordinator.input.hub_reader import Batch, Position
from se_forwarder.fleet.coordinator.observe import health
from se_forwarder.fleet.coordinator.stats import Health

from .azure import feed
from .fleet import SET, SUB, T0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch() -> tuple[FeedWatch, Clock]:
    clock = Clock()
    return FeedWatch(clock=clock), clock


def test_a_refused_event_with_none_folded_in_the_window_fails_the_feed_naming_the_reasons():
    feed_watch, _ = watch()
    feed_watch.refused("type")
    feed_watch.refused("type")
    feed_watch.refused("subscription")
    assert not feed_watch.reachable
    assert feed_watch.last_error.startswith("every feed event of the last 10 min was refused (type 2, "
                                            "subscription 1)")
    assert feed_watch.line().startswith("the Azure feed's events all refused for 0 s (last success never)")


def test_an_event_folded_lately_keeps_a_stray_refusal_from_failing_the_feed():
    feed_watch, clock = watch()
    feed_watch.folded()
    clock.now += WINDOW - 1
    feed_watch.refused("schema")
    assert feed_watch.reachable


def test_the_next_event_folded_reads_the_feed_again():
    feed_watch, clock = watch()
    feed_watch.refused("type")
    clock.now += 5
    feed_watch.folded()
    assert feed_watch.reachable and feed_watch.last_success is not None


def test_a_window_without_refusals_ends_the_failure():
    feed_watch, clock = watch()
    feed_watch.refused("type")
    clock.now += WINDOW - 1
    feed_watch.look()
    assert not feed_watch.reachable
    clock.now += 2
    feed_watch.look()
    assert feed_watch.reachable


def test_events_of_a_kind_no_box_reads_yet_are_no_sign_of_a_broken_feed():
    feed_watch, _ = watch()
    feed_watch.refused("unread")
    assert feed_watch.reachable


def settings() -> AzureSettings:
    hub = EventHubSettings("ns.servicebus.windows.net", "azure-feed", "coordinator", Access(), "azure.feed")
    return AzureSettings((SUB,), feed=hub)


def batch(*events: dict | None) -> Batch:
    return Batch("feed:azure-feed/0", [(e, Position(i, str(i))) for i, e in enumerate(events)],
                 time.monotonic())


def test_a_feed_of_one_wrong_type_is_all_refused_in_healthz_and_status_and_the_right_one_folds():
    reach = parts(*AzureInput.parts(settings()))
    azure = AzureInput(settings(), reach, lambda _: None)
    assert reach[PART] is azure.feed_watch
    state = FleetState()
    wrong = {**feed("E1", "Scheduled", [SET[0]], T0, not_before=T0 + 900),
             "type": "Microsoft.Maintenance.Other"}
    azure.fold_feed(state, batch(wrong, None))
    assert azure.counts == {"feed-type": 1, "feed-not-cloudevent": 1}
    problem = (reach[PART].failing_for(), reach[PART].line())
    assert health(Health("leader", True, True, "", 0, {}, (problem,)))[1].startswith(
        "degraded: the Azure feed's events all refused for 0 s")
    service = {"name": "prod", "instance": "a", "role": "leader",
               "reachability": {name: r.as_data() for name, r in reach.items()}}
    text = render_status({"service": service})
    assert "  feed-events  ALL REFUSED  since 20" in text and "(type 1, not-cloudevent 1)" in text

    for spelling in ("microsoft.maintenance/scheduledevents/write",
                     "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted"):
        azure.fold_feed(state, batch({**feed("E2", "Scheduled", [SET[0]], T0, not_before=T0 + 900),
                                      "type": spelling}))
    assert azure.counts["feed-folded"] == 2 and "e2" in state.events
    assert reach[PART].reachable
