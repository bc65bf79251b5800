"""Gates and maintenance windows through a real fleet, judged from the simulator's own record.

One fleet for the module: the simulator, agents on web-0..2 and api_0..1, the Event Hubs broker,
Azurite, and a real Alertmanager (Debian's ``prometheus-alertmanager``, on loopback, alerts posted
to its API v2). Two coordinators run side by side, as ``se-forwarder coordinator run``, each
managing one event type (``[policy] manage``), so that neither approves the other's events; the
gated one starts once the windowed one has deferred its events:

1. ``windowed`` (Redeploys) has one maintenance window for the fleet, in Europe/Berlin, opening
   45 s after it starts: web-1's and web-2's events wait outside it and roll once it opens, while
   the gated coordinator's part runs.
2. ``gated`` (Reboots) has an ``alertmanager`` gate for the ``api`` group (``service="api"``),
   asked every second. While ``HighErrorRate{service="api"}`` fires, api_0's event waits (its
   deferral names the gate and the alert) and web-0's, outside the gate's scope, runs; once the
   alert resolves, api_0's runs. Then Alertmanager is stopped: api_1's event waits on the
   unreachable gate until it is back.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.azurite import needs_blob_and_queue
from tests.fleet_page.browser import chrome, console_errors
from tests.support.alertmanager import INSTALL_HINT, Alertmanager, alert
from tests.support.alertmanager import find_binary as find_alertmanager
from tests.support.config import toml_value
from tests.support.waiting import wait_for

from .fleet import Coordinator, Fleet, Timeline, shut_down

pytestmark = [
    pytest.mark.slow,
    needs_blob_and_queue,
    pytest.mark.skipif(find_alertmanager() is None, reason=f"Alertmanager is not installed ({INSTALL_HINT})"),
]

AGENTS = ["web-0", "web-1", "web-2", "api_0", "api_1"]
FIRING = alert("HighErrorRate", service="api", severity="page")
WINDOW_OPENS_AFTER = 45.0  # s after the windowed coordinator starts (it leads and defers before then)
GATED, WINDOWED = ["Reboot"], ["Redeploy"]  # the event types each coordinator manages
BERLIN = ZoneInfo("Europe/Berlin")


def decisions_for(fleet: Fleet, name: str, event_id: str) -> list[dict[str, Any]]:
    return [d for d in fleet.decisions(name) if d["data"].get("EventId") == event_id]


def defers(fleet: Fleet, name: str, event_id: str, code: str) -> list[dict[str, Any]]:
    return [d for d in decisions_for(fleet, name, event_id)
            if d["data"]["Decision"] == "defer" and d["data"]["ReasonCode"] == code]


def gate(coordinator: Coordinator, name: str) -> dict[str, Any]:
    return next(g for g in coordinator.get("/v1/status")["gates"] if g["name"] == name)


def page_text(browser: Any, coordinator: Coordinator, selector: str) -> str:
    """The text of ``selector`` on the coordinator's fleet page, once the page has drawn it."""
    if not browser.current_url.startswith(coordinator.url):
        browser.get(coordinator.url + "/")
    found = ""

    def drawn() -> bool:
        nonlocal found
        found = browser.execute_script("const n = document.querySelector(arguments[0]); "
                                       "return n ? n.innerText : ''", selector)
        return bool(found)
    wait_for(drawn, 30, f"{selector} on the page")
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("gates")
    (base / "alertmanager").mkdir()
    fleet = Fleet(base)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    am = Alertmanager(base / "alertmanager")
    record: dict[str, Any] = {"timeline": timeline}
    gated = windowed = browser = None
    try:
        browser = chrome()
        am.start()
        fleet.start(vms=AGENTS)
        am.post(FIRING)
        opens = datetime.now(BERLIN) + timedelta(seconds=WINDOW_OPENS_AFTER)
        record["window_opens"] = opens.timestamp() // 1
        windowed = fleet.coordinator("windowed", manage=WINDOWED, extra="\n".join([
            "[[windows]]", 'name = "berlin test window"', 'timezone = "Europe/Berlin"',
            f'rrule = "FREQ=DAILY;BYHOUR={opens.hour};BYMINUTE={opens.minute};BYSECOND={opens.second}"',
            'duration = "10m"']) + "\n").start()

        # the window's side first: what it says and shows before the window opens
        wait_for(windowed.ready, 60, "the windowed coordinator to lead")
        ids = {"web-1": fleet.add("web-1", *WINDOWED), "web-2": fleet.add("web-2", *WINDOWED)}
        record["ids"] = ids
        wait_for(lambda: defers(fleet, "windowed", ids["web-1"], "outside-window"), 30, "the window defer")
        record["status_outside"] = windowed.cli_ok("status")
        record["window_status"] = windowed.get("/v1/status")["windows"]
        record["page_window"] = page_text(browser, windowed, ".window-row[data-scope='fleet']")
        record["page_errors"] = console_errors(browser)

        # then the gate's side (its coordinator starts now, so that neither start delays the other)
        gated = fleet.coordinator("gated", manage=GATED, extra="\n".join([
            "[[gates]]", 'name = "api-alerts"', 'type = "alertmanager"', 'scope = "group:api"',
            f"url = {toml_value(am.url)}", "matchers = ['service=\"api\"']", 'interval = "1s"',
            'timeout = "2s"']) + "\n").start()
        wait_for(gated.ready, 60, "the gated coordinator to lead")
        wait_for(lambda: gate(gated, "api-alerts")["checkedUtc"] is not None, 30, "the gate's first answer")
        ids.update({"api_0": fleet.add("api_0", *GATED), "web-0": fleet.add("web-0", *GATED)})
        wait_for(lambda: ids["web-0"] in timeline.started, 60, "web-0, outside the gate's scope, to start")
        wait_for(lambda: defers(fleet, "gated", ids["api_0"], "gate-closed"), 30, "api_0's gate-closed defer")
        record["status_closed"] = gated.cli_ok("status")
        record["gate_closed"] = gate(gated, "api-alerts")
        record["page_banner"] = page_text(browser, gated, "#banner .gate[data-gate='api-alerts']")
        record["page_errors"] += console_errors(browser)
        browser.get("about:blank")  # the gated coordinator stops later on: its page is left first
        record["alerts_seen"] = [a["labels"]["alertname"] for a in am.alerts(['service="api"'])]
        record["api_0_requests_while_firing"] = fleet.requests_for(ids["api_0"])

        am.post({**FIRING, "endsAt": datetime.now(UTC).isoformat().replace("+00:00", "Z")})
        record["resolved_at"] = datetime.now(UTC).timestamp()
        wait_for(lambda: ids["api_0"] in timeline.completed, 60, "api_0 to run once the alert resolved")
        record["api_0_started"] = timeline.started[ids["api_0"]]

        am.stop()
        record["stopped_at"] = datetime.now(UTC).timestamp()
        wait_for(lambda: gate(gated, "api-alerts")["unreachable"], 30, "the gate to see Alertmanager down")
        record["gate_unreachable"] = gate(gated, "api-alerts")
        ids["api_1"] = fleet.add("api_1", *GATED)
        wait_for(lambda: any("cannot be asked" in d["data"]["Reason"]
                             for d in defers(fleet, "gated", ids["api_1"], "gate-closed")),
                 60, "api_1's defer on the unreachable gate")
        record["api_1_defer"] = defers(fleet, "gated", ids["api_1"], "gate-closed")[-1]
        record["api_1_requests_while_down"] = fleet.requests_for(ids["api_1"])
        am.start()
        record["restarted_at"] = datetime.now(UTC).timestamp()
        wait_for(lambda: ids["api_1"] in timeline.started, 60, "api_1 to run once Alertmanager is back")
        record["api_1_started"] = timeline.started[ids["api_1"]]
        record["gated_decisions"] = fleet.decisions("gated")
        assert gated.stop() == 0
        gated = None

        wait_for(lambda: ids["web-1"] in timeline.completed and ids["web-2"] in timeline.completed, 90,
                 "web-1 and web-2 to roll inside the window")
        record["windowed_decisions"] = fleet.decisions("windowed")
        record["starts"] = fleet.starts()
        record["requests"] = fleet.server.sim.approvals()
        yield record
    finally:
        if browser is not None:
            browser.quit()
        am.stop()
        am.http.close()
        shut_down(fleet, gated, windowed)


def test_while_a_matching_alert_fires_nothing_in_the_gates_scope_is_approved_early(run):
    assert run["alerts_seen"] == ["HighErrorRate"]
    assert run["api_0_requests_while_firing"] == []
    assert run["api_0_started"] >= run["resolved_at"]


def test_the_deferral_names_the_gate_and_the_alert(run):
    (defer,) = [d for d in run["gated_decisions"] if d["data"].get("EventId") == run["ids"]["api_0"]
                and d["data"]["Decision"] == "defer"]
    assert defer["data"]["ReasonCode"] == "gate-closed"
    assert "gate 'api-alerts' (group:api) is closed" in defer["data"]["Reason"]
    assert "HighErrorRate (service=api, severity=page)" in defer["data"]["Reason"]


def test_an_event_outside_the_gates_scope_runs_while_it_is_closed(run):
    web = run["ids"]["web-0"]
    assert web in run["starts"] and run["starts"][web] < run["resolved_at"]


def test_once_the_alert_resolves_the_rollout_resumes(run):
    assert run["ids"]["api_0"] in run["starts"]


def test_an_unreachable_alertmanager_closes_the_gate_and_says_so(run):
    said = run["gate_unreachable"]
    assert not said["open"] and said["unreachable"] and "counted as closed" in said["reason"]
    assert "cannot be asked" in run["api_1_defer"]["data"]["Reason"]
    assert run["api_1_requests_while_down"] == []
    assert run["api_1_started"] >= run["restarted_at"]


def test_status_shows_the_closed_gate(run):
    assert "gate api-alerts (alertmanager, group:api): CLOSED: 1 alert fires in Alertmanager: " \
        "HighErrorRate (service=api, severity=page)" in run["status_closed"]
    assert run["gate_closed"]["alerts"] == ["HighErrorRate (service=api, severity=page)"]


def test_outside_a_window_nothing_is_approved_early_and_inside_the_rollout_runs(run):
    opens = run["window_opens"]
    for vm in ("web-1", "web-2"):
        event = run["ids"][vm]
        assert [d for d in run["windowed_decisions"] if d["data"].get("EventId") == event
                and d["data"]["Decision"] == "defer" and d["data"]["ReasonCode"] == "outside-window"]
        asked = [r for r in run["requests"] if r["EventId"] == event]
        assert asked and all(datetime.fromisoformat(r["time"].replace("Z", "+00:00")).timestamp() >= opens
                             for r in asked)


def test_status_shows_the_scopes_next_window(run):
    (fleet_scope,) = run["window_status"]
    assert fleet_scope["scope"] == "fleet" and fleet_scope["open"] is False
    assert fleet_scope["window"]["name"] == "berlin test window"
    assert "Europe/Berlin" in fleet_scope["window"]["text"]
    said = "windows of fleet: early approval CLOSED; next window 'berlin test window'"
    assert said in run["status_outside"]


def test_the_page_shows_the_closed_gate_and_the_scopes_next_window(run):
    assert run["page_banner"].startswith("gate api-alerts closed: 1 alert fires in Alertmanager: "
                                         "HighErrorRate")
    assert "early approval closed · next window berlin test window: " in run["page_window"]
    assert "Europe/Berlin" in run["page_window"] and run["page_errors"] == []
