"""``se-forwarder simulate`` (run as ``python -m se_forwarder.simulator``): options, bad input,
signals."""

from __future__ import annotations

import signal
import socket
import time

import pytest
from click.testing import CliRunner

from se_forwarder.cli.simulate import simulate_command
from se_forwarder.simulator import builtin_names

BAD_SCENARIOS = {
    "invalid.toml": ("[[events]\nat = 0\n", "invalid TOML"),
    "invalid.json": ('{"events": [', "invalid JSON"),
    "unknown-key.toml": ('colour = "red"\n[[events]]\nat = 0\n', "'colour'"),
    "bad-type.toml": ('[[events]]\nEventType = "Explode"\n', "EventType"),
    "negative.toml": ("[[events]]\nat = -5\n", "at must be"),
    "placeholder.toml": ('[[events]]\nResources = ["{nobody}"]\n', "{nobody}"),
    "dangling.toml": (
        '[[events]]\nat = 0\n[[actions]]\nat = 1\ndo = "delete"\nevent = "x"\n',
        "unknown event 'x'",
    ),
    "empty.toml": ('description = "nothing"\n', "no [[events]]"),
    "bad-fault.toml": ('[[actions]]\nat = 1\ndo = "fault"\nfault = { status = 9 }\n', "status"),
    "scenario.yaml": ("events: []\n", "must end in .toml or .json"),
}


@pytest.mark.parametrize("filename", sorted(BAD_SCENARIOS))
def test_bad_scenario_file_is_one_line_naming_the_problem_and_exit_2(filename, tmp_path, run_cli):
    text, named = BAD_SCENARIOS[filename]
    path = tmp_path / filename
    path.write_text(text)
    result = run_cli("--scenario", str(path), "--port", "0")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert named in lines[0] and str(path) in lines[0]
    assert "Traceback" not in result.stderr


def test_missing_scenario_is_one_line_listing_the_built_ins(run_cli):
    result = run_cli("--scenario", "/nonexistent/drill.toml")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "live-migration" in result.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--time-scale", "0"], "time_scale"),
        (["--vms", "vm0,,vm1"], "--vms"),
        (["--vms", "vm0,vm0"], "unique"),
        (["--vm-name", "bad name!"], "bad VM name"),
        (["--fault", "colour=red"], "colour"),
        (["--param", "novalue"], "KEY=VALUE"),
        (["--scenario", "vmss-terminate", "--param", "colour=1"], "colour"),
        (["--port", "70000"], "port"),
        (["--first-call-delay", "-1"], "first_call_delay"),
        (["--new-event-id-per-state"], "--scenario"),
    ],
)
def test_bad_option_value_is_one_line_and_exit_2(args, named):
    result = CliRunner().invoke(simulate_command, args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.output


def test_list_scenarios_describes_every_built_in(run_cli):
    result = run_cli("--list-scenarios")
    assert result.returncode == 0
    listed = [line.split()[0] for line in result.stdout.splitlines()]
    assert listed == builtin_names()
    assert "notice=300" in result.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_simulator_stops_with_exit_0_on_sigint_and_sigterm(sig, cli_simulator):
    cli = cli_simulator("--quiet")
    assert cli.stop(sig) == 0


def test_simulator_prints_its_url_and_every_document_change(cli_simulator, http):
    cli = cli_simulator(
        "--scenario", "hardware-failure", "--time-scale", "600", "--start", "immediately"
    )
    deadline = time.monotonic() + 10
    while not any("finished" in line for line in cli.lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cli.stop() == 0
    text = "".join(cli.lines)
    assert cli.url.startswith("http://127.0.0.1:")
    assert "incarnation 2: Reboot" in text and "added (Started" in text
    assert "incarnation 3: Reboot" in text and "removed (completed)" in text
    assert "scenario hardware-failure finished" in text


def test_port_already_in_use_is_one_line_and_a_failure_exit(run_cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run_cli("--port", str(taken.getsockname()[1]))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cannot listen" in result.stderr


def test_simulator_serves_microsofts_mock_server_formats_when_asked(cli_simulator, http):
    cli = cli_simulator("--scenario", "user-reboot", "--start", "immediately", "--quiet",
                        "--not-before-format", "iso8601", "--new-event-id-per-state")
    (event,) = http.get(f"{cli.url}/metadata/scheduledevents?api-version=2020-07-01",
                        headers={"Metadata": "true"}, timeout=5).json()["Events"]
    assert event["NotBefore"].endswith("Z") and "T" in event["NotBefore"]
    status = http.get(f"{cli.url}/control/scenario", timeout=5).json()
    assert status["new_event_id_per_state"] is True
    assert cli.stop() == 0
