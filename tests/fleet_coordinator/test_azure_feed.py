"""Azure's own feed as a second, authoritative input (issue 25), end to end with real parts.

The simulator holds an availability set ``db`` (6 VMs over 3 fault domains; db-4 and db-5 run no
agent) and a uniform scale set ``api`` (2 VMs). It plays Azure's side too: ARM over HTTPS with its
test CA (Resource Graph, ``acknowledge``, instance views; the ARM token from its IMDS) and Event
Grid's feed to the *Azure feed hub*, a second broker whose key no agent has. Agents run on the
other six VMs; db-3's agent lies (its IMDS is made to say fault domain 2 and scale set ``fake``).
``se-forwarder coordinator run`` has ``[azure]`` with ``acknowledge = true`` and a 5 s catch-up,
``max_unavailable = 1`` per group.

One scenario runs once for the module (``run``), and each test checks one behaviour of what it
recorded:

1. The coordinator starts, catches up (Resource Graph) and is paused. A Reboot for each db VM
   (NotBefore a few seconds apart, db-0 first) and one for api_0 are scheduled; the feed drops
   db-5's first notice, so only Resource Graph tells of it.
2. The fleet is resumed. When db-0's event has Started, db-2's agent is killed (SIGKILL).
3. Everything rolls; then, with the acknowledge role taken away, one more event for db-4 is
   refused by ARM (403) and waits for its next try; the role comes back 5 s later, and the event
   starts through acknowledge; then a VM's send right is tried against the feed hub, and Azure's
   event type is published to the agents' hub; the page is opened in headless Chromium.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.fleet.coordinator.decide.arm_path import RETRY
from se_forwarder.simulator.event_grid import EVENT_TYPE
from tests.azurite import needs_blob_and_queue
from tests.fleet_page.browser import chrome, console_errors
from tests.support.waiting import wait_for

from .azure_fleet import AGENTLESS, API, DB, DB_GROUP, LIAR, PREFIX, AzureFleet
from .fleet import MIN_HEALTHY, Timeline, shut_down, utc

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(480),
    needs_blob_and_queue,
]

KILLED = "db-2"
ROLE_BACK = 5.0  # s after the first refusal's defer until the acknowledge role reaches ARM again
FAKE = "FAKE0000-0000-4000-8000-000000000000"


def azure_event(event_id: str, vm: str) -> dict[str, Any]:
    """A ScheduledEventEmitted CloudEvent as Event Grid would deliver it, for ``vm``."""
    sub, rg = PREFIX.split("/")
    rid = (f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}"
           f"/providers/Microsoft.Maintenance/scheduledevents/{event_id}")
    return {"specversion": "1.0", "id": f"eg-{event_id}", "source": f"/subscriptions/{sub}",
            "subject": rid, "type": EVENT_TYPE, "time": "2030-01-01T00:00:00Z",
            "data": {"resourceInfo": {"id": rid, "name": event_id, "properties": {
                "EventId": event_id, "EventStatus": "Started", "EventType": "Reboot", "Resources": [vm],
                "NotBefore": "", "EventSource": "Platform"}}}}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("azure-feed")
    fleet = AzureFleet(base)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    record: dict[str, Any] = {"fleet": fleet, "timeline": timeline}
    coordinator = None
    try:
        fleet.start([vm for vm in DB + API if vm not in AGENTLESS and vm != LIAR])
        fleet.lie(LIAR, platformFaultDomain="2", vmScaleSetName="fake")
        fleet.start_agent(LIAR)
        coordinator = fleet.azure_coordinator("azure").start()
        record["coordinator"] = coordinator
        wait_for(coordinator.ready, 90, "the coordinator to lead")
        wait_for(lambda: (lambda s: s["fleet"]["watched"] == 8 and s["azure"]
                          and len(s["azure"]["findings"]) >= 2)(coordinator.get("/v1/status")),
                 60, "every VM watched, by its agent or by Azure, and the liar's claims seen")
        record["check"] = coordinator.cli("check")
        coordinator.cli_ok("pause", "--reason", "schedule the night's maintenance first")

        ids: dict[str, str] = {}
        for i, vm in enumerate(DB):
            if vm == "db-5":
                fleet.azure.feed.update({"drop_next": 1})  # its first notice never reaches the feed hub
            ids[vm] = fleet.add(vm, "Reboot", NotBeforeInSeconds=18000 + 10 * i)
        ids["api_0"] = fleet.add("api_0", "Reboot", NotBeforeInSeconds=18000)
        record["ids"] = ids
        wait_for(lambda: {p["eventId"] for p in coordinator.get("/v1/status")["pending"]}
                 >= set(ids.values()), 60, "the coordinator to see every event (db-5's from Resource Graph)")
        record["status_text"] = coordinator.cli_ok("status")
        record["status_paused"] = coordinator.get("/v1/status", all="1")
        record["pause_by_name"] = coordinator.cli_ok("pause", "--scope", "group:db", "--reason", "by name")
        coordinator.cli_ok("resume", "--scope", "group:db", "--reason", "by its name")

        coordinator.cli_ok("resume", "--reason", "go")
        wait_for(lambda: ids["db-0"] in timeline.started, 60, "db-0's event to start")
        fleet.agents[KILLED].kill()
        record["killed_at"] = time.time()
        wait_for(lambda: all(ids[vm] in timeline.completed for vm in [*DB, "api_0"]), 240,
                 "everything to roll")
        record["requests"] = fleet.server.sim.approvals()

        fleet.azure.update_settings({"roles": {"acknowledge": False}})
        ids["refused"] = fleet.add("db-4", "Reboot", NotBeforeInSeconds=18000)
        wait_for(lambda: any(d["data"]["Decision"] == "defer" and d["data"]["EventId"] == ids["refused"]
                             and d["data"]["ReasonCode"] == "acknowledge-refused"
                             for d in fleet.decisions("azure")),
                 60, "the approval ARM refused to wait for its next try")
        record["requests_after_403"] = fleet.server.sim.approvals()
        record["status_refused"] = coordinator.get("/v1/status")
        record["status_refused_text"] = coordinator.cli_ok("status")
        record["page_next_try"] = next_try_on_page(coordinator, ids["refused"])
        fleet.azure.api.give_back(["acknowledge"], ROLE_BACK)  # the role reaches ARM a few seconds later
        record["role_back"] = time.time() + ROLE_BACK
        wait_for(lambda: ids["refused"] in fleet.starts(), 90, "the event to start once the role is back")
        wait_for(lambda: ids["refused"] in timeline.completed, 60, "it to end, so the feed is quiet")
        time.sleep(2)  # Event Grid's last notices of it on the feed hub

        record["trust"] = trust_boundary(fleet, coordinator)
        record["decisions"] = fleet.decisions("azure")
        record["status"] = coordinator.get("/v1/status", all="1")
        record["groups"] = coordinator.get("/v1/groups")
        record["metrics"] = requests.get(f"{coordinator.url}/metrics", timeout=10, proxies={"http": ""}).text
        yield record
    finally:
        shut_down(fleet, coordinator)


def next_try_on_page(coordinator: Any, event_id: str) -> str:
    """The pending card's line of when acknowledge is tried again, as the page shows it."""
    browser = chrome()
    try:
        browser.get(coordinator.url + "/")
        selector = f".card.event[data-event='{event_id}'] .next-try"
        wait_for(lambda: browser.find_elements("css selector", selector), 30, "the next try on the page")
        return str(browser.find_element("css selector", selector).text)
    finally:
        browser.quit()


def trust_boundary(fleet: AzureFleet, coordinator: Any) -> dict[str, Any]:
    """A VM's send right (the agents' hub key) against the feed hub, and Azure's event type published
    to the agents' hub in both of Event Grid's forms."""
    from azure.eventhub import EventData, EventHubProducerClient

    out: dict[str, Any] = {"feed_before": sum(1 for _ in fleet.feed.all_messages())}
    stolen = fleet.feed.connection_string(key=fleet.broker.key)  # the key every agent has
    producer = EventHubProducerClient.from_connection_string(stolen, retry_total=0)
    try:
        batch = producer.create_batch()
        batch.add(EventData(json.dumps([azure_event(FAKE, "db-1")])))
        producer.send_batch(batch)
        out["sent_to_feed"] = "sent"
    except Exception as exc:  # noqa: BLE001 - what the test asserts on
        out["sent_to_feed"] = type(exc).__name__
    finally:
        producer.close()
    out["feed_after"] = sum(1 for _ in fleet.feed.all_messages())
    agents = EventHubProducerClient.from_connection_string(fleet.broker.connection_string())
    try:
        batch = agents.create_batch()
        batch.add(EventData(json.dumps([azure_event(FAKE, "db-1")])))
        batch.add(EventData(json.dumps(azure_event(FAKE, "db-0"))))
        agents.send_batch(batch)
    finally:
        agents.close()
    wait_for(lambda: coordinator.get("/v1/state")["refused"].get("azure", 0) >= 2, 30,
             "the coordinator to refuse both")
    out["state"] = coordinator.get("/v1/state")
    return out


def started_by(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["EventId"]: r for r in record["requests"] if r["started"]}


def test_agentless_vms_events_are_approved_through_acknowledge(run):
    started = started_by(run)
    for vm in AGENTLESS:
        assert started[run["ids"][vm]]["via"] == "arm", vm
    for vm in ("db-0", "db-1", LIAR, "api_0"):
        assert started[run["ids"][vm]]["via"] == "imds", vm


def test_an_event_the_feed_dropped_is_seen_through_resource_graph(run):
    fleet, event_id = run["fleet"], run["ids"]["db-5"]
    emitted = [e for e in fleet.azure.feed.emitted if e["data"]["resourceInfo"]["name"] == event_id]
    assert emitted[0]["data"]["resourceInfo"]["properties"]["EventStatus"] == "Scheduled"
    on_hub = [e["data"]["resourceInfo"]["properties"]["EventStatus"] for e in fleet.feed_events(event_id)]
    assert on_hub and "Scheduled" not in on_hub  # dropped: the coordinator learnt of it from Resource Graph
    assert event_id in {p["eventId"] for p in run["status_paused"]["pending"]}
    assert event_id in started_by(run)


def test_max_unavailable_1_held_throughout_the_group(run):
    ids, timeline = run["ids"], run["timeline"]
    spans = sorted((timeline.started[ids[vm]], timeline.completed[ids[vm]], vm) for vm in DB)
    for (_s1, end1, vm1), (start2, _e2, vm2) in zip(spans, spans[1:], strict=False):
        assert start2 - end1 >= MIN_HEALTHY - 0.2, f"{vm2} started {start2 - end1:.1f} s after {vm1} ended"


def test_a_killed_agents_vm_is_approved_through_acknowledge(run):
    request = started_by(run)[run["ids"][KILLED]]
    assert request["via"] == "arm"
    approvals = [d for d in run["decisions"] if d["data"]["Decision"] == "approve"
                 and d["data"]["EventId"] == run["ids"][KILLED]]
    assert approvals[-1]["data"]["Via"] == "arm"


def test_every_approval_through_arm_is_audited_with_what_azure_answered(run):
    acks = {d["data"]["EventId"]: d["data"]["ReasonCode"] for d in run["decisions"]
            if d["data"]["Decision"] == "acknowledge"}
    for vm in [*AGENTLESS, KILLED]:
        assert acks[run["ids"][vm]] == "approved", vm


def test_a_403_from_acknowledge_is_not_an_approval_is_audited_and_tried_again(run):
    event_id = run["ids"]["refused"]
    assert event_id not in {r["EventId"] for r in run["requests_after_403"]}
    ordered = sorted(run["decisions"], key=lambda d: d["time"])
    mine = [d["data"] for d in ordered if d["data"]["EventId"] == event_id]
    # a pass that finds a peer counted down for a moment (a heartbeat late on a loaded machine) may
    # defer the try again for the budget: that is a deferral, not a step of the refusal's path
    made = [step for step in ((d["Decision"], d["ReasonCode"]) for d in mine) if step != ("defer", "budget")]
    first = made.index(("approve", "fits"))
    assert made[first:first + 5] == [("approve", "fits"), ("acknowledge", "forbidden"),
                                     ("defer", "acknowledge-refused"), ("approve", "retry-rejected"),
                                     ("acknowledge", "approved")]
    [forbidden] = [d for d in mine if d["ReasonCode"] == "forbidden"]
    assert "ARM answered 403: AuthorizationFailed" in forbidden["Reason"]


def test_a_403_then_the_role_given_back_starts_the_event_within_the_documented_retry_time(run):
    """docs/azure-feed.md: the first try again comes 30 s after the refusal (arm_path.RETRY)."""
    event_id = run["ids"]["refused"]
    refused = [utc(d["time"]) for d in run["decisions"] if d["data"]["EventId"] == event_id
               and d["data"]["Decision"] == "acknowledge" and d["data"]["ReasonCode"] == "forbidden"]
    started = run["fleet"].starts()[event_id]
    [request] = [r for r in run["fleet"].requests_for(event_id) if r["started"]]
    assert request["via"] == "arm"
    assert run["role_back"] <= started <= refused[0] + RETRY.delay(1) + 5  # a pass, a publish, one call


def test_the_next_try_of_a_refused_acknowledge_is_in_status(run):
    [pending] = [p for p in run["status_refused"]["pending"] if p["eventId"] == run["ids"]["refused"]]
    assert pending["reasonCode"] == "acknowledge-refused" and pending["nextTryUtc"]
    assert f"next try at {pending['nextTryUtc'][:10]}" in pending["reason"]
    assert "acknowledge-refused: ARM refused the acknowledge 1 time(s)" in run["status_refused_text"]
    assert run["page_next_try"].startswith("next acknowledge in ")
    assert run["page_next_try"].endswith(f"({pending['nextTryUtc']})")


def test_a_lying_agent_is_overruled_by_azures_topology_and_shown(run):
    findings = {(f["name"], f["field"], f["agent"], f["azure"]) for f in run["status"]["azure"]["findings"]}
    assert {(LIAR, "fault domain", "2", "0"), (LIAR, "scale set", "fake", "")} <= findings
    vms = {vm["name"]: (g["group"], vm["faultDomain"]) for g in run["groups"] for vm in g["vms"]}
    assert vms[LIAR] == (f"avset/{PREFIX}/db", "0")  # as Azure places it
    assert {g["group"] for g in run["groups"]} == {f"avset/{PREFIX}/db", f"vmss/{PREFIX}/api"}
    assert "fake" not in json.dumps(run["status"]["scopes"])
    assert [vm["findings"] for g in run["groups"] for vm in g["vms"] if vm["name"] == LIAR] == [
        ["fault domain: agent 2, Azure 0", "scale set: agent fake, Azure -"]]
    assert f"{LIAR}: fault domain: agent says 2, Azure says 0" in run["status_text"]


def test_groups_carry_their_azure_names_in_status_and_scope(run):
    scopes = {s["scope"] for s in run["status_paused"]["scopes"]}
    assert DB_GROUP in scopes and f"group:vmss/{PREFIX}/api" in scopes
    assert DB_GROUP in run["pause_by_name"]
    assert "agentless (Azure lists them, no agent reports): db-4, db-5" in run["status_text"]


def test_the_feed_hub_is_the_trust_boundary(run):
    trust = run["trust"]
    assert trust["sent_to_feed"] != "sent" and trust["feed_after"] == trust["feed_before"]
    assert trust["state"]["refused"]["azure"] == 2
    assert FAKE.lower() not in json.dumps(run["status"]).lower()


def test_check_reaches_the_feed_hub_resource_graph_and_the_acknowledge_permission(run):
    check = run["check"]
    assert check.returncode == 0, check.stdout + check.stderr
    lines = check.stdout.splitlines()
    for part in ("azure feed hub", "resource graph", "acknowledge"):
        assert [line for line in lines if line.startswith("ok") and f" {part}: " in line], (part, lines)


def test_metrics_count_azures_input(run):
    metrics = run["metrics"]
    assert 'se_forwarder_coordinator_azure_total{what="feed-folded"}' in metrics
    assert 'se_forwarder_coordinator_azure_total{what="acknowledge-forbidden"} 1.0' in metrics
    assert 'se_forwarder_coordinator_refused_total{reason="azure"} 2.0' in metrics
    assert "se_forwarder_coordinator_azure_agentless 2.0" in metrics


def test_the_page_marks_agentless_vms_and_azure_agent_disagreements(run):
    browser = chrome()
    try:
        browser.get(run["coordinator"].url + "/")
        wait_for(lambda: browser.execute_script("return window.sePage && window.sePage.renders"), 30,
                 "the first render")
        marks = browser.execute_script(
            "const o = {}; for (const n of document.querySelectorAll('.group .vm[data-vm]')) "
            "o[n.dataset.vm] = [n.dataset.agentless || '', n.dataset.finding || '']; return o;")
        assert {vm for vm, (agentless, _) in marks.items() if agentless} == set(AGENTLESS)
        assert "fault domain: agent 2, Azure 0" in marks[LIAR][1]
        assert "2 agentless" in browser.find_element("id", "fleet-counts").text
        assert console_errors(browser) == []
    finally:
        browser.quit()


def test_an_approval_through_acknowledge_gets_no_queue_message_and_no_sent_record(run):
    decisions = [d["data"] for d in run["decisions"]]
    through_arm = {(d["EventId"], d["Attempt"]) for d in decisions if d["Decision"] == "approve"
                   and d["Via"] == "arm"}
    sent = {(d["EventId"], d["Attempt"]) for d in decisions if d["Decision"] == "sent"}
    assert through_arm and not through_arm & sent
    assert {(d["EventId"], d["Attempt"]) for d in decisions if d["Decision"] == "approve"
            and d["Via"] == "queue"} <= sent  # every approval through a queue did get its record


def test_status_and_metrics_say_whether_the_feed_hub_and_arm_answer(run):
    service = run["status"]["service"]
    reach = service["reachability"]
    assert reach["azure-feed"]["reachable"] and reach["arm"]["reachable"] and reach["arm"]["lastSuccess"]
    assert any(p.startswith("feed:azure-feed/") for p in service["positions"])  # saved with the snapshot
    assert 'se_forwarder_coordinator_reachable{part="arm"} 1.0' in run["metrics"]
    assert 'se_forwarder_coordinator_reachable{part="azure-feed"} 1.0' in run["metrics"]
