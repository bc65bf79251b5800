"""The command line as a new user runs it: real subprocesses, real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import requests
from cloudevents.core.formats.json import JSONFormat

from tests.support.agent import AgentProcess, Control, read_jsonl
from tests.support.cli import cli
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.waiting import wait_for


def test_demo_ends_by_itself_within_a_minute_with_every_type(tmp_path):
    out = tmp_path / "d.jsonl"
    began = time.monotonic()
    result = cli("demo", "--sink", f"file:{out}", timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert time.monotonic() - began < 60
    assert "summary:" in result.stdout
    events = [JSONFormat().read(None, line) for line in out.read_text().splitlines()]
    types = {e.get_type().rsplit(".", 1)[1] for e in events}
    assert types == {"scheduled", "approved", "started", "completed", "recovered", "canceled"}
    assert all(e.get_attributes()["specversion"] == "1.0" for e in events)
    assert "Traceback" not in result.stderr


@pytest.fixture
def simulate_process():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "se_forwarder", "simulate", "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url), timeout=15, what="simulate to listen")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(url: str) -> bool:
    try:
        requests.get(url + "/metadata/scheduledevents?api-version=2020-07-01", timeout=1)
        return True
    except requests.ConnectionError:
        return False


def test_simulate_answers_with_the_header_and_refuses_without(simulate_process):
    url = simulate_process + "/metadata/scheduledevents?api-version=2020-07-01"
    ok = requests.get(url, headers={"Metadata": "true"}, timeout=5)
    assert ok.status_code == 200 and "DocumentIncarnation" in ok.json()
    assert requests.get(url, timeout=5).status_code == 400


def test_simulate_accepts_start_requests_and_the_event_starts(simulate_process):
    control = Control(simulate_process)
    event_id = control.add(EventType="Reboot")["EventId"]
    url = simulate_process + "/metadata/scheduledevents?api-version=2020-07-01"
    r = requests.post(url, headers={"Metadata": "true"},
                      json={"StartRequests": [{"EventId": event_id}]}, timeout=5)
    assert r.status_code == 200
    status = {e["EventId"]: e["EventStatus"] for e in control.document()["Events"]}
    assert status[event_id] == "Started"


def test_simulate_refuses_a_malformed_post(simulate_process):
    url = simulate_process + "/metadata/scheduledevents?api-version=2020-07-01"
    r = requests.post(url, headers={"Metadata": "true"}, data=b"{not json", timeout=5)
    assert r.status_code == 400


@pytest.mark.parametrize(
    "toml, key",
    [
        ("[imds]\npoll_intervall = 1\n", "imds.poll_intervall"),
        ('[imds]\nurl = "not a url"\n', "imds.url"),
        ('[[sinks]]\ntype = "carrier-pigeon"\n', "sinks[0].type"),
    ],
)
def test_bad_config_is_one_line_naming_it_and_exit_2(tmp_path, toml, key):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    result = cli("run", "--config", str(path), "--state-dir", str(tmp_path / "s"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_bad_sink_flag_is_one_line_and_exit_2(tmp_path):
    result = cli("run", "--sink", "kafka:x", "--state-dir", str(tmp_path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_unreachable_imds_with_once_is_one_line_and_non_zero(tmp_path):
    result = cli("run", "--once", "--imds-url", f"http://127.0.0.1:{free_port()}",
                 "--state-dir", str(tmp_path))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "unreachable" in result.stderr.strip().splitlines()[-1]


def test_unwritable_state_dir_is_one_line_and_non_zero(tmp_path, simulator):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = cli("run", "--once", "--imds-url", simulator.url, "--state-dir", str(blocker / "x"))
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and "state" in result.stderr


def test_once_polls_delivers_and_exits(tmp_path, simulator, control):
    event_id = control.add(EventType="Reboot")["EventId"]
    out = tmp_path / "o.jsonl"
    result = cli("run", "--once", "--imds-url", simulator.url, "--state-dir", str(tmp_path / "s"),
                 "--sink", f"file:{out}")
    assert result.returncode == 0, result.stderr
    assert [e["id"] for e in read_jsonl(out)] == [f"{event_id}/scheduled"]


def test_events_prints_the_document_as_json(simulator, control):
    event_id = control.add(EventType="Freeze", DurationInSeconds=5)["EventId"]
    result = cli("events", "--imds-url", simulator.url, "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["Events"][0]["EventId"] == event_id


def test_events_prints_a_table(simulator, control):
    event_id = control.add(EventType="Freeze", DurationInSeconds=5)["EventId"]
    result = cli("events", "--imds-url", simulator.url)
    assert event_id in result.stdout and "Freeze" in result.stdout


def test_approve_starts_the_event_and_records_it(tmp_path, simulator, control):
    event_id = control.add(EventType="Reboot")["EventId"]
    result = cli("approve", event_id, "--imds-url", simulator.url, "--state-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert [a["EventId"] for a in control.approvals()] == [event_id]
    status = cli("status", "--state-dir", str(tmp_path), "--json")
    assert json.loads(status.stdout)["last_approvals"][0]["ApprovedBy"] == "cli"


def test_approve_refuses_an_event_not_in_the_document(tmp_path, simulator, control):
    result = cli("approve", "00000000-0000-0000-0000-000000000000", "--imds-url", simulator.url,
                 "--state-dir", str(tmp_path))
    assert result.returncode != 0 and "not in the document" in result.stderr
    assert control.approvals() == []


def test_status_shows_backlog_and_last_poll(tmp_path, simulator, control, agents):
    agent = AgentProcess(["--imds-url", simulator.url, "--state-dir", str(tmp_path / "s"),
                          "--sink", f"file:{tmp_path / 'o.jsonl'}", "--poll-interval", "0.1"])
    agents.append(agent.start())
    control.add(EventType="Reboot")
    wait_for(lambda: read_jsonl(tmp_path / "o.jsonl"), what="delivery")
    info = json.loads(cli("status", "--state-dir", str(tmp_path / "s"), "--json").stdout)
    assert info["last_poll"]["ok"] is True
    assert info["sinks"][0]["backlog"] == 0 and info["sinks"][0]["delivered"] == 1
    assert len(info["pending_events"]) == 1
    table = cli("status", "--state-dir", str(tmp_path / "s")).stdout
    assert "last poll" in table and "backlog" in table


def test_status_without_state_is_one_line(tmp_path):
    result = cli("status", "--state-dir", str(tmp_path / "none"))
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1


def test_check_names_what_fails(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f'[imds]\nurl = "http://127.0.0.1:{free_port()}"\n'
                    f'[[sinks]]\ntype = "file"\npath = "{tmp_path}/o.jsonl"\n')
    result = cli("check", "--config", str(path))
    assert result.returncode == 1
    assert "FAIL  imds" in result.stdout and "ok    sink file:" in result.stdout
