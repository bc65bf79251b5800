"""Configuration of the pagerduty and opsgenie sinks: every key checked, every mistake named in one
line, the key read from the environment or a file (never the configuration), and a run of the agent
with a bad setting that stops in one line, exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from se_forwarder import config, sinks
from se_forwarder.errors import ConfigError
from tests.support.paths import ROOT

from .conftest import API_KEY, ROUTING_KEY, pager_sink

PD = {"routing_key_env": "PD_ROUTING_KEY"}
OG = {"api_key_env": "OG_API_KEY"}


def refused(kind: str, **options) -> str:
    with pytest.raises(ConfigError) as info:
        sinks.validate(kind, options, "sinks[0]")
    message = str(info.value)
    assert "\n" not in message
    return message


def not_created(kind: str, **options) -> str:
    with pytest.raises(ConfigError) as info:
        pager_sink(kind, **options)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_pagerduty_defaults_page_platform_events_of_this_vm_at_pagerdutys_enqueue_url() -> None:
    options = sinks.validate("pagerduty", dict(PD), "sinks[0]")

    assert options["url"] == "https://events.pagerduty.com/v2/enqueue"
    assert options["sources"] == ("Platform",)
    assert options["event_types"] == ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
    assert options["only_this_vm"] is True
    assert dict(options["severity"]) == {"Freeze": "info", "Reboot": "warning", "Redeploy": "error",
                                         "Preempt": "critical", "Terminate": "warning"}
    assert sinks.default_name("pagerduty", options) == "pagerduty:https://events.pagerduty.com/v2/enqueue"


def test_opsgenie_defaults_to_the_us_endpoint_and_eu_picks_the_eu_one() -> None:
    us = sinks.validate("opsgenie", dict(OG), "sinks[0]")
    eu = sinks.validate("opsgenie", {**OG, "region": "eu"}, "sinks[0]")

    assert us["url"] == "https://api.opsgenie.com"
    assert eu["url"] == "https://api.eu.opsgenie.com"
    assert dict(us["priority"])["Preempt"] == "P1"
    assert sinks.default_name("opsgenie", eu) == "opsgenie:https://api.eu.opsgenie.com"


def test_severity_and_priority_tables_override_the_defaults_per_event_type_in_any_case() -> None:
    pd = sinks.validate("pagerduty", {**PD, "severity": {"freeze": "Critical"}}, "sinks[0]")
    og = sinks.validate("opsgenie", {**OG, "priority": {"REBOOT": "p1"}}, "sinks[0]")

    assert dict(pd["severity"])["Freeze"] == "critical" and dict(pd["severity"])["Reboot"] == "warning"
    assert dict(og["priority"])["Reboot"] == "P1"


@pytest.mark.parametrize(("kind", "options", "start"), [
    ("pagerduty", {**PD, "retries": 3}, "sinks[0].retries: unknown key"),
    ("pagerduty", {**PD, "verify": False}, "sinks[0].verify: unknown key"),
    ("pagerduty", {**PD, "routing_key": ROUTING_KEY},
     "sinks[0].routing_key: a secret never goes in the configuration file"),
    ("opsgenie", {**OG, "api_key": API_KEY},
     "sinks[0].api_key: a secret never goes in the configuration file"),
    ("pagerduty", {}, "sinks[0]: give exactly one of routing_key_env"),
    ("pagerduty", {**PD, "routing_key_file": "/k"}, "sinks[0]: give exactly one of routing_key_env"),
    ("opsgenie", {}, "sinks[0]: give exactly one of api_key_env"),
    ("pagerduty", {"routing_key_env": " "}, "sinks[0].routing_key_env: must not be empty"),
    ("pagerduty", {"routing_key_file": 7}, "sinks[0].routing_key_file: must be a string"),
    ("pagerduty", {**PD, "url": "http://events.example.com/v2/enqueue"},
     "sinks[0].url: plain http is allowed only to a loopback address"),
    ("pagerduty", {**PD, "url": "https://u:p@events.example.com/v2/enqueue"},
     "sinks[0].url: give only scheme, host, port and path"),
    ("pagerduty", {**PD, "url": "ftp://events.example.com"},
     "sinks[0].url: 'ftp://events.example.com' is not"),
    ("pagerduty", {**PD, "severity": {"Reboo": "error"}}, "sinks[0].severity.Reboo: not an event type"),
    ("pagerduty", {**PD, "severity": {"Reboot": "high"}}, "sinks[0].severity.Reboot: 'high' is not one of"),
    ("pagerduty", {**PD, "severity": "error"}, "sinks[0].severity: must be a table of event types"),
    ("pagerduty", {**PD, "severity": {"Reboot": 3}}, "sinks[0].severity.Reboot: must be a string"),
    ("opsgenie", {**OG, "priority": {"Freeze": "P6"}}, "sinks[0].priority.Freeze: 'P6' is not one of"),
    ("opsgenie", {**OG, "region": "asia"}, "sinks[0].region: 'asia' is not one of us, eu"),
    ("opsgenie", {**OG, "region": "eu", "url": "https://og.example.com"}, "sinks[0]: give region or url"),
    ("opsgenie", {**OG, "tags": "team"}, "sinks[0].tags: must be a list of at most 17 tags"),
    ("opsgenie", {**OG, "tags": ["two words"]}, "sinks[0].tags[0]: 'two words' is not a tag"),
    ("opsgenie", {**OG, "tags": ["x" * 51]}, "sinks[0].tags[0]:"),
    ("pagerduty", {**PD, "sources": ["Platfrom"]},
     "sinks[0].sources[0]: 'Platfrom' is not one of Platform, User"),
    ("pagerduty", {**PD, "sources": []}, "sinks[0].sources: must be a non-empty list"),
    ("opsgenie", {**OG, "event_types": ["Reboot", "Restart"]},
     "sinks[0].event_types[1]: 'Restart' is not one of"),
    ("pagerduty", {**PD, "only_this_vm": "yes"}, "sinks[0].only_this_vm: must be true or false"),
    ("pagerduty", {**PD, "connect_timeout": 0}, "sinks[0].connect_timeout: 0 is out of range"),
    ("opsgenie", {**OG, "read_timeout": "slow"}, "sinks[0].read_timeout: must be a number"),
    ("pagerduty", {**PD, "name": ""}, "sinks[0].name: must not be empty"),
])
def test_each_mistake_is_named_in_one_line(kind, options, start) -> None:
    message = refused(kind, **options)

    assert message.startswith(start), message


def test_the_routing_key_variable_must_be_set(monkeypatch) -> None:
    monkeypatch.delenv("PD_ROUTING_KEY", raising=False)

    assert not_created("pagerduty", **PD) == (
        "sink 'pager': environment variable PD_ROUTING_KEY (the routing key) is not set or empty")


def test_a_routing_key_that_is_not_an_integration_key_is_refused_without_showing_it(monkeypatch) -> None:
    monkeypatch.setenv("PD_ROUTING_KEY", "u+abcdefghijklmnopqr")  # a REST API key's shape

    message = not_created("pagerduty", **PD)

    assert message.startswith(
        "sink 'pager': the routing key from $PD_ROUTING_KEY is not 32 letters and digits")
    assert "u+abcdefghijklmnopqr" not in message


def test_the_key_file_must_exist_and_hold_one_key(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    empty = tmp_path / "empty"
    empty.write_text("# the key goes here\n")
    two = tmp_path / "two"
    two.write_text(f"{API_KEY}\n{API_KEY}\n")

    assert not_created("opsgenie", api_key_file=str(missing)).startswith(
        f"sink 'pager': cannot read the API key from {missing}:")
    assert not_created("opsgenie", api_key_file=str(empty)) == (
        f"sink 'pager': {empty} must hold the API key on one line (it holds 0 lines besides # comments)")
    assert not_created("opsgenie", api_key_file=str(two)).endswith("(it holds 2 lines besides # comments)")


def test_the_key_is_read_from_a_file_with_comments(tmp_path: Path, opsgenie) -> None:
    key_file = tmp_path / "og.key"
    key_file.write_text(f"# Opsgenie API integration 'azure-maintenance'\n{API_KEY}\n")

    sink = pager_sink("opsgenie", api_key_file=str(key_file), url=opsgenie.base_url)

    assert sink.check() is None  # the stand-in answers the probe 404 (no such request) to a valid key


def test_a_ca_file_that_holds_no_certificate_stops_the_start(tmp_path: Path, keys) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n")

    assert not_created("pagerduty", **PD, ca_file=str(bogus)) == (
        f"sink 'pager' ca_file: {bogus} holds no PEM certificate (BEGIN CERTIFICATE)")


def test_a_sink_table_of_the_configuration_file_is_read_with_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[sinks]]\ntype = "pagerduty"\nrouting_key_env = "PD_ROUTING_KEY"\n'
                    'severity = { Freeze = "warning" }\nsources = ["Platform", "User"]\n'
                    '[[sinks]]\ntype = "opsgenie"\nregion = "eu"\n'
                    'api_key_file = "/etc/se-forwarder/opsgenie.key"\n')

    pd, og = config.load(path, env={}).sinks

    assert (pd.type, pd.name, og.type, og.name) == (
        "pagerduty", "pagerduty:https://events.pagerduty.com/v2/enqueue",
        "opsgenie", "opsgenie:https://api.eu.opsgenie.com")
    assert pd.options["sources"] == ("Platform", "User")


def test_the_agent_stops_in_one_line_with_exit_2_when_the_key_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[sinks]]\ntype = "pagerduty"\nrouting_key_env = "SE_TEST_NO_SUCH_KEY"\n')

    done = subprocess.run([sys.executable, "-m", "se_forwarder", "run", "--config", str(path),
                           "--state-dir", str(tmp_path / "s"), "--imds-url", "http://127.0.0.1:9"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(
        "environment variable SE_TEST_NO_SUCH_KEY (the routing key) is not set or empty")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("page", ["docs/pagerduty-opsgenie.md", "docs/configuration.md", "README.md"])
def test_the_pager_examples_of_the_docs_load_as_copied(page: str, tmp_path: Path) -> None:
    blocks = [b for b in re.findall(r"^```toml\n(.*?)^```", (ROOT / page).read_text(), re.S | re.M)
              if "pagerduty" in b or "opsgenie" in b]
    assert blocks
    for number, block in enumerate(blocks):
        path = tmp_path / f"example-{number}.toml"
        path.write_text(block)
        kinds = {s.type for s in config.load(path, env={}).sinks}
        assert kinds & {"pagerduty", "opsgenie"}


def test_check_reaches_both_services_and_says_when_opsgenie_refuses_the_key(simulator, opsgenie, pagerduty,
                                                                             tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[imds]\nurl = "{simulator.url}"\n[state]\ndir = "{tmp_path / "s"}"\n'
                    f'[[sinks]]\ntype = "opsgenie"\nurl = "{opsgenie.base_url}"\napi_key_env = "OG_API_KEY"\n'
                    f'[[sinks]]\ntype = "pagerduty"\nurl = "{pagerduty.url}"\n'
                    'routing_key_env = "PD_ROUTING_KEY"\n')

    def check(api_key: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "OG_API_KEY": api_key, "PD_ROUTING_KEY": ROUTING_KEY}
        return subprocess.run([sys.executable, "-m", "se_forwarder", "check", "--config", str(path)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    good, bad = check(API_KEY), check("not-the-integration-key")

    assert good.returncode == 0, good.stdout
    assert f"ok    sink opsgenie:{opsgenie.base_url}" in good.stdout.splitlines()
    assert f"ok    sink pagerduty:{pagerduty.url}" in good.stdout.splitlines()
    assert bad.returncode == 1
    assert (f"FAIL  sink opsgenie:{opsgenie.base_url}: HTTP 401 from {opsgenie.base_url}: Opsgenie refuses "
            "the API key") in bad.stdout
    assert pagerduty.requests == [r for r in pagerduty.requests if r.method == "OPTIONS"]  # nobody paged
    assert opsgenie.alerts.opened == {}
