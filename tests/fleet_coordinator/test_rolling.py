"""A rolling maintenance through a real fleet (issue 16's end-to-end acceptance).

The simulator holds an availability set ``web`` (6 VMs, 3 fault domains) and a scale set ``api``
(4 VMs in zones 1 and 2); one agent subprocess per VM sends its events and heartbeats to the Event
Hubs broker and takes signed approvals from its Azurite queue; the coordinator runs as
``se-forwarder coordinator run`` with ``max_unavailable = 1`` per group and per zone, and is
controlled with the ``se-forwarder coordinator`` commands.

One scenario runs once for the module (``rollout``) and each test checks one behaviour of what it
recorded: the simulator's own record of StartRequests, when each event Started and completed, the
decisions on the hub, and what the commands printed.

1. The live coordinator starts and is paused fleet-wide (``coordinator pause``) before any event
   exists. Reboot and Redeploy events for web-0..3 and api_0..2 and a Freeze for web-4 are
   scheduled at once, with 30 minutes of notice, NotBefore a second apart in that order.
2. A shadow coordinator (another name, ``shadow = true``) reads the same hub and publishes its
   first approvals; nothing reaches the simulator. It is stopped.
3. web-3's event is held and the ``api`` group paused; then the fleet is resumed. ``web`` rolls
   (web-0, web-1, web-2) while ``api`` waits.
4. ``api`` is resumed and rolls (api_0 and api_2 share zone 1 and the group budget: one at a time).
5. web-3's event is released and goes last.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.approvals.queue import queue_name
from se_forwarder.fleet.coordinator.api import unnamed
from tests.azurite import needs_blob_and_queue
from tests.support.waiting import wait_for

from .fleet import API_GROUP, API_ROLL, MIN_HEALTHY, STARTED_REAL, WEB_ROLL, Coordinator, Fleet, Timeline

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),  # the scenario runs in the first test's setup: over 3 min on a loaded machine
    needs_blob_and_queue,
]

HELD = "web-3"
FREEZE = "web-4"


def cli_ok(coordinator: Coordinator, *args: str) -> str:
    return coordinator.cli_ok(*args)


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("rolling")
    fleet = Fleet(base)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    record: dict[str, Any] = {"timeline": timeline, "fleet": fleet}
    live = shadow = None
    try:
        fleet.start()
        live = fleet.coordinator("live").start()
        wait_for(live.ready, 60, "the live coordinator to lead")
        record["check"] = live.cli("check", "--imds-url", fleet.server.vm_url("web-0"))  # this VM's IMDS
        record["healthz"] = requests.get(f"{live.url}/healthz", timeout=10, proxies={"http": ""})
        cli_ok(live, "pause", "--reason", "change freeze until the shadow run is reviewed")

        ids: dict[str, str] = {}
        for i, vm in enumerate(WEB_ROLL + [HELD] + API_ROLL):
            kind = "Redeploy" if vm in ("web-1", "api_1") else "Reboot"
            ids[vm] = fleet.add(vm, kind, NotBeforeInSeconds=18000 + 10 * i)
        ids[FREEZE] = fleet.add(FREEZE, "Freeze")
        record["ids"] = ids
        managed = {ids[vm] for vm in WEB_ROLL + [HELD] + API_ROLL}
        wait_for(lambda: {p["eventId"] for p in live.get("/v1/status")["pending"]} >= managed, 60,
             "the live coordinator to see every event")

        shadow = fleet.coordinator("shadow", shadow=True).start()
        wait_for(lambda: len({d["data"]["EventId"] for d in fleet.decisions("shadow")
                          if d["data"]["Decision"] == "approve"}) >= 2, 60, "the shadow's approvals")
        time.sleep(2)  # anything the shadow wrongly sent would show by now
        record["shadow_decisions"] = fleet.decisions("shadow")
        record["requests_after_shadow"] = fleet.server.sim.approvals()
        record["queued_after_shadow"] = {vm: fleet.queue.client(queue_name("se-approvals-{vm_name}", vm))
                                         .peek_messages(max_messages=32)
                                         for vm in WEB_ROLL + API_ROLL}
        assert shadow.stop() == 0
        shadow = None

        cli_ok(live, "hold", ids[HELD], "--reason", "database primary on web-3: fail over first")
        cli_ok(live, "pause", "--scope", API_GROUP, "--reason", "api release in progress")
        cli_ok(live, "resume", "--reason", "shadow run reviewed")
        record["resumed_fleet_at"] = time.time()
        wait_for(lambda: all(ids[vm] in timeline.completed for vm in WEB_ROLL), 90, "web to roll")
        record["web_done_at"] = time.time()
        record["status_text"] = cli_ok(live, "status")
        record["status"] = live.get("/v1/status")
        record["held_started_before_release"] = ids[HELD] in timeline.started
        record["metrics"] = requests.get(f"{live.url}/metrics", timeout=10, proxies={"http": ""}).text

        cli_ok(live, "resume", "--scope", API_GROUP, "--reason", "api release done")
        record["resumed_api_at"] = time.time()
        record["released_at"] = time.time()  # asked: the release takes effect while the CLI returns
        cli_ok(live, "release", ids[HELD], "--reason", "failed over")
        wait_for(lambda: all(ids[vm] in timeline.completed for vm in API_ROLL + [HELD]), 90,
             "api and the released event to roll")
        time.sleep(1)
        record["requests"] = fleet.server.sim.approvals()
        record["live_decisions"] = fleet.decisions("live")
        record["freeze_pending"] = ids[FREEZE] in fleet.pending()
        yield record
    finally:
        for c in (shadow, live):
            if c is not None and c.alive():
                c.stop()
        fleet.stop()
        for c in (shadow, live):
            if c is not None and c.log.exists():
                print(f"--- {c.name}-{c.instance} log (end) ---\n" + c.log.read_text()[-4000:])


def started_requests(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["EventId"]: r for r in record["requests"] if r["started"]}


def approvals(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in decisions if d["data"]["Decision"] == "approve"]


def test_every_managed_event_is_started_early_by_an_approval(rollout: dict[str, Any]) -> None:
    ids = rollout["ids"]
    started = started_requests(rollout)
    for vm in WEB_ROLL + API_ROLL + [HELD]:
        assert ids[vm] in started, f"{vm}'s event was not started by a StartRequests"


def test_never_two_started_at_once_in_a_group(rollout: dict[str, Any]) -> None:
    ids, timeline = rollout["ids"], rollout["timeline"]
    for group in (WEB_ROLL + [HELD], API_ROLL):
        spans = sorted((timeline.started[ids[vm]], timeline.completed[ids[vm]], vm) for vm in group)
        for (_s1, end1, vm1), (start2, _e2, vm2) in zip(spans, spans[1:], strict=False):
            assert start2 >= end1, f"{vm2} started while {vm1} was still Started"


def test_each_next_start_waits_for_completion_and_min_healthy(rollout: dict[str, Any]) -> None:
    ids, timeline = rollout["ids"], rollout["timeline"]
    for group in (WEB_ROLL + [HELD], API_ROLL):
        spans = sorted((timeline.started[ids[vm]], timeline.completed[ids[vm]], vm) for vm in group)
        for (_s1, end1, vm1), (start2, _e2, vm2) in zip(spans, spans[1:], strict=False):
            # the agent reports completion after its next poll; min_healthy counts from that report
            assert start2 - end1 >= MIN_HEALTHY - 0.2, \
                f"{vm2} started {start2 - end1:.1f} s after {vm1} completed (min_healthy {MIN_HEALTHY} s)"


def test_earliest_not_before_goes_first_within_a_group(rollout: dict[str, Any]) -> None:
    ids, timeline = rollout["ids"], rollout["timeline"]
    order = sorted(WEB_ROLL, key=lambda vm: timeline.started[ids[vm]])
    assert order == WEB_ROLL
    order = sorted(API_ROLL, key=lambda vm: timeline.started[ids[vm]])
    assert order == API_ROLL


def test_events_start_early_not_at_their_not_before(rollout: dict[str, Any]) -> None:
    ids, timeline = rollout["ids"], rollout["timeline"]
    for vm in WEB_ROLL + API_ROLL:
        # 30 min of notice in real time; the whole rollout takes well under two minutes
        assert timeline.started[ids[vm]] - rollout["resumed_fleet_at"] < 300
    assert max(timeline.completed.values()) - rollout["resumed_fleet_at"] < 120
    assert STARTED_REAL > 0


def test_a_freeze_outside_manage_is_left_alone(rollout: dict[str, Any]) -> None:
    freeze = rollout["ids"][FREEZE]
    assert freeze not in {r["EventId"] for r in rollout["requests"]}
    assert rollout["freeze_pending"]
    assert freeze not in {d["data"]["EventId"] for d in approvals(rollout["live_decisions"])}


def test_a_paused_scope_gets_nothing(rollout: dict[str, Any]) -> None:
    ids, timeline = rollout["ids"], rollout["timeline"]
    for vm in API_ROLL:
        assert timeline.started[ids[vm]] >= rollout["resumed_api_at"], f"{vm} started while api was paused"
    pauses = [d for d in rollout["live_decisions"] if d["data"]["Decision"] == "pause"]
    assert {d["subject"] for d in pauses} == {"fleet", API_GROUP}
    actor = unnamed(rollout["fleet"].token_file.read_text().strip())  # the token table's one entry
    assert all(d["data"]["Actor"] == actor and d["data"]["Reason"] for d in pauses)


def test_a_held_event_is_not_approved_until_released(rollout: dict[str, Any]) -> None:
    ids, timeline = rollout["ids"], rollout["timeline"]
    assert not rollout["held_started_before_release"]
    assert timeline.started[ids[HELD]] >= rollout["released_at"]
    held = rollout["status"]["held"]
    assert [h["eventId"] for h in held] == [ids[HELD]]


def test_one_approval_message_per_decision(rollout: dict[str, Any]) -> None:
    made = approvals(rollout["live_decisions"])
    assert len({d["id"] for d in made}) == len(made), "an approval decision was published twice"
    per_event: dict[str, int] = {}
    for r in rollout["requests"]:
        per_event[r["EventId"]] = per_event.get(r["EventId"], 0) + 1
    assert max(per_event.values()) == 1, f"an event was asked to start more than once: {per_event}"


def test_shadow_mode_sends_nothing(rollout: dict[str, Any]) -> None:
    assert rollout["requests_after_shadow"] == []
    assert all(list(messages) == [] for messages in rollout["queued_after_shadow"].values())


def test_shadow_mode_publishes_the_decisions_the_live_coordinator_then_makes(rollout: dict[str, Any]) -> None:
    ids = rollout["ids"]
    shadow = approvals(rollout["shadow_decisions"])
    assert shadow and all(d["data"]["Shadow"] is True for d in shadow)
    assert {d["data"]["EventId"] for d in shadow} == {ids["web-0"], ids["api_0"]}
    live_first = {d["data"]["EventId"]: d["data"]["Target"]["name"]
                  for d in approvals(rollout["live_decisions"])
                  if d["data"]["EventId"] in (ids["web-0"], ids["api_0"])}
    assert {d["data"]["EventId"]: d["data"]["Target"]["name"] for d in shadow} == live_first


def test_status_prints_budgets_waiting_reasons_and_unwatched_vms(rollout: dict[str, Any]) -> None:
    text = rollout["status_text"]
    assert "SCOPES (budget use)" in text and "PENDING EVENTS" in text and "VMS NOT WATCHED" in text
    held = rollout["ids"][HELD]
    assert held in text and "held" in text
    assert "paused" in text and API_GROUP in text
    assert json.dumps(rollout["status"]["fleet"])  # the API's document behind it
    assert rollout["status"]["fleet"]["vms"] == 10


def test_check_reaches_every_part_of_a_running_coordinator(rollout: dict[str, Any]) -> None:
    check = rollout["check"]
    assert check.returncode == 0, check.stdout + check.stderr
    lines = check.stdout.splitlines()
    for part in ("config", "signing key", "api token", "attestation", "event hub", "storage", "queues",
                 "running coordinator"):
        assert any(line.startswith("ok") and f" {part}: " in line for line in lines), (part, lines)


def test_healthz_and_metrics_follow_the_agent_conventions(rollout: dict[str, Any]) -> None:
    assert rollout["healthz"].status_code == 200 and rollout["healthz"].text.startswith("ok: leader")
    metrics = rollout["metrics"]
    assert 'se_forwarder_coordinator_folded_total{type="heartbeat"}' in metrics
    assert "se_forwarder_coordinator_sent_total 3.0" in metrics  # web-0, web-1, web-2 so far
    assert "se_forwarder_coordinator_acting 1.0" in metrics
