"""Logs: JSON lines off a terminal, text on one, consistent fields, never a secret."""

from __future__ import annotations

import base64
import json
import logging
import os
import pty
import re
import secrets
import select
import subprocess
import sys
import time

from se_forwarder import telemetry
from se_forwarder.outbox import Outbox
from tests.eventhubs.broker import EventHubsBroker
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.config import write_config
from tests.support.endpoint import HttpEndpoint
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

NOT_SYSTEMD = {"INVOCATION_ID": "", "JOURNAL_STREAM": ""}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NOT_SYSTEMD}
    return {**env, **extra}


def last_error(state_dir, sink):
    with Outbox(state_dir, readonly=True) as box:
        return box.sink_status(sink).last_error


def test_no_secret_appears_in_any_log_line_of_a_full_run(simulator, control, agents, tmp_path):
    hook_secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    token = secrets.token_hex(24)
    wrong_key = base64.b64encode(secrets.token_bytes(32)).decode()
    with EventHubsBroker() as broker, HttpEndpoint(200, script=[503, 500]) as hook:
        good_conn = broker.connection_string()
        bad_conn = broker.connection_string(key=wrong_key)
        env = {"HOOK_SECRET": hook_secret, "HOOK_TOKEN": f"Bearer {token}", "EH_CONN": good_conn,
               "EH_BAD_CONN": bad_conn}
        cfg = write_config(
            tmp_path / "agent.toml",
            sinks=[
                {"type": "webhook", "url": f"{hook.url}/events?code={token}", "secret_env": "HOOK_SECRET",
                 "headers": {"Authorization": {"env": "HOOK_TOKEN"}}},
                {"type": "eventhubs", "name": "eh", "eventhub": "scheduled-events",
                 "credential": "connection-string", "connection_string_env": "EH_CONN"},
                {"type": "eventhubs", "name": "eh-refused", "eventhub": "scheduled-events",
                 "credential": "connection-string", "connection_string_env": "EH_BAD_CONN"},
            ],
            imds={"url": simulator.url, "poll_interval": 0.1},
            state={"dir": str(tmp_path / "state")},
            telemetry={"log_level": "debug", "log_format": "json"},
        )
        broker.fail_next_sends(2)
        log_path = tmp_path / "agent.log"
        agent = AgentProcess(["--config", str(cfg)], env=env, log_path=log_path).start()
        agents.append(agent)
        a = control.add(EventType="Reboot")["EventId"]
        control.add(EventType="Freeze", DurationInSeconds=5)  # approved by the default policy
        wait_for(lambda: len(hook.posts()) >= 2 + 3, timeout=30, what="webhook retries, then 3 events")
        control.patch(a, EventStatus="Started")
        wait_for(lambda: len(list(broker.all_messages())) >= 4, timeout=30, what="Event Hubs deliveries")
        wait_for(lambda: last_error(tmp_path / "state", "eh-refused"), what="refused key noted")
        assert agent.terminate() == 0

    lines = log_path.read_text().splitlines()
    assert len(lines) > 10
    assert any('"sink": "eh-refused"' in line for line in lines), "the refusal was never logged"
    assert any("retry" in line and "webhook" in line for line in lines), "no webhook retry logged"
    leaks = {name: value for name, value in {
        "webhook secret": hook_secret, "webhook key": hook_secret[len("whsec_"):],
        "bearer token": token, "connection string": good_conn, "refused connection string": bad_conn,
        "access key": broker.key, "refused access key": wrong_key,
    }.items() if any(value in line for line in lines)}
    assert leaks == {}


def test_lines_are_json_with_consistent_fields_when_not_on_a_terminal(simulator, control, agents,
                                                                      tmp_path):
    out = tmp_path / "out.jsonl"
    with HttpEndpoint(200, script=[503]) as hook:
        cfg = write_config(tmp_path / "agent.toml",
                           sinks=[{"type": "file", "path": str(out)},
                                  {"type": "webhook", "url": f"{hook.url}/events"}],
                           imds={"url": simulator.url, "poll_interval": 0.1},
                           state={"dir": str(tmp_path / "state")})
        log_path = tmp_path / "agent.log"
        agent = AgentProcess(["--config", str(cfg)], env=clean_env(), log_path=log_path).start()
        agents.append(agent)
        event_id = control.add(EventType="Reboot")["EventId"]
        wait_for(lambda: len(hook.posts()) == 2, what="a retried webhook delivery")
        wait_for(lambda: read_jsonl(out), what="file delivery")
        assert agent.terminate() == 0
    records = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    (transition,) = [r for r in records if r["message"] == "transition scheduled"]
    assert (transition["event_id"], transition["state"], transition["incarnation"]) == (
        event_id, "scheduled", control.document()["DocumentIncarnation"])
    retry = next(r for r in records if r["message"].startswith("delivery failed"))
    assert retry["sink"] == f"webhook:{hook.url}/events" and retry["event_id"] == event_id


def test_lines_are_text_on_a_terminal(simulator, tmp_path):
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "se_forwarder", "run", "--imds-url", simulator.url,
         "--state-dir", str(tmp_path / "state"), "--sink", f"file:{tmp_path / 'o.jsonl'}"],
        cwd=ROOT, env=clean_env(), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 15
        while b"this VM is" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                seen += os.read(master, 4096)
    finally:
        proc.terminate()
        proc.wait(10)
        os.close(master)
    lines = [ln for ln in seen.decode().splitlines() if ln.strip()]
    assert any("this VM is vm0" in ln for ln in lines)
    assert all(re.match(r"^\d\d:\d\d:\d\d (info|warning) ", ln) for ln in lines), lines


def test_redaction_scrubs_secret_shaped_text_even_when_not_configured():
    record = logging.LogRecord(
        "se_forwarder.x", logging.ERROR, __file__, 1,
        "failed: Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;"
        "SharedAccessKey=c2VjcmV0a2V5MTIzNDU2Nzg5MA==;EntityPath=hub, signing with "
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, url https://acct.queue.core.windows.net/q?sv=2024"
        "&sig=abcDEF123%2Bxyz&se=2030, header Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.x",
        (), None,
    )
    for formatter in (telemetry.JsonFormatter(), telemetry.TextFormatter()):
        line = formatter.format(record)
        for secret in ("c2VjcmV0a2V5MTIzNDU2Nzg5MA", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                       "abcDEF123", "eyJhbGciOiJIUzI1NiJ9"):
            assert secret not in line
        assert "SharedAccessKey=***" in line and "whsec_***" in line and "Bearer ***" in line


def test_waiting_for_the_first_imds_answer_counts_down(simulator, agents, tmp_path):
    # The first scheduled-events request switches the service on (the instance metadata does not).
    simulator.sim.add_fault({"route": "scheduledevents", "delay_seconds": 3.5})
    simulator.sim.add_event({"EventType": "Reboot"})
    cfg = write_config(tmp_path / "agent.toml", sinks=[{"type": "file", "path": str(tmp_path / "o")}],
                       imds={"url": simulator.url, "first_call_timeout": 8},
                       state={"dir": str(tmp_path / "state")})
    log_path = tmp_path / "agent.log"
    agents.append(AgentProcess(["--config", str(cfg)], env=clean_env(), log_path=log_path).start())
    wait_for(lambda: "transition scheduled" in log_path.read_text(), timeout=15, what="IMDS answered")
    messages = [json.loads(line)["message"] for line in log_path.read_text().splitlines()]
    assert any("the first answer may take up to 8 s" in m for m in messages)
    left = [int(m.split(": ")[1].split()[0]) for m in messages
            if m.startswith("still waiting for the first IMDS answer: ")]
    assert len(left) >= 2 and left == sorted(set(left), reverse=True) and left[0] < 8, left
