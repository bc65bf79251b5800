"""Rollouts that wait for real health (issue 32), end to end with real parts, judged from the
simulator's record.

The simulator holds an availability set ``app`` (app-0..2, each agent with an HTTP ``[health]``
probe against a local HTTP server this test controls) and an availability set ``db`` (db-0 with an
agent, db-1 without: Azure's Resource Health is its only word). It plays Azure's side too (Resource
Graph, Event Grid's feed with Resource Health's ``AvailabilityStatusChanged``). ``coordinator run``
has ``[azure]``, ``free_slot = "recovered"`` and ``max_unavailable = 1`` per group.

One scenario runs once for the module (``run``); each test checks one behaviour of what it recorded:

1. ``recovered``: Reboots for app-0 and app-1 (app-0's NotBefore first). When app-0's event Started,
   its application goes down (its probe answers 503) and comes back ``PROBE_FAILS_FOR`` seconds
   after the event ended: app-1 waits that long.
2. A probe that fails with no event: app-2's application goes down; a Reboot for app-0 waits until
   it is back.
3. An agentless VM: Resource Health says db-1 is Unavailable (no event explains it); db-0's Reboot
   waits until Resource Health says Available again.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.simulator.topology import Topology
from tests.azurite import needs_blob_and_queue
from tests.support.config import toml_value
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

from .azure_fleet import AzureFleet
from .fleet import Timeline, shut_down

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),
    needs_blob_and_queue,
]

PROBE_FAILS_FOR = 14.0  # s app-0's application stays down after its event ended (min_healthy: 3 s)
HELD_FOR = 4.0  # s a test watches an event wait (four decision passes) before the cause goes away
TOPOLOGY = Topology.build(availability_sets=[
    {"name": "app", "vms": 3, "fault_domains": 3},
    {"name": "db", "vms": 2, "fault_domains": 2, "agentless": ["db-1"]},
])
APP = ["app-0", "app-1", "app-2"]
AGENTS = [*APP, "db-0"]


class Application(ThreadingHTTPServer):
    """Each app VM's application as its probe sees it: ``/app-N`` answers 200, or 503 while down."""

    def __init__(self) -> None:
        self.down: set[str] = set()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805 - the server is ``self`` here
                code = 503 if handler.path.strip("/") in self.down else 200
                handler.send_response(code)
                handler.send_header("Content-Length", "0")
                handler.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.daemon_threads = True
        threading.Thread(target=self.serve_forever, name="application", daemon=True).start()

    def probe(self, vm: str) -> str:
        return "\n".join([
            "[health]", "interval = 1", "timeout = 0.5", "healthy_threshold = 1", "unhealthy_threshold = 1",
            "[[health.probes]]", 'type = "http"', 'name = "web"',
            f"url = {toml_value(f'http://127.0.0.1:{self.server_address[1]}/{vm}')}",
        ]) + "\n"


def set_health(fleet: AzureFleet, vm: str, state: str | None) -> float:
    """Resource Health's word on ``vm`` through the simulator's control route; when it was set."""
    r = requests.post(f"{fleet.server.url}/control/health", json={"vm": vm, "availabilityState": state},
                      timeout=10, proxies={"http": ""})
    r.raise_for_status()
    return time.time()


def deferred(fleet: AzureFleet, event_id: str) -> list[dict[str, Any]]:
    return [d["data"] for d in fleet.decisions("recovery")
            if d["data"]["Decision"] == "defer" and d["data"]["EventId"] == event_id]


def held_for_health(coordinator: Any, vm: str) -> bool:
    """``vm`` is unhealthy or recovering on the fleet page's groups, and status holds it for that."""
    state = next(v["state"] for g in coordinator.get("/v1/groups") for v in g["vms"] if v["name"] == vm)
    return state in ("unhealthy", "recovering") and any(
        h["name"] == vm and h["reason"] == state for h in coordinator.get("/v1/status")["health"])


def app_goes_down_with_its_event(app: Application, timeline: Timeline, event_id: str,
                                 record: dict[str, Any]) -> None:
    """app-0's application goes down when its event Started and is back PROBE_FAILS_FOR seconds
    after the event ended (a service slow to start after the reboot), and not before the test has
    read the coordinator's API and ``status`` while it is held (a loaded machine may take most of
    those seconds to show it held)."""
    wait_for(lambda: event_id in timeline.started, 120, "app-0's event to start")
    app.down.add("app-0")
    ended = wait_for(lambda: timeline.completed.get(event_id), 120, "app-0's event to end")
    time.sleep(max(0.0, ended + PROBE_FAILS_FOR - time.time()))
    record["read_while_held"].wait(60)
    app.down.discard("app-0")
    record["back_at"] = time.time()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("recovery")
    app = Application()
    fleet = AzureFleet(base, topology=TOPOLOGY)
    for vm in APP:
        fleet.agent_extra[vm] = app.probe(vm)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    record: dict[str, Any] = {"fleet": fleet, "timeline": timeline, "ids": {},
                              "read_while_held": threading.Event()}
    ids = record["ids"]
    coordinator = None
    try:
        fleet.start(AGENTS)
        coordinator = fleet.azure_coordinator("recovery", acknowledge=False, free_slot="recovered",
                                              recover_timeout="5m").start()
        wait_for(coordinator.ready, 90, "the coordinator to lead")
        wait_for(lambda: coordinator.get("/v1/status")["fleet"]["watched"] == 5, 90,
                 "every VM watched, by its agent or (db-1) by Azure")

        # 1. recovered
        coordinator.cli_ok("pause", "--reason", "schedule first")
        ids["first"] = fleet.add("app-0", "Reboot")
        ids["next"] = fleet.add("app-1", "Reboot", NotBeforeInSeconds=18000 + 600)
        wait_for(lambda: {p["eventId"] for p in coordinator.get("/v1/status")["pending"]}
                 >= set(ids.values()), 60, "the coordinator to see both events")
        watcher = threading.Thread(target=app_goes_down_with_its_event,
                                   args=(app, timeline, ids["first"], record), daemon=True)
        watcher.start()
        coordinator.cli_ok("resume", "--reason", "go")
        wait_for(lambda: timeline.completed.get(ids["first"]), 120, "app-0's event to end")
        wait_for(lambda: held_for_health(coordinator, "app-0"), PROBE_FAILS_FOR, "app-0 held for its health")
        record["groups_held"] = coordinator.get("/v1/groups")
        record["status_held"] = coordinator.get("/v1/status")
        record["status_held_text"] = coordinator.cli_ok("status")
        record["read_while_held"].set()
        wait_for(lambda: ids["next"] in timeline.completed, 120, "app-1's event to run once app-0 is back")
        watcher.join(10)

        # 2. a failing probe, no event
        wait_for(lambda: not coordinator.get("/v1/status")["health"], 60, "app-1 to be seen recovered")
        app.down.add("app-2")
        wait_for(lambda: any(h["name"] == "app-2" and h["reason"] == "unhealthy"
                             for h in coordinator.get("/v1/status")["health"]), 30, "app-2 counted down")
        ids["probe"] = fleet.add("app-0", "Reboot")
        wait_for(lambda: deferred(fleet, ids["probe"]), 30, "app-0's second event to wait")
        time.sleep(HELD_FOR)
        record["probe_back_at"] = time.time()
        app.down.discard("app-2")
        wait_for(lambda: ids["probe"] in timeline.completed, 90, "app-0's second event to run")

        # 3. an agentless VM Azure reports Unavailable
        record["unavailable_at"] = set_health(fleet, "db-1", "Unavailable")
        wait_for(lambda: any(h["name"] == "db-1" and h["reason"] == "azure-unavailable"
                             for h in coordinator.get("/v1/status")["health"]), 30, "db-1 counted down")
        ids["agentless"] = fleet.add("db-0", "Reboot")
        wait_for(lambda: deferred(fleet, ids["agentless"]), 30, "db-0's event to wait")
        time.sleep(HELD_FOR)
        record["status_agentless"] = coordinator.get("/v1/status")
        record["available_at"] = set_health(fleet, "db-1", "Available")
        wait_for(lambda: ids["agentless"] in timeline.completed, 90, "db-0's event to run")

        record["starts"] = fleet.starts()
        record["recovered"] = fleet.hub("com.azure.scheduledevents.recovered")
        yield record
    finally:
        shut_down(fleet, coordinator)
        app.shutdown()
        app.server_close()


def test_with_recovered_the_next_vm_starts_only_after_the_last_ones_probe_passes(run):
    timeline, ids = run["timeline"], run["ids"]
    ended, back = timeline.completed[ids["first"]], run["back_at"]
    assert back >= ended + PROBE_FAILS_FOR - 0.5
    assert timeline.started[ids["next"]] > back  # the group's only slot was held until then
    assert run["starts"][ids["next"]] > run["starts"][ids["first"]]
    assert "budget" in [d["ReasonCode"] for d in deferred(run["fleet"], ids["next"])]


def test_while_held_status_says_which_vm_holds_the_slot_and_why(run):
    states = {vm["name"]: vm["state"] for g in run["groups_held"] for vm in g["vms"]}
    held = {h["name"]: h for h in run["status_held"]["health"]}
    assert states["app-0"] in ("unhealthy", "recovering"), (states, run["status_held_text"])
    assert held.get("app-0", {}).get("reason") == states["app-0"], run["status_held_text"]
    assert "app-0" in run["status_held_text"] and "HEALTH" in run["status_held_text"]


def test_the_agent_reported_recovered_once_its_probe_passed(run):
    [first] = [e for e in run["recovered"] if e["subject"] == run["ids"]["first"]]
    assert first["data"]["Health"]["Verdict"] == "healthy"
    assert first["data"]["RecoveredAfterSeconds"] >= PROBE_FAILS_FOR - 2


def test_a_probe_that_fails_with_no_event_keeps_every_peer_of_its_budget_1_group_waiting(run):
    event_id = run["ids"]["probe"]
    assert run["timeline"].started[event_id] > run["probe_back_at"]
    assert deferred(run["fleet"], event_id)[0]["ReasonCode"] == "budget"


def test_an_agentless_vm_azure_reports_unavailable_counts_down_and_available_frees_it(run):
    event_id = run["ids"]["agentless"]
    assert run["timeline"].started[event_id] > run["available_at"]
    assert deferred(run["fleet"], event_id)[0]["ReasonCode"] == "budget"
    [db1] = [h for h in run["status_agentless"]["health"] if h["name"] == "db-1"]
    assert db1["detail"] == "Azure Resource Health says Unavailable"


def test_an_unknown_free_slot_stops_the_coordinator_with_one_line(tmp_path):
    config = tmp_path / "coordinator.toml"
    key, token = tmp_path / "signing.key", tmp_path / "api.token"
    key.write_text("unused: the policy is read first\n")
    token.write_text("t" * 32 + "\n")
    config.write_text("\n".join([
        "[signing]", f"key_file = {toml_value(str(key))}",
        "[eventhub]", 'fully_qualified_namespace = "ns.servicebus.windows.net"',
        "[storage]", 'account_url = "https://a.blob.core.windows.net"',
        "[queues]", 'account_url = "https://a.queue.core.windows.net"',
        "[api]", f"token_file = {toml_value(str(token))}",
        "[policy]", 'free_slot = "eventually"']) + "\n")
    done = subprocess.run([sys.executable, "-m", "se_forwarder", "coordinator", "run", "--config",
                           str(config)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "se-forwarder: error: policy.free_slot: 'eventually' is not one of min_healthy, recovered"]
