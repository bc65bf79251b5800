"""A scenario's clock starts at the first scheduled-events poll (by default), so a client started
after the simulator still sees the whole story; ``--start immediately`` keeps the old behaviour;
``--time-scale`` warns when a notice becomes too short to be seen."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from se_forwarder.cli.simulate import short_notice_warnings
from tests.support.paths import ROOT

HEADERS = {"Metadata": "true"}


def events_url(base: str) -> str:
    return f"{base}/metadata/scheduledevents?api-version=2020-07-01"


def test_a_scenario_waits_for_the_first_poll(start_sim, http):
    server = start_sim(time_scale=60, scenario="spot-eviction")  # the whole story lasts 1.5 s
    time.sleep(2)
    assert server.sim.events() == []
    status = server.sim.scenario_status()
    assert status["waiting_for_first_poll"] and status["started"] is None and not status["done"]
    document = http.get(events_url(server.url), headers=HEADERS, timeout=5).json()
    [event] = document["Events"]
    assert (event["EventType"], event["EventStatus"]) == ("Preempt", "Scheduled")
    status = server.sim.scenario_status()
    assert status["started_by"] == "first scheduled-events poll: vm0 from 127.0.0.1"


def test_a_poll_that_fails_does_not_start_the_scenario(start_sim, http):
    server = start_sim(scenario="user-reboot", faults=[{"status": 503, "count": 1}])
    assert http.get(events_url(server.url), headers=HEADERS, timeout=5).status_code == 503
    assert server.sim.scenario_status()["waiting_for_first_poll"]
    assert http.get(events_url(server.url), headers=HEADERS, timeout=5).json()["Events"]


def test_a_poll_of_any_vm_starts_the_scenario(start_sim, http):
    server = start_sim(vm_names=("vm0", "vm1"), scenario="user-reboot")
    http.get(events_url(server.vm_url("vm1")), headers=HEADERS, timeout=5)
    assert server.sim.scenario_status()["started_by"].endswith("vm1 from 127.0.0.1")


def test_a_scenario_started_after_clients_poll_starts_at_once(sim, http):
    http.get(events_url(sim.url), headers=HEADERS, timeout=5)
    status = sim.sim.start_scenario("user-reboot")
    assert status["started"] is not None and "polls already" in status["started_by"]
    assert len(sim.sim.events()) == 1


def test_start_immediately_starts_with_the_server(start_sim):
    server = start_sim(scenario="user-reboot", scenario_start="immediately")
    assert len(server.sim.events()) == 1


def test_control_api_takes_start_and_names_a_bad_value(sim, http):
    reply = http.post(sim.url + "/control/scenario", json={"name": "user-reboot", "start": "immediately"},
                      timeout=5)
    assert reply.status_code == 201 and reply.json()["started"] is not None
    reply = http.post(sim.url + "/control/scenario", json={"name": "user-reboot", "start": "later"},
                      timeout=5)
    assert reply.status_code == 400 and "first-poll" in reply.json()["error"]


def test_bad_scenario_start_in_python_is_a_value_error(start_sim):
    with pytest.raises(ValueError, match="scenario_start"):
        start_sim(scenario="user-reboot", scenario_start="soon")


def test_simulate_prints_when_the_scenario_started(cli_simulator, http):
    cli = cli_simulator("--scenario", "user-reboot")
    time.sleep(0.5)
    assert not any("started (" in line for line in cli.lines)
    assert any("starts at the first scheduled-events poll" in line for line in cli.lines)
    http.get(events_url(cli.url), headers=HEADERS, timeout=5)
    deadline = time.monotonic() + 5
    while not any("scenario user-reboot started" in line for line in cli.lines):
        assert time.monotonic() < deadline, cli.lines
        time.sleep(0.05)
    [line] = [line for line in cli.lines if "scenario user-reboot started" in line]
    assert "(first scheduled-events poll: vm0 from 127.0.0.1)" in line
    started = cli.lines.index(line)
    while not any("added (Scheduled" in later for later in cli.lines[started + 1 :]):
        assert time.monotonic() < deadline, cli.lines
        time.sleep(0.05)
    assert cli.stop() == 0


def test_time_scale_warns_when_a_notice_lasts_less_than_3_polls(cli_simulator):
    cli = cli_simulator("--scenario", "spot-eviction", "--time-scale", "60")
    assert cli.stop() == 0
    err = cli.process.stderr.read()
    assert err.count("warning:") == 1
    assert "the 30 s notice of the Preempt at 0 s lasts 0.5 s" in err
    assert "polling every 1 s (--poll-interval)" in err
    assert "use --time-scale 10 or less" in err


@pytest.mark.parametrize(
    "args",
    [["--time-scale", "10"], ["--time-scale", "60", "--poll-interval", "0.1"]],
)
def test_no_warning_when_every_notice_lasts_3_polls(cli_simulator, args):
    cli = cli_simulator("--scenario", "spot-eviction", *args)
    assert cli.stop() == 0
    assert "warning" not in cli.process.stderr.read()


def test_without_a_scenario_the_warning_names_the_minimum_notices_that_are_too_short():
    notices = [("the minimum notice of a Preempt", 30.0), ("the minimum notice of a Freeze", 900.0)]
    [warning] = short_notice_warnings(notices, 300, 1.0)
    assert warning.startswith("at --time-scale 300, the minimum notice of a Preempt lasts 0.1 s")
    assert "use --time-scale 10 or less" in warning
    assert short_notice_warnings(notices, 1, 1.0) == []


def test_spot_eviction_at_60x_with_the_agent_started_2_s_later_is_scheduled_then_started(tmp_path):
    """The issue's story: `simulate --scenario spot-eviction --time-scale 60`, the agent a bit
    later; the 30 s notice (0.5 s here) is seen as `scheduled` before `started`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sim = subprocess.Popen(
        [sys.executable, "-m", "se_forwarder", "simulate", "--port", "0",
         "--scenario", "spot-eviction", "--time-scale", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT,
    )
    agent = None
    try:
        first = sim.stdout.readline()
        url = first.split("listening on ", 1)[1].split()[0]
        time.sleep(2)
        events = tmp_path / "events.jsonl"
        agent = subprocess.Popen(
            [sys.executable, "-m", "se_forwarder", "run", "--imds-url", url,
             "--state-dir", str(tmp_path / "state"), "--sink", f"file:{events}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT,
        )

        def types() -> list[str]:
            if not events.exists():
                return []
            lines = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
            return [e["type"].rsplit(".", 1)[-1] for e in lines if e.get("eventtype") == "Preempt"]

        deadline = time.monotonic() + 30
        while "completed" not in types():
            assert time.monotonic() < deadline, f"saw only {types()}"
            time.sleep(0.2)
        seen = types()
        assert seen.index("scheduled") < seen.index("started") < seen.index("completed")
    finally:
        for proc in (agent, sim):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
