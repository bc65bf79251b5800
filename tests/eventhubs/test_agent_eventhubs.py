"""End to end: simulator -> `se-forwarder run` subprocesses -> Event Hubs broker -> real consumers.

The agents get an ``[[sinks]] type = "eventhubs"`` table with ``credential = "connection-string"``
and the connection string in an environment variable, exactly as a user configures them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from se_forwarder.model import Kind
from se_forwarder.simulator import SimulatorServer
from tests.support.agent import AgentProcess
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

from .broker import EventHubsBroker
from .helpers import consume, parse_received, stored_types_and_ids

FAST = {"SE_FORWARDER_IMDS_MAX_BACKOFF": "1"}
IDENTITY = Kind.IDENTITY.type


def _config(path: Path, imds_url: str, state: Path, sinks: list[dict[str, str]]) -> Path:
    """A config file as design.md shows it; no approval rule matches, so nothing is approved."""
    text = [
        f'[imds]\nurl = "{imds_url}"\n',
        f'[state]\ndir = "{state}"\n',
        "[approvals]\nrules = []\n",
    ]
    for sink in sinks:
        text.append(
            "[[sinks]]\n"
            'type = "eventhubs"\n'
            f'name = "{sink["name"]}"\n'
            'eventhub = "scheduled-events"\n'
            'credential = "connection-string"\n'
            f'connection_string_env = "{sink["env"]}"\n'
            f'mode = "{sink.get("mode", "structured")}"\n'
        )
    path.write_text("\n".join(text))
    return path


def _agent(config: Path, env: dict[str, str], log: Path) -> AgentProcess:
    return AgentProcess(
        ["--config", str(config), "--poll-interval", "0.1"], env={**FAST, **env}, log_path=log
    )


def _ids(broker: EventHubsBroker) -> list[str]:
    """Ids of the events about Scheduled Events (not the agents' identity events)."""
    return [ident for kind, ident in stored_types_and_ids(broker) if kind != IDENTITY]


def test_agent_delivers_each_transition_once_in_order_in_both_modes(
    simulator, eventhubs_broker, agents, tmp_path
):
    with EventHubsBroker() as binary_broker:
        config = _config(
            tmp_path / "agent.toml",
            simulator.url,
            tmp_path / "state",
            [
                {"name": "hub-structured", "env": "EH_CONN"},
                {"name": "hub-binary", "env": "EH_CONN_BINARY", "mode": "binary"},
            ],
        )
        env = {
            "EH_CONN": eventhubs_broker.connection_string(),
            "EH_CONN_BINARY": binary_broker.connection_string(),
        }
        agent = _agent(config, env, tmp_path / "agent.log").start()
        agents.append(agent)

        sim = simulator.sim
        freeze = sim.add_event({"EventType": "Freeze"})["EventId"]
        reboot = sim.add_event({"EventType": "Reboot"})["EventId"]
        wait_for(lambda: len(_ids(eventhubs_broker)) >= 2, timeout=30, what="scheduled events")
        sim.patch_event(freeze, {"EventStatus": "Started"})
        wait_for(lambda: f"{freeze}/started" in _ids(eventhubs_broker), timeout=30, what="started")
        sim.delete_event(freeze)
        sim.delete_event(reboot)
        expected = {
            f"{freeze}/scheduled",
            f"{reboot}/scheduled",
            f"{freeze}/started",
            f"{freeze}/completed",
            f"{freeze}/recovered",
            f"{reboot}/canceled",
        }
        for broker in (eventhubs_broker, binary_broker):
            wait_for(lambda b=broker: set(_ids(b)) == expected, timeout=30, what="all transitions")
        assert agent.terminate() == 0

        for broker, content_type in (
            (eventhubs_broker, "application/cloudevents+json"),
            (binary_broker, "application/json"),
        ):
            (partition,) = {m.partition for m in broker.all_messages()}  # one VM, one partition
            identities = sum(kind == IDENTITY for kind, _ in stored_types_and_ids(broker))
            got = consume(broker.connection_string(), len(expected) + identities,
                          partition_id=str(partition))
            assert {r.content_type for r in got} == {content_type}
            events = [e for e in map(parse_received, got) if e.get_type() != IDENTITY]
            ids = [e.get_id() for e in events]
            assert sorted(ids) == sorted(expected), "each transition exactly once"
            vmid = events[0].get_extension("vmid")
            assert {r.partition_key for r in got} == {vmid.encode()}
            assert ids.index(f"{freeze}/scheduled") < ids.index(f"{freeze}/started")
            assert ids.index(f"{freeze}/started") < ids.index(f"{freeze}/completed")
            assert ids.index(f"{freeze}/completed") < ids.index(f"{freeze}/recovered")
            assert ids.index(f"{reboot}/scheduled") < ids.index(f"{reboot}/canceled")


def test_broker_outage_with_an_agent_sigkill_loses_nothing(simulator, eventhubs_broker, agents, tmp_path):
    config = _config(
        tmp_path / "agent.toml", simulator.url, tmp_path / "state", [{"name": "hub", "env": "EH_CONN"}]
    )
    env = {"EH_CONN": eventhubs_broker.connection_string()}
    log = tmp_path / "agent.log"
    agent = _agent(config, env, log).start()
    agents.append(agent)
    sim = simulator.sim
    first = sim.add_event({"EventType": "Freeze"})["EventId"]
    wait_for(lambda: _ids(eventhubs_broker) == [f"{first}/scheduled"], timeout=30, what="first event")

    eventhubs_broker.stop()  # outage 1: the agent keeps running
    sim.patch_event(first, {"EventStatus": "Started"})
    second = sim.add_event({"EventType": "Reboot"})["EventId"]
    wait_for(lambda: "cannot reach Event Hubs" in log.read_text(), timeout=30, what="the outage noticed")
    eventhubs_broker.start()
    wait_for(lambda: len(_ids(eventhubs_broker)) == 3, timeout=40, what="catch-up after outage 1")

    eventhubs_broker.stop()  # outage 2: the agent is killed while the hub is away
    sim.delete_event(first)
    sim.delete_event(second)
    wait_for(
        lambda: log.read_text().count("cannot reach Event Hubs") >= 2, timeout=30, what="outage 2 noticed"
    )
    agent.kill()
    agent = _agent(config, env, log).start()
    agents.append(agent)
    eventhubs_broker.start()
    expected = [
        f"{first}/scheduled",
        f"{first}/started",
        f"{second}/scheduled",
        f"{first}/completed",
        f"{first}/recovered",
        f"{second}/canceled",
    ]
    wait_for(lambda: set(_ids(eventhubs_broker)) == set(expected), timeout=40, what="catch-up after kill")
    assert agent.terminate() == 0
    ids = _ids(eventhubs_broker)
    assert sorted(ids) == sorted(expected), "nothing lost, nothing sent twice"
    assert ids.index(f"{first}/started") < ids.index(f"{first}/completed")


def test_three_agents_one_hub_and_fleet_tail_shows_each_event_once_with_its_vm_count(
    eventhubs_broker, agents, tmp_path
):
    vms = ("vm0", "vm1", "vm2")
    with SimulatorServer(vm_names=vms) as imds:
        env = {"EH_CONN": eventhubs_broker.connection_string()}
        for vm in vms:
            config = _config(
                tmp_path / f"{vm}.toml", imds.vm_url(vm), tmp_path / vm, [{"name": "hub", "env": "EH_CONN"}]
            )
            agent = _agent(config, env, tmp_path / f"{vm}.log").start()
            agents.append(agent)
        freeze = imds.sim.add_event({"EventType": "Freeze", "Resources": list(vms)})["EventId"]
        wait_for(lambda: len(_ids(eventhubs_broker)) == 3, timeout=40, what="three VMs report the freeze")
        imds.sim.patch_event(freeze, {"EventStatus": "Started"})
        wait_for(lambda: len(_ids(eventhubs_broker)) == 6, timeout=40, what="three VMs report it started")
        for agent in agents:
            assert agent.terminate() == 0

    partitions = {m.partition for m in eventhubs_broker.all_messages()}
    keys = {m.partition_key for m in eventhubs_broker.all_messages()}
    assert len(keys) == 3, "one partition key (vmId) per VM"
    result = subprocess.run(
        [sys.executable, "-m", "se_forwarder", "fleet", "tail", "--once", "--format", "json"],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    rows = {(r["subject"], r["state"]): r["vms"] for r in summary["rows"]}
    assert rows == {(freeze, "scheduled"): 3, (freeze, "started"): 3}
    identities = sum(kind == IDENTITY for kind, _ in stored_types_and_ids(eventhubs_broker))
    assert identities >= 3, "each agent registered"
    assert summary["events"] == 6 + identities
    assert set(summary["partitions_read"]) == {str(p) for p in partitions}


def test_the_connection_string_never_appears_in_logs_or_status(simulator, eventhubs_broker, agents, tmp_path):
    secret_key = "c2VjcmV0LWtleS1mb3ItbG9nLWNoZWNr"  # the broker refuses it: errors get logged
    wrong = eventhubs_broker.connection_string(key=secret_key)
    config = _config(
        tmp_path / "agent.toml", simulator.url, tmp_path / "state", [{"name": "hub", "env": "EH_CONN"}]
    )
    config.write_text(config.read_text() + '\n[telemetry]\nlog_level = "debug"\n')
    log = tmp_path / "agent.log"
    agent = _agent(config, {"EH_CONN": wrong}, log).start()
    agents.append(agent)
    simulator.sim.add_event({"EventType": "Freeze"})
    wait_for(lambda: "credential" in log.read_text(), timeout=30, what="the credential failure logged")
    assert agent.terminate() == 0

    outputs = [log.read_text()]
    for args in (["status"], ["status", "--json"], ["check"]):
        run = subprocess.run(
            [sys.executable, "-m", "se_forwarder", *args, "--config", str(config)],
            env={**os.environ, "EH_CONN": wrong},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        outputs.append(run.stdout + run.stderr)
    everything = "\n".join(outputs)
    assert "Event Hubs credential (connection-string) was refused" in everything
    assert secret_key not in everything
    assert wrong not in everything
    assert "SharedAccessKey=" not in everything
    assert "refused" in outputs[1] or "refused" in outputs[2], "status shows the reason"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """The agents talk to loopback only."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
