"""The agent's identity key: `se-forwarder run` as a subprocess makes it once and keeps it.

The agents here have an Event Hubs sink (the sinks that sign) whose hub nobody listens on: the key
is about the agent, not about a delivery."""

from __future__ import annotations

import stat

from se_forwarder.approvals import signing
from tests.support.agent import AgentProcess, log_records
from tests.support.cli import cli
from tests.support.config import write_agent_config, write_config
from tests.support.ports import free_port
from tests.support.waiting import wait_for

HUB = "EH_NOWHERE"


ENV = {HUB: f"Endpoint=sb://127.0.0.1:{free_port()}/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0;"
            "EntityPath=scheduled-events;UseDevelopmentEmulator=true"}


def _config(tmp_path, simulator):
    return write_config(
        tmp_path / "agent.toml",
        [{"type": "file", "path": str(tmp_path / "events.jsonl")},
         {"type": "eventhubs", "eventhub": "scheduled-events", "credential": "connection-string",
          "connection_string_env": HUB}],
        imds={"url": simulator.url, "poll_interval": 0.1}, state={"dir": str(tmp_path / "state")},
        telemetry={"log_format": "json", "log_level": "debug"})


def _key_lines(log):
    return [r for r in log_records(log) if r.get("message", "").startswith("identity key ")]


def test_the_agent_makes_its_identity_key_once_private_and_keeps_it_across_restarts(
        simulator, agents, tmp_path):
    config = _config(tmp_path, simulator)
    key_file = tmp_path / "state" / "identity.key"
    log = tmp_path / "agent.log"
    first = AgentProcess(["--config", str(config)], env=ENV, log_path=log).start()
    agents.append(first)
    wait_for(lambda: _key_lines(log), timeout=30, what="the identity key line")
    assert first.terminate() == 0
    made = key_file.read_bytes()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = signing.load_private_key(made, "the key file")
    assert _key_lines(log)[0]["message"] == f"identity key {signing.keyid(key)} made ({key_file})"

    again = AgentProcess(["--config", str(config)], env=ENV, log_path=log).start()
    agents.append(again)
    wait_for(lambda: len(_key_lines(log)) == 2, timeout=30, what="the second start's key line")
    assert again.terminate() == 0
    assert key_file.read_bytes() == made, "a restart keeps the identity"
    assert _key_lines(log)[1]["message"] == f"identity key {signing.keyid(key)} read ({key_file})"


def test_a_corrupt_identity_key_stops_the_agent_with_one_line(simulator, tmp_path):
    config = _config(tmp_path, simulator)
    key_file = tmp_path / "state" / "identity.key"
    key_file.parent.mkdir()
    key_file.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    key_file.chmod(0o600)
    run = cli("run", "--config", str(config), "--once", env=ENV)
    assert run.returncode == 3
    assert run.stderr.strip().splitlines() == [
        f"se-forwarder: error: identity key {key_file} is not an unencrypted Ed25519 private key "
        "(PKCS#8 PEM); move it away to make a new identity (the coordinator then sees a new key for this VM)"]
    assert "Traceback" not in run.stdout + run.stderr
    assert not (tmp_path / "events.jsonl").exists(), "nothing forwarded unsigned"


def test_an_identity_key_other_users_may_read_stops_the_agent(simulator, tmp_path):
    config = _config(tmp_path, simulator)
    key_file = tmp_path / "state" / "identity.key"
    key_file.parent.mkdir()
    key_file.write_bytes(signing.private_key_pem(signing.generate_private_key()))
    key_file.chmod(0o644)
    run = cli("run", "--config", str(config), "--once", env=ENV)
    assert run.returncode == 3
    assert run.stderr.strip().splitlines() == [
        f"se-forwarder: error: identity key {key_file} may be read by other users (mode 0644); "
        f"'chmod 600 {key_file}' and start again"]


def test_an_agent_without_an_event_hubs_sink_has_no_identity_key(simulator, tmp_path):
    config = write_agent_config(tmp_path / "agent.toml", imds_url=simulator.url,
                                state_dir=tmp_path / "state", sink_path=tmp_path / "events.jsonl")
    run = cli("run", "--config", str(config), "--once")
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "state" / "identity.key").exists(), "nothing it sends is signed"
