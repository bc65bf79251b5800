"""Configuring a Teams or Slack hook: one clear line for what does not apply, and the hook's secret
(path token or ``sig`` query) never in a name, a reason or a log line."""

from __future__ import annotations

import logging

import pytest

from se_forwarder import config
from se_forwarder.errors import ConfigError
from se_forwarder.outbox import Outbox
from se_forwarder.sinks import default_name, webhook
from se_forwarder.sinks.base import Retry
from se_forwarder.validation import public_url
from tests.support.chat_receiver import SLACK_TOKEN, TEAMS_SIG, ChatReceiver
from tests.support.receiver import Reply
from tests.support.sinks import run_worker

from .conftest import chat_sink
from .events import agent_event, store

SLACK_URL = "https://hooks.slack.com/services/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"
TEAMS_URL = ("https://prod-163.westeurope.logic.azure.com:443/workflows/4f1c0d9a3b2e4c5d8e7f6a5b4c3d2e1f"
             "/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0"
             "&sig=q1W2e3R4t5Y6u7I8o9P0a1S2d3F4g5H6j7K8l9Z0x1C")
POWER_PLATFORM_URL = (
    "https://default4e1f2d3c4b5a69788796a5b4c3d2e1f0.0f.environment.api.powerplatform.com:443"
    "/powerautomate/automations/direct/workflows/4f1c0d9a3b2e4c5d8e7f6a5b4c3d2e1f/triggers/manual/paths"
    "/invoke?api-version=1&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=q1W2e3R4t5Y6u7I8o9P0a1S2d3F4g5H6j7K8l9Z0x1C"
)


def load(tmp_path, body: str):
    path = tmp_path / "config.toml"
    path.write_text(body)
    return config.load(path, env={})


def problem(tmp_path, body: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, body)
    text = str(info.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("key", ["secret_env = \"HOOK_SECRET\"", "secret_file = \"/etc/hook.secret\""])
def test_a_signing_secret_with_a_chat_format_is_refused_in_one_line(tmp_path, key) -> None:
    text = problem(tmp_path, f'[[sinks]]\ntype = "webhook"\nformat = "slack"\nurl = "{SLACK_URL}"\n{key}\n')
    name = key.split(" ")[0]
    assert text == (f'sinks[0].{name}: format = "slack" sends no Standard Webhooks signature (slack hooks '
                    f"do not check one; the URL is the secret): remove {name}")


@pytest.mark.parametrize("line", ['mode = "batch"', "batch_max_events = 5", "handshake = true"])
def test_cloudevents_only_keys_are_refused_with_chat_formats(tmp_path, line) -> None:
    text = problem(tmp_path, f'[[sinks]]\ntype = "webhook"\nformat = "teams"\nurl = "{TEAMS_URL}"\n{line}\n')
    assert text.startswith(f"sinks[0].{line.split(' ')[0]}: ")


def test_an_unknown_event_name_is_named(tmp_path) -> None:
    text = problem(tmp_path, f'[[sinks]]\ntype = "webhook"\nformat = "teams"\nurl = "{TEAMS_URL}"\n'
                             'events = ["scheduled", "reboot"]\n')
    assert text.startswith("sinks[0].events[1]: 'reboot' is not one of scheduled, started")


def test_events_without_a_chat_format_is_refused(tmp_path) -> None:
    text = problem(tmp_path, '[[sinks]]\ntype = "webhook"\nurl = "https://h.example/x"\n'
                             'events = ["scheduled"]\n')
    assert text == 'sinks[0].events: only applies to format = "teams" or "slack"'


def test_an_unknown_format_is_named(tmp_path) -> None:
    text = problem(tmp_path, '[[sinks]]\ntype = "webhook"\nurl = "https://h.example/x"\nformat = "discord"\n')
    assert text == "sinks[0].format: 'discord' is not one of cloudevents, teams, slack"


@pytest.mark.parametrize(("url", "shown"), [
    (SLACK_URL, "https://hooks.slack.com/services/T024BE7LD/B0A1B2C3D4E/***"),
    (TEAMS_URL, "https://prod-163.westeurope.logic.azure.com:443/workflows/***/triggers/manual/paths/invoke"),
    (POWER_PLATFORM_URL, "https://default4e1f2d3c4b5a69788796a5b4c3d2e1f0.0f.environment.api.powerplatform.com"
                         ":443/powerautomate/automations/direct/workflows/***/triggers/manual/paths/invoke"),
])
def test_real_teams_and_slack_urls_are_shown_without_their_secret(url, shown) -> None:
    options = webhook.validate({"url": url, "format": "teams"}, "sinks[0]")
    assert public_url(url) == shown
    assert default_name("webhook", options) == f"webhook:{shown}"


@pytest.mark.parametrize("fmt", ["teams", "slack"])
def test_the_hook_secret_is_in_no_reason_and_no_log_line(fmt, state_dir, caplog) -> None:
    secret = TEAMS_SIG if fmt == "teams" else SLACK_TOKEN
    caplog.set_level(logging.DEBUG)
    with ChatReceiver(fmt) as receiver:
        receiver.script(Reply(503, body=b"busy"), Reply(400, body=b"invalid_payload"))
        sink = chat_sink(receiver.url, fmt)
        name = default_name("webhook", {"url": receiver.url})
        assert secret not in name
        store(state_dir, [agent_event("scheduled"), agent_event("started")], sink="chat")
        run_worker(sink, state_dir, lambda box: box.sink_status("chat").backlog == 0, 20)
        url = receiver.url
    down = chat_sink(url, fmt)  # the receiver is stopped: connection refused
    [refused] = down.deliver(store(state_dir, [agent_event("completed")])).outcomes

    assert isinstance(refused, Retry)
    with Outbox(state_dir) as box:
        [(_, dead, _)] = box.dead_letters("chat")
    # what the agent prints: its own records at any level, other libraries' from WARNING up
    printed = [r.getMessage() for r in caplog.records
               if r.name.startswith("se_forwarder") or r.levelno >= logging.WARNING]
    assert any("HTTP 503" in line for line in printed)
    for text in (refused.reason, dead, *printed):
        assert secret not in text


def readme_toml(heading: str) -> list[str]:
    """The ```toml blocks of one README section, as a reader would copy them."""
    from tests.support.paths import ROOT

    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in section.split("```toml\n")[1:]]


@pytest.mark.parametrize("heading", ["Teams, Slack, PagerDuty and Opsgenie", "Azure Monitor Logs"])
def test_the_readme_section_configs_load_as_copied(tmp_path, heading) -> None:
    [block] = readme_toml(heading)
    settings = load(tmp_path, block)
    assert settings.sinks


def test_the_webhook_sink_knows_every_chat_format_notify_renders():
    from se_forwarder import notify
    from se_forwarder.sinks import chat

    assert chat.FORMATS == notify.FORMATS
