"""Built-in scenarios, each driven to its end against ``simulate`` by a client written like the
documented sample; and scenario files of one's own."""

from __future__ import annotations

import email.utils
import json
import time

import pytest

from se_forwarder.simulator import ScenarioError, builtin_names, load_scenario

HEADERS = {"Metadata": "true"}
FULL = ["Scheduled", "Started", "gone"]

# name -> (time scale, policy, extra CLI args, expected {EventType: [status sequences]},
#          minimum real seconds the run must take)
SCENARIOS = {
    "live-migration": (1200, "sample", [], {"Freeze": [FULL]}, 600 / 1200),
    "host-maintenance": (1200, "sample", [], {"Freeze": [FULL]}, 1500 / 1200),
    "user-reboot": (1200, "sample", [], {"Reboot": [FULL]}, 600 / 1200),
    "user-redeploy": (1200, "sample", [], {"Redeploy": [FULL]}, 600 / 1200),
    "hardware-failure": (1200, "sample", [], {"Reboot": [["Started", "gone"]]}, 600 / 1200),
    "canceled-maintenance": (900, "sample", [], {"Reboot": [["Scheduled", "gone"]]}, 450 / 900),
    "spot-eviction": (60, "sample", [], {"Preempt": [FULL]}, 90 / 60),
    "vmss-terminate": (300, "sample", ["--param", "notice=300"], {"Terminate": [FULL]}, 420 / 300),
    "degraded-hardware": (1200, "approve-all", [], {"Redeploy": [FULL]}, 600 / 1200),
    "availability-set": (
        800,
        "sample",
        ["--vms", "vm0,vm1,vm2"],
        {"Reboot": [FULL] * 3, "Freeze": [FULL]},
        2400 / 800,
    ),
}
# which events the sample policy (or the operator) approves, by type
APPROVED = {
    "live-migration": {"Freeze"},
    "user-reboot": {"Reboot"},
    "user-redeploy": {"Redeploy"},
    "degraded-hardware": {"Redeploy"},
    "availability-set": {"Freeze"},
}


def test_every_built_in_scenario_is_covered_here():
    assert set(builtin_names()) == set(SCENARIOS) | {"demo"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_built_in_scenario_runs_to_its_end_under_time_scale(
    name, cli_simulator, sample_client, policies, http
):
    scale, policy, extra, expected, min_real = SCENARIOS[name]
    cli = cli_simulator("--scenario", name, "--time-scale", str(scale), "--throttle-rps", "0", *extra)
    client = sample_client(cli.url, policy=policies[policy])
    took = client.run_until(
        lambda: http.get(f"{cli.url}/control/scenario", timeout=5).json()["done"], timeout=20
    )
    seen = {t: sorted(client.seen[i] for i in client.by_type(t)) for t in expected}
    assert seen == {t: sorted(v) for t, v in expected.items()}
    assert took >= min_real * 0.9
    approvals = http.get(f"{cli.url}/control/approvals", timeout=5).json()
    approved_types = {client.events[a["EventId"]]["EventType"] for a in approvals if a["accepted"]}
    assert approved_types == APPROVED.get(name, set())
    assert sorted(a["EventId"] for a in approvals) == sorted(client.approved)


def test_availability_set_shows_a_vm_events_that_are_not_its_own(cli_simulator, sample_client, http):
    cli = cli_simulator("--scenario", "availability-set", "--time-scale", "20")
    client = sample_client(cli.url)
    client.poll_once()
    resources = [e["Resources"] for e in client.events.values()]
    assert ["vm0"] in resources
    assert ["vm0-peer1", "vm0-peer2"] in resources  # peers this one-VM simulator does not serve


def test_notice_of_vmss_terminate_is_a_parameter(start_sim):
    server = start_sim(
        time_scale=60, scenario="vmss-terminate", scenario_params={"notice": 900},
        scenario_start="immediately",
    )
    [event] = server.sim.events()
    not_before = email.utils.parsedate_to_datetime(event["NotBefore"]).timestamp()
    assert abs(not_before - (time.time() + 900 / 60)) <= 1.5


def test_degraded_hardware_is_announced_days_ahead(start_sim):
    server = start_sim(scenario="degraded-hardware", scenario_start="immediately")
    not_before = email.utils.parsedate_to_datetime(server.sim.events()[0]["NotBefore"]).timestamp()
    assert not_before - time.time() > 24 * 3600


def test_demo_scenario_at_time_scale_60_ends_within_20_s_with_the_four_stories(start_sim, sample_client):
    server = start_sim(time_scale=60, scenario="demo")
    client = sample_client(server.url, interval=0.25)  # as the demo agent polls
    took = client.run_until(server.sim.scenario_done, timeout=25)
    assert took <= 20
    by_story = {(e["EventType"], e["EventSource"]): client.seen[i] for i, e in client.events.items()}
    assert by_story[("Freeze", "Platform")] == FULL
    assert by_story[("Reboot", "User")] == FULL
    assert by_story[("Redeploy", "Platform")] == ["Scheduled", "gone"]
    [hardware] = [
        client.seen[i] for i in client.by_type("Reboot") if client.events[i]["EventSource"] == "Platform"
    ]
    assert hardware == ["Started", "gone"]
    freeze = client.events[client.by_type("Freeze")[0]]
    assert freeze["DurationInSeconds"] == 5
    assert {client.events[a["EventId"]]["EventType"] for a in server.sim.approvals()} == {
        "Freeze",
        "Reboot",
    }


def test_demo_started_phases_last_at_least_3_real_seconds(start_sim):
    server = start_sim(time_scale=60, scenario="demo")
    scenario = load_scenario("demo")
    started_seconds = [e["StartedSeconds"] for e in scenario.events if "StartedSeconds" in e]
    assert len(started_seconds) == 3
    assert min(server.sim.real_seconds(s) for s in started_seconds) >= 3


CUSTOM_TOML = """
description = "my maintenance drill"
[params]
notice = 120
[[events]]
ref = "drill"
at = 0
EventType = "Reboot"
Resources = ["{vm}"]
NotBeforeInSeconds = "{notice}"
Description = "drill with {notice} s notice"
[[actions]]
at = 30
do = "patch"
event = "drill"
Description = "patched"
[[actions]]
at = 60
do = "fault"
fault = { status = 503, count = 1 }
[[actions]]
at = 90
do = "delete"
event = "drill"
"""


def test_scenario_file_plays_events_actions_and_faults(start_sim, tmp_path, http):
    path = tmp_path / "drill.toml"
    path.write_text(CUSTOM_TOML)
    server = start_sim(time_scale=100)
    status = server.sim.start_scenario(str(path), {"notice": "300"}, start="immediately")
    assert (status["name"], status["steps_total"]) == ("drill", 4)
    [event] = server.sim.events()
    assert event["Description"] == "drill with 300 s notice"
    assert server.sim.wait_until(lambda: server.sim.faults() != [], 2)
    assert server.sim.events()[0]["Description"] == "patched"
    url = server.url + "/metadata/scheduledevents?api-version=2020-07-01"
    assert http.get(url, headers=HEADERS, timeout=5).status_code == 503
    assert server.sim.wait_scenario_done(2)
    assert server.sim.events() == []


def test_scenario_file_may_be_json(start_sim, tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"events": [{"EventType": "Preempt", "NotBeforeInSeconds": 30}]}))
    server = start_sim(scenario=str(path), scenario_start="immediately")
    assert server.sim.events()[0]["EventType"] == "Preempt"


def test_scenario_incarnation_reset_action(start_sim, tmp_path):
    path = tmp_path / "reset.toml"
    path.write_text(
        '[[events]]\nat = 0\n[[events]]\nat = 0\n[[actions]]\nat = 10\ndo = "incarnation_reset"\nto = 1\n'
    )
    server = start_sim(time_scale=100, scenario=str(path), scenario_start="immediately")
    assert server.sim.incarnation == 2  # both events in one step: one change
    assert server.sim.wait_until(lambda: server.sim.incarnation == 1, 2)
    assert len(server.sim.events()) == 2


def test_unknown_scenario_parameter_is_an_error_naming_it(start_sim):
    with pytest.raises(ScenarioError, match="colour"):
        start_sim(scenario="vmss-terminate", scenario_params={"colour": "red"})


def test_starting_a_scenario_replaces_the_one_playing(start_sim):
    server = start_sim(time_scale=1)
    server.sim.start_scenario("canceled-maintenance", start="immediately")
    server.sim.start_scenario("hardware-failure", start="immediately")
    assert server.sim.scenario_status()["name"] == "hardware-failure"
    assert len(server.sim.events()) == 2


def test_reset_stops_the_scenario(start_sim):
    server = start_sim(scenario="user-reboot")
    server.sim.reset()
    assert server.sim.scenario_done()
    assert server.sim.events() == []
