"""The agent against every fault the simulator can inject: polling resumes, nothing false comes out."""

from __future__ import annotations

import time

import pytest

from se_forwarder.simulator import SimulatorServer
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.faults import IMDS_FAULT_IDS, IMDS_FAULTS
from tests.support.waiting import wait_for

FAST = {"SE_FORWARDER_IMDS_MAX_BACKOFF": "1", "SE_FORWARDER_IMDS_TIMEOUT": "1"}


def start_agent(sim_url, tmp_path, agents, name="a", extra_env=None, config=None):
    args = ["--imds-url", sim_url, "--state-dir", str(tmp_path / f"state-{name}"),
            "--sink", f"file:{tmp_path / f'{name}.jsonl'}", "--poll-interval", "0.1"]
    if config is not None:
        args += ["--config", str(config)]
    agent = AgentProcess(args, env={**FAST, **(extra_env or {})},
                         log_path=tmp_path / f"{name}.log").start()
    agents.append(agent)
    return agent


def states(path):
    return [(e["subject"], e["type"].rsplit(".", 1)[1]) for e in read_jsonl(path)]


@pytest.mark.parametrize("fault", IMDS_FAULTS, ids=IMDS_FAULT_IDS)
def test_agent_survives_fault_and_reports_only_true_transitions(simulator, control, agents,
                                                                 tmp_path, fault):
    existing = control.add(EventType="Reboot")["EventId"]
    agent = start_agent(simulator.url, tmp_path, agents)
    wait_for(lambda: states(tmp_path / "a.jsonl") == [(existing, "scheduled")], what="first event")
    control.faults(**fault)
    time.sleep(1.0)
    later = control.add(EventType="Redeploy")["EventId"]
    wait_for(lambda: (later, "scheduled") in states(tmp_path / "a.jsonl"), timeout=30,
             what="polling to resume after the fault")
    time.sleep(0.5)
    assert states(tmp_path / "a.jsonl") == [(existing, "scheduled"), (later, "scheduled")]
    assert agent.alive()
    assert "Traceback" not in (tmp_path / "a.log").read_text()


def test_an_approval_by_one_vm_starts_the_event_for_all_three(agents, tmp_path):
    config = tmp_path / "leader.toml"
    config.write_text("[approvals]\nleader_only = true\n")
    with SimulatorServer(vm_names=("vm0", "vm1", "vm2")) as sim:
        for name in ("vm0", "vm1", "vm2"):
            start_agent(sim.vm_url(name), tmp_path, agents, name=name, config=config)
        event = sim.sim.add_event({"EventType": "Freeze", "DurationInSeconds": 5,
                                   "Resources": ["vm0", "vm1", "vm2"]})
        event_id = event["EventId"]
        for name in ("vm0", "vm1", "vm2"):
            wait_for(lambda n=name: (event_id, "started") in states(tmp_path / f"{n}.jsonl"),
                     timeout=20, what=f"{name} to report started")
        approvals = sim.sim.approvals()
    assert [(a["EventId"], a["vm"]) for a in approvals] == [(event_id, "vm0")]
    assert (event_id, "approved") in states(tmp_path / "vm0.jsonl")
    for name in ("vm1", "vm2"):
        assert (event_id, "approved") not in states(tmp_path / f"{name}.jsonl")
    sources = {read_jsonl(tmp_path / f"{n}.jsonl")[0]["source"] for n in ("vm0", "vm1", "vm2")}
    assert len(sources) == 3, "each VM reports with its own source"


def test_an_old_max_backoff_setting_still_works_and_is_reported_once_as_ignored(simulator, control,
                                                                              agents, tmp_path):
    event_id = control.add(EventType="Reboot")["EventId"]
    start_agent(simulator.url, tmp_path, agents, extra_env={"SE_FORWARDER_IMDS_MAX_BACKOFF": "30"})
    wait_for(lambda: (event_id, "scheduled") in states(tmp_path / "a.jsonl"), what="first event")
    control.faults(status=500, count=3)
    time.sleep(1.5)
    log = (tmp_path / "a.log").read_text()
    assert log.count("imds.max_backoff is ignored") == 1
