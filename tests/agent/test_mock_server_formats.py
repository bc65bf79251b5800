"""The agent reads every Scheduled Events endpoint a user points it at: the simulator serving
NotBefore in ISO 8601 and a new EventId for each state, as Microsoft's scheduled-events mock
server does, and a document with a field nobody can read. The agent is a real subprocess, the
simulator real HTTP."""

from __future__ import annotations

import dataclasses
import json
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import pytest

from se_forwarder.simulator import SimulatorServer, load_scenario
from tests.operations.helpers import sample, scrape
from tests.support.agent import AgentProcess, cloudevents, log_records
from tests.support.config import write_config
from tests.support.ports import free_port
from tests.support.waiting import wait_for

FORMATS = ("rfc1123", "iso8601")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
# Time scales that keep each scenario's notice several polls long and its Started phase short.
TIME_SCALES = {"spot-eviction": 10, "live-migration": 120}


def start_agent(url: str, directory: Path, **telemetry: object) -> tuple[AgentProcess, Path]:
    out = directory / "o.jsonl"
    sections: dict = {"imds": {"url": url, "poll_interval": 0.2}, "state": {"dir": str(directory / "s")}}
    if telemetry:
        sections["telemetry"] = telemetry
    config = write_config(directory / "agent.toml", [{"type": "file", "path": str(out)}], **sections)
    return AgentProcess(["--config", str(config)], log_path=directory / "agent.log").start(), out


def play(name: str, not_before_format: str, directory: Path) -> tuple[list[dict], list[dict]]:
    """The agent's CloudEvents and log records for the scenario ``name`` played (with fixed
    EventIds, so that two runs can be compared) by a simulator in ``not_before_format``."""
    directory.mkdir()
    scenario = load_scenario(name)
    scenario = dataclasses.replace(scenario, events=tuple(
        {**e, "EventId": f"{name.upper()}-{i}"} for i, e in enumerate(scenario.events)))
    with SimulatorServer(time_scale=TIME_SCALES[name], not_before_format=not_before_format) as imds:
        agent, out = start_agent(imds.url, directory)
        try:
            wait_for(lambda: imds.sim.requests(), what="the agent polling")
            imds.sim.start_scenario(scenario)
            assert imds.sim.wait_scenario_done(timeout=30)
            wait_for(lambda: len(cloudevents(out, "recovered")) == len(scenario.events),
                     what=f"the {name} events to complete and the VM reported back")
            assert agent.terminate() == 0
        finally:
            if agent.alive():
                agent.kill()
    return cloudevents(out), log_records(directory / "agent.log")


@pytest.fixture(scope="module", params=sorted(TIME_SCALES))
def played(request, tmp_path_factory) -> dict[str, tuple[list[dict], list[dict]]]:
    """The scenario played in both formats at once (a simulator and an agent each)."""
    base = tmp_path_factory.mktemp(request.param)
    with ThreadPoolExecutor(len(FORMATS)) as pool:
        runs = {f: pool.submit(play, request.param, f, base / f) for f in FORMATS}
        return {f: run.result() for f, run in runs.items()}


def test_iso_8601_not_before_gives_exactly_the_cloudevents_of_rfc_1123(played):
    ids_and_types = {f: sorted((e["id"], e["type"]) for e in events) for f, (events, _) in played.items()}
    assert ids_and_types["iso8601"] == ids_and_types["rfc1123"]
    assert {t.rsplit(".", 1)[1] for _, t in ids_and_types["iso8601"]} >= {"scheduled", "started",
                                                                           "completed"}


def test_an_iso_8601_not_before_is_read_not_only_carried(played):
    events, log = played["iso8601"]
    for event in (e for e in events if e["type"].endswith(".scheduled")):
        data = event["data"]
        assert ISO.match(data["NotBefore"]), data["NotBefore"]
        assert datetime.fromisoformat(data["NotBeforeUtc"]) == datetime.fromisoformat(data["NotBefore"])
    assert not [r for r in log if "the event is kept" in r.get("message", "")]


def test_a_new_event_id_for_each_state_is_two_events_to_the_agent(simulator, agents, tmp_path):
    """Microsoft's mock server names the Started state anew: the first EventId leaves the
    document once its NotBefore passed, so its run is inferred; the second is seen Started."""
    simulator.sim.time_scale = float(TIME_SCALES["spot-eviction"])
    agent, out = start_agent(simulator.url, tmp_path)
    agents.append(agent)
    wait_for(lambda: simulator.sim.requests(), what="the agent polling")
    simulator.sim.start_scenario("spot-eviction", new_event_id_per_state=True)
    (scheduled,) = wait_for(lambda: cloudevents(out, "scheduled"), what="scheduled")
    wait_for(lambda: len(cloudevents(out, "recovered")) == 2, what="both EventIds completed, VM back")
    first = scheduled["subject"]
    seen = sorted((e["subject"] == first, e["type"].rsplit(".", 1)[1], e["data"].get("InferredFrom"))
                  for e in cloudevents(out))
    assert seen == [(False, "completed", None), (False, "recovered", None), (False, "started", None),
                    (True, "completed", "not-before-passed"), (True, "recovered", None),
                    (True, "scheduled", None), (True, "started", "not-before-passed")]


def test_a_field_nobody_can_read_keeps_the_event_and_is_logged_and_counted_once(
        simulator, agents, tmp_path):
    document = {"DocumentIncarnation": 7, "Events": [{
        "EventId": "ODD-1", "EventType": "Reboot", "ResourceType": "VirtualMachine",
        "Resources": ["vm0"], "EventStatus": "Scheduled", "NotBefore": "tomorrow at noon",
        "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}]}
    simulator.sim.add_fault({"body": json.dumps(document), "seconds": 600})
    port = free_port()
    agent, out = start_agent(simulator.url, tmp_path, prometheus_port=port)
    agents.append(agent)
    (scheduled,) = wait_for(lambda: cloudevents(out, "scheduled"), what="the event reported")
    assert scheduled["data"]["NotBefore"] == "tomorrow at noon"
    assert scheduled["data"]["NotBeforeUtc"] is None
    polls = len(simulator.sim.requests())
    wait_for(lambda: len(simulator.sim.requests()) > polls + 5, what="more polls of the same document")
    samples = scrape(port)
    assert sample(samples, "se_forwarder_imds_unreadable_fields_total", field="NotBefore") == 1
    assert sample(samples, "se_forwarder_imds_unreadable_fields_total", field="Resources") == 0
    warnings = [r for r in log_records(tmp_path / "agent.log") if "the event is kept" in r["message"]]
    assert len(warnings) == 1 and "'tomorrow at noon'" in warnings[0]["message"]
