"""End to end: simulator -> `se-forwarder run` subprocess -> a Slack hook and Azure Monitor Logs.

The agent reads a config file with the README's sink tables, gets its token from azure-identity's
managed-identity client (the IMDS token path, on loopback), and sends rows to the local ingestion
stand-in over HTTPS (the one mocked part: no emulator exists) and Block Kit messages to the local
Slack stand-in.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.agent import AgentProcess
from tests.support.chat_receiver import ChatReceiver
from tests.support.waiting import wait_for

from .conftest import RULE_ID, token_requests


def _config(path: Path, imds_url: str, state: Path, endpoint: str, ca_file: Path, hook: str) -> Path:
    path.write_text(f'''
[imds]
url = "{imds_url}"

[state]
dir = "{state}"

[approvals]
rules = []

[[sinks]]
type = "logs-ingestion"
endpoint = "{endpoint}"
rule_id = "{RULE_ID}"
client_id = "11111111-2222-3333-4444-555555555555"
ca_file = "{ca_file}"

[[sinks]]
type = "webhook"
format = "slack"
url = "{hook}"
''')
    return path


def test_the_agent_sends_rows_and_slack_messages_for_one_maintenance(
    simulator, control, agents, identity, endpoint, tls, tmp_path
) -> None:
    with ChatReceiver("slack") as slack:
        config = _config(tmp_path / "agent.toml", simulator.url, tmp_path / "state",
                         f"https://127.0.0.1:{endpoint.port}", tls.ca_cert, slack.url)
        agent = AgentProcess(["--config", str(config), "--poll-interval", "0.1"],
                             env={"SE_FORWARDER_IMDS_MAX_BACKOFF": "1"}, log_path=tmp_path / "agent.log")
        agents.append(agent.start())

        event_id = control.add(EventType="Reboot", NotBeforeInSeconds=900)["EventId"]
        wait_for(lambda: ("scheduled", event_id) in states(endpoint), timeout=30, what="scheduled row")
        control.patch(event_id, EventStatus="Started")
        wait_for(lambda: ("started", event_id) in states(endpoint), timeout=30, what="started row")
        control.delete(event_id)
        wait_for(lambda: ("recovered", event_id) in states(endpoint), timeout=30, what="recovered row")
        wait_for(lambda: len(slack.messages()) >= 4, timeout=30, what="four Slack messages")
        assert agent.terminate() == 0

    assert [s for s in states(endpoint) if s[1] == event_id] == \
        [("scheduled", event_id), ("started", event_id), ("completed", event_id), ("recovered", event_id)]
    assert slack.errors == []
    lines = [m["text"] for m in slack.messages()]
    assert "Reboot scheduled for " in lines[0] and ", in 1" in lines[0]
    assert lines[1].endswith("Reboot started")
    assert lines[2].endswith(("Reboot completed after 0 s", "Reboot completed after 1 s",
                              "Reboot completed after 2 s"))
    assert "back after Reboot, " in lines[3] and lines[3].endswith(" after it ended")
    requests = token_requests(identity)
    assert requests and all("client_id=11111111-2222-3333-4444-555555555555" in r.path for r in requests)


def states(endpoint) -> list[tuple[str, str]]:
    return [(row["State"], row["EventId"]) for row in endpoint.rows()]
