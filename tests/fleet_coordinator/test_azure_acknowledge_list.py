"""Azure's current surface end to end (issue 33), with real parts: the simulator plays Azure (ARM over
HTTPS with its test CA, Event Grid's feed to a second broker, here in the field table's spelling
``microsoft.maintenance/scheduledevents/write``), ``coordinator run`` reads it with its real SDK
clients, and a local stand-in for PagerDuty's Events API v2 (tests/support/pager_receiver.py,
which checks every request against the documented schema) takes its alerts.

Two uniform scale sets, no agent anywhere: ``api`` (2 VMs) and ``web`` (3 VMs); group budgets of 2.

1. The coordinator, with ``[[notify]] format = "pagerduty"``, starts paused. One Reboot for each
   api VM is scheduled; it is resumed: one decision pass approves both, and both are acknowledged
   in one ``AcknowledgeList`` call.
2. With PagerDuty down, a Reboot of all three web VMs is scheduled: it breaches the group budget,
   and its alert cannot be sent. The coordinator is killed (SIGKILL), PagerDuty comes back, the
   coordinator starts again: the trigger arrives. PagerDuty goes down again, the event runs and
   ends, the coordinator is killed again, PagerDuty comes back, it starts again: the resolve arrives.
3. A second coordinator whose ``[azure] subscriptions`` leaves the fleet's out refuses every feed
   event: its /healthz, status and page say so.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.simulator.event_grid import WRITE_TYPE
from se_forwarder.simulator.topology import Topology
from tests.azurite import needs_blob_and_queue
from tests.fleet_page.browser import chrome
from tests.pager.conftest import ROUTING_KEY
from tests.support.pager_receiver import PagerDutyReceiver
from tests.support.waiting import wait_for

from .azure_fleet import AzureFleet
from .fleet import pagerduty_notify, shut_down

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(480),
    needs_blob_and_queue,
]

TOPOLOGY = Topology.build(scale_sets=[{"name": "api", "vms": 2}, {"name": "web", "vms": 3}])
OTHER_SUBSCRIPTION = "0badc0de-0000-4000-8000-000000000000"


def acknowledged(fleet: AzureFleet) -> list[dict[str, Any]]:
    return [r for r in fleet.azure.api.requests() if r["route"] == "acknowledge"]


def saved_after(fleet: AzureFleet, coordinator: Any, seen: float) -> None:
    """What the SIGKILL that follows must not lose: a snapshot of the fold packed at least a second
    after ``seen`` (when the test saw the change on the hub or in status), by when the alert's
    change was tried too (PagerDuty is down: a refused connection fails at once)."""
    from azure.storage.blob import BlobClient

    blob = BlobClient.from_connection_string(fleet.blob.connection_string, "coordinator",
                                             f"{coordinator.name}/snapshot.json.gz")

    def written_at() -> float:
        return float(json.loads(gzip.decompress(blob.download_blob().readall()).splitlines()[0])["writtenAt"])

    wait_for(lambda: written_at() >= seen + 1.0, 60, "a snapshot of the fold since", interval=0.5)


def restart(coordinator: Any) -> None:
    coordinator.kill()
    coordinator.start()
    wait_for(coordinator.ready, 90, "the coordinator to lead again")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("azure-ack-list")
    fleet = AzureFleet(base, topology=TOPOLOGY)
    pager = PagerDutyReceiver(ROUTING_KEY).start()
    record: dict[str, Any] = {"fleet": fleet, "pager": pager}
    coordinator = wrong = None
    try:
        fleet.start([])
        fleet.azure.feed.update({"event_type": WRITE_TYPE})
        coordinator = fleet.azure_coordinator("azure", budgets=(("group", 2), ("zone", 1)),
                                              extra=pagerduty_notify(pager.url))
        coordinator.env["PD_ROUTING_KEY"] = ROUTING_KEY
        coordinator.start()
        record["coordinator"] = coordinator
        wait_for(coordinator.ready, 90, "the coordinator to lead")
        coordinator.cli_ok("pause", "--reason", "both api events first")
        ids = {vm: fleet.add(vm, "Reboot", NotBeforeInSeconds=18000) for vm in ("api_0", "api_1")}
        wait_for(lambda: {p["eventId"] for p in coordinator.get("/v1/status")["pending"]}
                 >= set(ids.values()), 60, "both events pending")
        before = len(acknowledged(fleet))
        coordinator.cli_ok("resume", "--reason", "go")
        wait_for(lambda: set(ids.values()) <= set(fleet.starts()), 60, "both api events to start")
        record["api"], record["api_calls"] = ids, acknowledged(fleet)[before:]
        record["metrics"] = requests.get(f"{coordinator.url}/metrics", timeout=10, proxies={"http": ""}).text

        pager.stop()
        breach = fleet.add("web_0", "Reboot", Resources=["web_0", "web_1", "web_2"], NotBeforeInSeconds=400)
        record["breach"] = breach
        wait_for(lambda: any(d["data"]["Decision"] == "breach" and d["data"]["EventId"] == breach
                             for d in fleet.decisions("azure")), 60, "the breach decision")
        saved_after(fleet, coordinator, time.time())  # a snapshot of the fold with it, the trigger tried
        restart(coordinator)
        pager.start()
        wait_for(lambda: pager.alerts.opened, 30, "the breach's trigger after the restart")
        record["opened_while_open"] = dict(pager.alerts.opened)
        pager.stop()
        wait_for(lambda: breach not in fleet.pending(), 120, "the breaching event to run and end")
        wait_for(lambda: breach not in {p["eventId"] for p in coordinator.get("/v1/status")["pending"]}
                 and not coordinator.get("/v1/status")["started"], 60, "the coordinator to see it end")
        saved_after(fleet, coordinator, time.time())  # the fold with it ended, the resolve tried
        restart(coordinator)
        pager.start()
        wait_for(lambda: pager.alerts.closed, 30, "the breach's resolve after the restart")

        wrong = fleet.azure_coordinator("wrong", subscription=OTHER_SUBSCRIPTION).start()
        record["wrong"] = wrong
        wait_for(wrong.ready, 90, "the second coordinator to lead")
        fleet.add("api_0", "Freeze", NotBeforeInSeconds=18000)  # a feed event the second one refuses
        wait_for(lambda: "all refused" in requests.get(f"{wrong.url}/healthz", timeout=5,
                                                       proxies={"http": ""}).text, 60, "the refusals")
        record["wrong_healthz"] = requests.get(f"{wrong.url}/healthz", timeout=5, proxies={"http": ""}).text
        record["wrong_status"] = wrong.cli_ok("status")
        record["decisions"] = fleet.decisions("azure")
        yield record
    finally:
        shut_down(fleet, coordinator, wrong)
        pager.stop()


def test_two_events_of_one_scale_set_approved_in_one_pass_are_acknowledged_in_one_call(run):
    ids = run["api"]
    [call] = run["api_calls"]
    assert call["path"].lower().endswith("/virtualmachinescalesets/api/providers/microsoft.maintenance/"
                                         "scheduledevents")
    assert sorted(call["event_ids"]) == sorted(ids.values()) and call["status"] == 200
    assert {r["via"] for r in run["fleet"].server.sim.approvals() if r["EventId"] in ids.values()} == {"arm"}


def test_each_event_of_the_list_is_audited(run):
    audits = {d["data"]["EventId"]: d["data"]["ReasonCode"] for d in run["decisions"]
              if d["data"]["Decision"] == "acknowledge"}
    assert {audits[e] for e in run["api"].values()} == {"approved"}


def test_the_feeds_other_type_spelling_is_read(run):
    metrics = run["metrics"]
    assert 'se_forwarder_coordinator_azure_total{what="feed-folded"}' in metrics
    assert 'what="feed-type"' not in metrics


def test_a_breach_alert_lost_to_a_pager_outage_and_a_sigkill_is_triggered_after_the_restart(run):
    key = f"se-forwarder/azure/breach/{run['breach']}"
    assert run["opened_while_open"] == {key: 1}


def test_its_resolve_lost_the_same_way_is_sent_after_the_next_restart(run):
    alerts = run["pager"].alerts
    key = f"se-forwarder/azure/breach/{run['breach']}"
    assert (alerts.opened, alerts.closed.get(key), alerts.open) == ({key: 1}, 1, set())
    assert run["pager"].errors == []


def test_an_all_refused_feed_is_said_by_healthz_status_and_the_page(run):
    assert run["wrong_healthz"].startswith("degraded: the Azure feed's events all refused for ")
    assert "(subscription " in run["wrong_healthz"]
    assert "feed-events  ALL REFUSED" in run["wrong_status"]
    browser = chrome()
    try:
        browser.get(run["wrong"].url + "/")
        wait_for(lambda: browser.execute_script("return window.sePage && window.sePage.renders"), 30,
                 "the first render")
        wait_for(lambda: browser.find_elements("css selector", "#banner .down[data-part='feed-events']"), 15,
                 "the banner")
        text = browser.find_element("css selector", "#banner .down[data-part='feed-events']").text
    finally:
        browser.quit()
    assert text.startswith("feed-events all refused since ") and "every feed event of the last 10 min" in text
